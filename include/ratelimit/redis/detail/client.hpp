#pragma once
/// @file redis/detail/client.hpp
/// Runs script calls on Redis: node routing, pooled connections, EVALSHA with the NOSCRIPT
/// reload, the circuit breaker, failure accounting. Shared by every copy of a RedisStorage.

#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../core/detail/validate.hpp"
#include "../options.hpp"
#include "breaker.hpp"
#include "connection.hpp"
#include "keys.hpp"
#include "pool.hpp"
#include "script.hpp"

namespace ratelimit::detail {

/// One command for one client key: a script call (script != nullptr: EVALSHA script keys argv)
/// or a plain command (argv, e.g. DEL; keys only route it).
struct RedisCall {
  const RedisScript* script = nullptr;
  std::vector<std::string> keys;
  std::vector<std::string> argv;
};

/// A call's outcome: a reply that is not an error, or the failure.
struct RedisResult {
  RedisReplyPtr reply;
  std::optional<RedisFailure> failure;
};

/// One node: its pool and its breaker (failure policy and back-off are per node, so in a
/// cluster a dead primary does not degrade the other slots).
struct RedisNodeClient {
  RedisNodeClient(RedisNode node, RedisConnectionSettings settings, std::size_t pool_size,
                  std::chrono::milliseconds backoff, std::chrono::milliseconds max_backoff)
      : pool(std::move(node), std::move(settings), pool_size), breaker(backoff, max_backoff) {}
  RedisPool pool;
  CircuitBreaker breaker;
};

inline void check_redis_options(const RedisOptions& o) {
  using std::chrono::milliseconds;
  if (o.host.empty()) throw std::invalid_argument("host = \"\": must not be empty");
  if (o.port < 1 || o.port > 65535) invalid("port", o.port, "must be in [1, 65535]");
  if (o.db < 0) invalid("db", o.db, "must be >= 0");
  if (o.key_prefix.find_first_of("{}") != std::string::npos)
    throw std::invalid_argument("key_prefix = \"" + o.key_prefix +
                                "\": must not contain '{' or '}' (the key's hash tag follows)");
  if (o.connect_timeout < milliseconds{1})
    invalid("connect_timeout (ms)", o.connect_timeout.count(), "must be >= 1");
  if (o.command_timeout < milliseconds{1})
    invalid("command_timeout (ms)", o.command_timeout.count(), "must be >= 1");
  if (o.pool_size < 1) invalid("pool_size", static_cast<std::int64_t>(o.pool_size), "must be >= 1");
  if (o.fallback_divisor < 1 || o.fallback_divisor > 1'000'000)
    invalid("fallback_divisor", o.fallback_divisor, "must be in [1, 1000000]");
  if (o.ttl_margin < milliseconds{0} || o.ttl_margin > std::chrono::hours{24 * 366})
    invalid("ttl_margin (ms)", o.ttl_margin.count(), "must be in [0, 366 days]");
  if (o.breaker_backoff < milliseconds{1} || o.breaker_backoff > std::chrono::hours{1})
    invalid("breaker_backoff (ms)", o.breaker_backoff.count(), "must be in [1 ms, 1 h]");
  if (o.breaker_max_backoff < o.breaker_backoff || o.breaker_max_backoff > std::chrono::hours{1})
    invalid("breaker_max_backoff (ms)", o.breaker_max_backoff.count(),
            "must be in [breaker_backoff, 1 h]");
}

/// Thread safety: every member is safe from many threads.
/// The cluster hook: `execute`, `stats` and `retry_in` are virtual and the per-node machinery
/// (run_on, round_trip, counters) is protected, so detail::RedisClusterClient routes calls by
/// slot and reuses the rest; `keep_error` lets it receive MOVED/ASK/TRYAGAIN replies as replies
/// to follow instead of failures. A single node never overrides anything.
class RedisClient {
 public:
  virtual ~RedisClient() = default;

  explicit RedisClient(RedisOptions options)
      : options_((check_redis_options(options), std::move(options))),
        margin_ms_(std::to_string(options_.ttl_margin.count())) {
    nodes_.push_back(std::make_unique<RedisNodeClient>(
        RedisNode{options_.host, options_.port},
        RedisConnectionSettings{options_.connect_timeout, options_.command_timeout,
                                options_.password, options_.db},
        options_.pool_size, options_.breaker_backoff, options_.breaker_max_backoff));
  }

  const RedisOptions& options() const noexcept { return options_; }
  const std::string& margin_ms() const noexcept { return margin_ms_; }

  /// The node that owns a Redis key. One node here; the seam where a cluster routes by slot.
  RedisNodeClient& node_for(std::string_view /*redis_key*/) noexcept { return *nodes_.front(); }

  /// A decision's deadline, taken when it starts: one command_timeout from now. Everything it
  /// does after (building its keys and arguments, the pool, connect, every partial write and
  /// read, a script reload, redirections) counts against it.
  std::chrono::steady_clock::time_point deadline_from_now() const noexcept {
    return std::chrono::steady_clock::now() + options_.command_timeout;
  }

  /// Runs `calls` (each routed by its first key) in one pipelined round trip per node and
  /// returns one result per call, in order, all before `deadline` (the decision's or batch's:
  /// see `deadline_from_now`). Never throws RedisError: failures are results.
  virtual std::vector<RedisResult> execute(const std::vector<RedisCall>& calls,
                                           std::chrono::steady_clock::time_point deadline) {
    std::vector<RedisResult> results(calls.size());
    std::vector<std::pair<RedisNodeClient*, std::vector<std::size_t>>> groups;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      RedisNodeClient* node = &node_for(calls[i].keys.empty() ? "" : calls[i].keys.front());
      auto it = groups.begin();
      while (it != groups.end() && it->first != node) ++it;
      if (it == groups.end()) it = groups.insert(groups.end(), {node, {}});
      it->second.push_back(i);
    }
    for (auto& [node, indexes] : groups) run_on(*node, calls, indexes, results, deadline);
    return results;
  }

  /// Reports a failure found while reading a reply (protocol errors).
  void report(const RedisFailure& f) {
    failures_.fetch_add(1, std::memory_order_relaxed);
    notify(f);
  }

  void count_degraded() noexcept { degraded_.fetch_add(1, std::memory_order_relaxed); }
  void count_decision() noexcept { decisions_.fetch_add(1, std::memory_order_relaxed); }

  virtual RedisStats stats() const noexcept {
    RedisStats s;
    s.decisions = decisions_.load(std::memory_order_relaxed);
    s.degraded_decisions = degraded_.load(std::memory_order_relaxed);
    s.failures = failures_.load(std::memory_order_relaxed);
    s.short_circuits = short_circuits_.load(std::memory_order_relaxed);
    s.script_loads = script_loads_.load(std::memory_order_relaxed);
    for (const auto& n : nodes_) s.circuit_open = s.circuit_open || n->breaker.is_open();
    return s;
  }

  /// How long until the node owning `redis_key` is tried again (0 if it is not being avoided).
  virtual std::chrono::nanoseconds retry_in(std::string_view redis_key) noexcept {
    return node_for(redis_key).breaker.retry_in();
  }

 protected:
  /// True: an error reply the caller follows itself (a cluster's redirections), returned as the
  /// result's reply without counting a failure or touching the breaker.
  virtual bool keep_error(const redisReply&) const noexcept { return false; }

  static RedisCommand command_of(const RedisCall& call, bool full_script) {
    RedisCommand cmd;
    if (call.script == nullptr) {
      cmd = call.argv;
      return cmd;
    }
    cmd.reserve(3 + call.keys.size() + call.argv.size());
    cmd.emplace_back(full_script ? "EVAL" : "EVALSHA");
    cmd.emplace_back(full_script ? call.script->body : call.script->sha1);
    cmd.push_back(std::to_string(call.keys.size()));
    cmd.insert(cmd.end(), call.keys.begin(), call.keys.end());
    cmd.insert(cmd.end(), call.argv.begin(), call.argv.end());
    return cmd;
  }

  static bool starts_with(const redisReply& r, std::string_view prefix) noexcept {
    return r.type == REDIS_REPLY_ERROR &&
           std::string_view(r.str, r.len).substr(0, prefix.size()) == prefix;
  }

  /// Error replies that mean the node cannot serve now, not that this key is wrong.
  static bool node_unavailable(const redisReply& r) noexcept {
    for (const std::string_view p :
         {"LOADING", "BUSY", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "NOAUTH"})
      if (starts_with(r, p)) return true;
    return false;
  }

  /// Runs `calls[indexes]` on `node` in one round trip, all of it (pool, connect, replies, a
  /// script reload) before `deadline`, so a degraded decision never takes longer than its
  /// budget.
  void run_on(RedisNodeClient& node, const std::vector<RedisCall>& calls,
              const std::vector<std::size_t>& indexes, std::vector<RedisResult>& results,
              std::chrono::steady_clock::time_point deadline) {
    const auto fail_all = [&](const RedisFailure& f) {
      for (const std::size_t i : indexes) results[i].failure = f;
    };
    const CircuitBreaker::Pass pass = node.breaker.allow();
    if (pass == CircuitBreaker::Pass::refused) {
      short_circuits_.fetch_add(indexes.size(), std::memory_order_relaxed);
      fail_all({RedisFailureKind::circuit_open,
                node.pool.node().address() + ": not tried, it failed recently"});
      return;
    }
    std::vector<RedisCommand> commands;
    commands.reserve(indexes.size());
    for (const std::size_t i : indexes) commands.push_back(command_of(calls[i], false));
    try {
      std::vector<RedisReplyPtr> replies = round_trip(node, commands, deadline);
      // NOSCRIPT: the script cache was flushed (SCRIPT FLUSH, restart, failover). The call did
      // not run, so sending the script in full with EVAL (which also caches it) is safe.
      std::vector<std::size_t> reload;
      for (std::size_t j = 0; j < replies.size(); ++j)
        if (starts_with(*replies[j], "NOSCRIPT")) reload.push_back(j);
      if (!reload.empty()) {
        std::vector<RedisCommand> full;
        for (const std::size_t j : reload) full.push_back(command_of(calls[indexes[j]], true));
        script_loads_.fetch_add(reload.size(), std::memory_order_relaxed);
        auto again = round_trip(node, full, deadline);
        for (std::size_t r = 0; r < reload.size(); ++r) replies[reload[r]] = std::move(again[r]);
      }
      bool node_ok = true;
      for (std::size_t j = 0; j < replies.size(); ++j) {
        RedisResult& res = results[indexes[j]];
        const redisReply& r = *replies[j];
        if (r.type == REDIS_REPLY_ERROR && keep_error(r)) {
          res.reply = std::move(replies[j]);
        } else if (r.type == REDIS_REPLY_ERROR) {
          if (node_unavailable(r)) node_ok = false;
          res.failure = RedisFailure{RedisFailureKind::reply,
                                     node.pool.node().address() + ": " + std::string(r.str, r.len)};
          report(*res.failure);
        } else {
          res.reply = std::move(replies[j]);
        }
      }
      if (node_ok)
        node.breaker.record_success();
      else
        node.breaker.record_failure(pass);
    } catch (const RedisError& e) {
      if (e.node_fault()) node.breaker.record_failure(pass);
      const RedisFailure f{e.kind(), e.what()};
      report(f);
      fail_all(f);
    }
  }

  /// One pipelined round trip. A connection that failed is closed with every idle one (after
  /// a restart they are all stale). If a reused connection broke before any reply, the commands
  /// are sent once more on a fresh one: most likely the server closed it while it sat idle.
  /// Everything waits at most until `deadline`.
  std::vector<RedisReplyPtr> round_trip(RedisNodeClient& node,
                                        const std::vector<RedisCommand>& commands,
                                        std::chrono::steady_clock::time_point deadline) {
    for (int attempt = 0;; ++attempt) {
      auto lease = node.pool.acquire(deadline);
      if (std::chrono::steady_clock::now() >= deadline)  // the connection goes back to the pool
        throw RedisError::not_the_node(RedisFailureKind::timeout,
                                       node.pool.node().address() + ": timed out before sending");
      try {
        return lease->pipeline(commands, deadline);
      } catch (const RedisError& e) {
        lease.discard();
        node.pool.drop_idle();
        if (attempt == 0 && lease.reused() && e.kind() == RedisFailureKind::io &&
            e.replies_read() == 0)
          continue;
        throw RedisError(e.kind(), node.pool.node().address() + ": " + e.what(), e.replies_read());
      }
    }
  }

  void notify(const RedisFailure& f) noexcept {
    if (!options_.on_failure) return;
    try {
      options_.on_failure(f);
    } catch (...) {  // a monitoring hook must not change the decision
    }
  }

  RedisOptions options_;
  std::string margin_ms_;
  std::vector<std::unique_ptr<RedisNodeClient>> nodes_;
  std::atomic<std::uint64_t> decisions_{0};
  std::atomic<std::uint64_t> degraded_{0};
  std::atomic<std::uint64_t> failures_{0};
  std::atomic<std::uint64_t> short_circuits_{0};
  std::atomic<std::uint64_t> script_loads_{0};
};

}  // namespace ratelimit::detail
