#pragma once
/// @file redis/detail/client_send.hpp
/// The Redis client's per-node step (members of RedisClient, redis/detail/client_core.hpp): one
/// pipelined request per node, the NOSCRIPT reload within the same deadline, and the results
/// filed per call with the node's breaker told how it did. Runs on the I/O thread, or on the
/// calling thread when nothing is sent. Include client.hpp, not this.

#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client_core.hpp"

namespace ratelimit::detail {

inline void RedisClient::send(RedisNodeClient& node, const OpPtr& op,
                              std::vector<std::size_t> indexes, bool asking, Settled then) {
  const auto fail_all = [&](const RedisFailure& f) {
    for (const std::size_t i : indexes) {
      op->results[i].reply.reset();
      op->results[i].failure = f;
    }
  };
  const CircuitBreaker::Pass pass = node.breaker.allow();
  if (pass == CircuitBreaker::Pass::refused) {
    short_circuits_.fetch_add(indexes.size(), std::memory_order_relaxed);
    fail_all(refused_by_breaker(node));
    return then(op, std::move(indexes));
  }
  const auto spent = [&] {  // the deadline passed before the calls reached the node
    const RedisFailure f{RedisFailureKind::timeout,
                         node.address().address() + ": timed out before sending"};
    report(f);
    fail_all(f);
    return then(op, std::move(indexes));
  };
  const auto sent_at = std::chrono::steady_clock::now();
  if (sent_at >= op->deadline) return spent();
  // The lent connection is taken before the calls are formatted: one the server closed (a
  // restart) is found here, and the scripts go as EVAL on the new connection, one round trip
  // after the connect instead of EVALSHA, NOSCRIPT and EVAL. The calling thread makes the
  // round trip itself on it when it may, and only once: a reload after NOSCRIPT goes through
  // the I/O thread. A call for the I/O thread with a script looks too (and gives it back at
  // once); one without scripts does not: plain commands go the same on any connection, the
  // loop finds a closed one itself before it writes, and looking costs the caller a poll().
  const bool here = op->here;
  op->here = false;
  const bool look = here || std::any_of(indexes.begin(), indexes.end(), [&](std::size_t i) {
                      return op->calls[i].script != nullptr;
                    });
  IoLoopCore::Lent lent = look ? loop_->lend(node.io) : IoLoopCore::Lent{};
  if (!here) lent.release();
  node.check_connections();
  IoRequest req;
  // Where each call's bytes end, for a reload that resends some of them (see `received`);
  // a single call is only ever resent as EVAL, so it needs none (one allocation less).
  std::vector<std::size_t> ends;
  if (indexes.size() > 1) ends.reserve(indexes.size());
  // Which calls go as EVAL with the script's body: all after ASKING (the importing node may
  // lack the script), otherwise the first call of each script the node is not known to hold
  // (the calls after it in the pipeline find it cached). The body costs bytes, not a round
  // trip: a process's first decision is one round trip instead of EVALSHA, NOSCRIPT, EVAL.
  // Once every script is held (nearly always) this allocates nothing.
  std::vector<char> full;  // empty: none goes as EVAL (all do after ASKING)
  const auto unknown = [&](std::size_t k) {
    const RedisScript* script = op->calls[indexes[k]].script;
    return script != nullptr && !node.scripts.holds(*script);
  };
  if (!asking) {
    std::vector<const RedisScript*> first;
    for (std::size_t k = 0; k < indexes.size(); ++k) {
      if (!unknown(k)) continue;
      const RedisScript* script = op->calls[indexes[k]].script;
      if (std::find(first.begin(), first.end(), script) != first.end()) continue;
      if (full.empty()) full.assign(indexes.size(), 0);
      first.push_back(script);
      full[k] = 1;
    }
  }
  const auto as_eval = [&](std::size_t k) { return asking || (!full.empty() && full[k] != 0); };
  std::size_t bytes = 0;
  for (std::size_t k = 0; k < indexes.size(); ++k)
    bytes += call_bytes(op->calls[indexes[k]], as_eval(k));
  if (asking) bytes += indexes.size() * (resp_header_bytes(1) + resp_argument_bytes(6));
  req.wire.reserve(bytes);
  for (std::size_t k = 0; k < indexes.size(); ++k) {
    // A large batch looks at its deadline as it is formatted: once it is spent (20,000 calls
    // took 100 ms under ASan), the rest would be formatted only to expire on the I/O thread.
    if (k % 1024 == 1023 && std::chrono::steady_clock::now() >= op->deadline) {
      lent.release();
      return spent();
    }
    if (asking) append_command(req.wire, {"ASKING"});
    append_call(req.wire, op->calls[indexes[k]], as_eval(k));
    if (indexes.size() > 1) ends.push_back(req.wire.size());
  }
  req.replies = indexes.size() * (asking ? 2 : 1);
  req.deadline = op->deadline;
  req.done = [this, &node, op, indexes = std::move(indexes), ends = std::move(ends), asking, pass,
              then = std::move(then), sent_at](IoOutcome&& o) mutable {
    if (const ObserverSet* obs = observers.current()) {
      const std::string address = node.address().address();
      const RoundTripEvent ev{address, std::chrono::steady_clock::now() - sent_at, !o.error};
      Observers::each(*obs, [&](Listener& l, bool) { l.on_round_trip(ev); });
    }
    received(node, op, std::move(indexes), ends, asking, pass, std::move(o), std::move(then));
  };
  if (here && loop_->round_trip_here(lent, req)) return;
  loop_->submit(node.io, std::move(req));
}

inline void RedisClient::received(RedisNodeClient& node, const OpPtr& op,
                                  std::vector<std::size_t> indexes,
                                  const std::vector<std::size_t>& ends, bool asking,
                                  CircuitBreaker::Pass pass, IoOutcome&& o, Settled then) {
  if (o.error) {
    if (o.error->node_fault()) breaker_failure(node, pass);
    const RedisFailure f{o.error->kind(), o.error->what()};
    report(f);
    for (const std::size_t i : indexes) op->results[i].failure = f;
    return then(op, std::move(indexes));
  }
  std::vector<RedisReplyPtr> replies;
  if (asking) {  // the ASKING reply says nothing unless it is an error
    for (std::size_t k = 0; k < indexes.size(); ++k)
      replies.push_back(o.replies[2 * k]->type == REDIS_REPLY_ERROR
                            ? std::move(o.replies[2 * k])
                            : std::move(o.replies[2 * k + 1]));
  } else {
    replies = std::move(o.replies);
  }
  // NOSCRIPT: the script cache was flushed (SCRIPT FLUSH, restart, failover). The call did not
  // run, so sending the script in full with EVAL (which also caches it) is safe.
  std::vector<std::size_t> reload;
  for (std::size_t j = 0; j < replies.size(); ++j) {
    const RedisScript* script = op->calls[indexes[j]].script;
    if (script == nullptr) continue;
    if (starts_with(*replies[j], "NOSCRIPT")) {
      node.scripts.forgot(*script);  // its next use goes as EVAL again
      reload.push_back(j);
    } else if (replies[j]->type != REDIS_REPLY_ERROR) {
      node.scripts.learned(*script);
    }
  }
  if (reload.empty() || std::chrono::steady_clock::now() >= op->deadline)
    return settle(node, op, std::move(indexes), std::move(replies), pass, std::move(then));
  // One EVAL per distinct script caches it; the calls after it in the same pipeline send
  // their EVALSHA again, the very bytes already formatted (a 20,000-call batch must neither
  // send the script 20,000 times nor format 20,000 commands again on the I/O thread).
  IoRequest req;
  // Which reloaded calls go as EVAL (the first of each script), then the bytes reserved for
  // them all before they are copied: a 20,000-call reload grew its 6 MB by doubling, copying
  // and faulting in about twice that: 32 ms of the I/O thread's time, against 14 ms reserved
  // (g++ -O2).
  std::vector<const RedisScript*> sent;
  std::vector<char> as_eval(reload.size());
  std::size_t bytes = 0;
  for (std::size_t k = 0; k < reload.size(); ++k) {
    const RedisCall& call = op->calls[indexes[reload[k]]];
    as_eval[k] = std::find(sent.begin(), sent.end(), call.script) == sent.end();
    if (as_eval[k]) sent.push_back(call.script);
    // Not the first call, so there are several and `ends` holds them (and reload[k] > 0).
    bytes += as_eval[k] ? call_bytes(call, true) : ends[reload[k]] - ends[reload[k] - 1];
  }
  req.wire.reserve(bytes);
  for (std::size_t k = 0; k < reload.size(); ++k) {
    const std::size_t j = reload[k];
    if (as_eval[k])
      append_call(req.wire, op->calls[indexes[j]], true);
    else
      req.wire.append(o.sent, ends[j - 1], ends[j] - ends[j - 1]);
  }
  script_loads_.fetch_add(sent.size(), std::memory_order_relaxed);
  req.replies = reload.size();
  req.deadline = op->deadline;
  // Shared, not moved in: a request's completion must be copyable (std::function).
  auto kept = std::make_shared<std::vector<RedisReplyPtr>>(std::move(replies));
  req.done = [this, &node, op, indexes = std::move(indexes), kept, reload = std::move(reload), pass,
              then = std::move(then)](IoOutcome&& again) mutable {
    std::vector<RedisReplyPtr>& held = *kept;
    if (again.error) {
      for (const std::size_t j : reload) {
        held[j].reset();
        op->results[indexes[j]].failure = RedisFailure{again.error->kind(), again.error->what()};
      }
      if (again.error->node_fault()) breaker_failure(node, pass);
      report({again.error->kind(), again.error->what()});
    } else {
      for (std::size_t r = 0; r < reload.size(); ++r) {
        held[reload[r]] = std::move(again.replies[r]);
        if (held[reload[r]]->type != REDIS_REPLY_ERROR)
          node.scripts.learned(*op->calls[indexes[reload[r]]].script);
      }
    }
    settle(node, op, std::move(indexes), std::move(held), pass, std::move(then));
  };
  loop_->submit(node.io, std::move(req));
}

inline void RedisClient::settle(RedisNodeClient& node, const OpPtr& op,
                                std::vector<std::size_t> indexes,
                                std::vector<RedisReplyPtr> replies, CircuitBreaker::Pass pass,
                                Settled then) {
  bool node_ok = true, answered = false;
  for (std::size_t j = 0; j < replies.size(); ++j) {
    if (!replies[j]) continue;  // failed in the reload
    answered = true;
    RedisResult& res = op->results[indexes[j]];
    const redisReply& r = *replies[j];
    if (r.type == REDIS_REPLY_ERROR && !keep_error(r)) {
      if (node_unavailable(r)) node_ok = false;
      res.failure = RedisFailure{RedisFailureKind::reply,
                                 node.address().address() + ": " + std::string(r.str, r.len)};
      report(*res.failure);
    } else {
      res.reply = std::move(replies[j]);
    }
  }
  if (answered && node_ok)
    breaker_success(node);
  else if (!node_ok)
    breaker_failure(node, pass);
  then(op, std::move(indexes));
}

}  // namespace ratelimit::detail
