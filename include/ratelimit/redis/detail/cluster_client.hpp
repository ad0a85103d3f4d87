#pragma once
/// @file redis/detail/cluster_client.hpp
/// Runs script calls on a Redis Cluster: each call goes to the primary that owns its key's slot,
/// redirections are followed, the slot map is re-learned after a failover or a resharding.
/// Everything per node (pool, breaker, EVALSHA with the NOSCRIPT reload, failure accounting) is
/// RedisClient's, reused through its cluster hook.

#include <hiredis/hiredis.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../../core/detail/validate.hpp"
#include "../options.hpp"
#include "client.hpp"
#include "cluster_slot.hpp"
#include "connection.hpp"

namespace ratelimit::detail {

/// Counters of the routing layer (see RedisClusterStats).
struct RedisClusterCounters {
  std::uint64_t moved = 0;
  std::uint64_t ask = 0;
  std::uint64_t tryagain = 0;
  std::uint64_t refreshes = 0;
  std::uint64_t failed_refreshes = 0;
};

/// Parses "host:port" (or "[v6]:port"). Throws std::invalid_argument naming `field`.
inline RedisNode parse_redis_node(std::string_view text, const std::string& field) {
  const auto bad = [&](const char* why) {
    throw std::invalid_argument(field + " = \"" + std::string(text) + "\": " + why);
  };
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) bad("must be host:port");
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const std::string_view digits = text.substr(colon + 1);
  if (digits.empty() || digits.size() > 5) bad("the port must be in [1, 65535]");
  int port = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') bad("the port must be in [1, 65535]");
    port = port * 10 + (c - '0');
  }
  if (port < 1 || port > 65535) bad("the port must be in [1, 65535]");
  return RedisNode{std::string(host), port};
}

/// Thread safety: every member is safe from many threads.
class RedisClusterClient final : public RedisClient {
 public:
  /// `seeds`: at least one node of the cluster; `options`: per-node settings (host and port
  /// unused, db 0); `max_redirects`: redirections one call may follow.
  RedisClusterClient(std::vector<RedisNode> seeds, RedisOptions options, int max_redirects)
      : RedisClient(seed_options(seeds, std::move(options))),
        seeds_(std::move(seeds)),
        max_redirects_(max_redirects) {
    for (auto& owner : owners_) owner.store(nullptr, std::memory_order_relaxed);
  }

  /// One budget for the whole call: every node, every redirection (slot-map refreshes still
  /// have their own, see learn_from).
  std::vector<RedisResult> execute(const std::vector<RedisCall>& calls,
                                   std::chrono::steady_clock::time_point deadline) override {
    if (!mapped_.load(std::memory_order_acquire)) refresh_if_due(std::chrono::nanoseconds{0});
    std::vector<RedisResult> results(calls.size());
    struct Target {
      RedisNodeClient* node;
      bool asking;
    };
    std::vector<Target> targets(calls.size());
    std::vector<std::size_t> pending(calls.size());
    for (std::size_t i = 0; i < calls.size(); ++i) {
      pending[i] = i;
      targets[i] = {&owner_of(calls[i].keys.empty() ? std::string_view{} : calls[i].keys.front()),
                    false};
    }
    bool node_failed = false;
    for (int round = 0; !pending.empty(); ++round) {
      if (round > max_redirects_) {
        for (const std::size_t i : pending) {
          results[i].reply.reset();
          results[i].failure =
              RedisFailure{RedisFailureKind::reply,
                           "more than " + std::to_string(max_redirects_) + " cluster redirections"};
          report(*results[i].failure);
        }
        break;
      }
      run_round(calls, pending, targets, results, deadline);
      std::vector<std::size_t> again;
      bool tryagain = false;
      for (const std::size_t i : pending) {
        RedisResult& r = results[i];
        if (r.failure) {
          node_failed = node_failed || r.failure->kind != RedisFailureKind::reply;
          continue;
        }
        if (!r.reply || r.reply->type != REDIS_REPLY_ERROR) continue;
        const std::string_view error(r.reply->str, r.reply->len);
        if (error.substr(0, 6) == "MOVED " || error.substr(0, 4) == "ASK ") {
          const bool ask = error[0] == 'A';
          const auto target = redirect_target(error);
          if (!target) {
            r.failure = RedisFailure{RedisFailureKind::protocol,
                                     "unreadable redirection: " + std::string(error)};
            r.reply.reset();
            report(*r.failure);
            continue;
          }
          RedisNodeClient& to = node(target->second);
          if (ask) {
            ask_.fetch_add(1, std::memory_order_relaxed);
          } else {
            moved_.fetch_add(1, std::memory_order_relaxed);
            // The slot has a new owner for good: route there now, and learn whatever else
            // changed with it (a resharding rarely moves one slot alone).
            owners_[static_cast<std::size_t>(target->first)].store(&to, std::memory_order_release);
            refresh_if_due(min_moved_refresh);
          }
          targets[i] = {&to, ask};
        } else if (error.substr(0, 8) == "TRYAGAIN") {
          // A multi-key call whose keys are split by a slot migration in progress.
          tryagain_.fetch_add(1, std::memory_order_relaxed);
          tryagain = true;
          targets[i].asking = false;
        } else {
          continue;  // another error: the binding reports it
        }
        r.reply.reset();
        again.push_back(i);
      }
      if (tryagain) std::this_thread::sleep_for(std::chrono::milliseconds{1 << std::min(round, 4)});
      pending = std::move(again);
    }
    if (node_failed) refresh_if_due(std::chrono::nanoseconds(options().breaker_backoff));
    return results;
  }

  RedisStats stats() const noexcept override {
    RedisStats s = RedisClient::stats();
    std::lock_guard lock(nodes_mutex_);
    s.circuit_open = false;
    for (const auto& n : cluster_nodes_) s.circuit_open = s.circuit_open || n->breaker.is_open();
    return s;
  }

  std::chrono::nanoseconds retry_in(std::string_view redis_key) noexcept override {
    return owner_of(redis_key).breaker.retry_in();
  }

  RedisClusterCounters counters() const noexcept {
    return {moved_.load(std::memory_order_relaxed), ask_.load(std::memory_order_relaxed),
            tryagain_.load(std::memory_order_relaxed), refreshes_.load(std::memory_order_relaxed),
            failed_refreshes_.load(std::memory_order_relaxed)};
  }

  /// The node the current slot map names for `redis_key` ("host:port"; a seed if unknown).
  std::string node_address(std::string_view redis_key) {
    return owner_of(redis_key).pool.node().address();
  }

  /// Re-learns the slot map now (unless another thread is doing it). True if it was learned.
  bool refresh() {
    std::unique_lock lock(refresh_mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    last_refresh_ns_.store(steady_ns(), std::memory_order_relaxed);
    std::vector<RedisNodeClient*> candidates;
    for (auto& owner : owners_) {
      RedisNodeClient* n = owner.load(std::memory_order_acquire);
      if (n != nullptr && std::find(candidates.begin(), candidates.end(), n) == candidates.end())
        candidates.push_back(n);
    }
    for (const auto& seed : seeds_) {
      RedisNodeClient* n = &node(seed);
      if (std::find(candidates.begin(), candidates.end(), n) == candidates.end())
        candidates.push_back(n);
    }
    // Nodes being avoided are asked last: a dead one would only cost a timeout.
    std::stable_partition(candidates.begin(), candidates.end(),
                          [](RedisNodeClient* n) { return !n->breaker.is_open(); });
    for (RedisNodeClient* n : candidates) {
      if (learn_from(*n)) {
        refreshes_.fetch_add(1, std::memory_order_relaxed);
        mapped_.store(true, std::memory_order_release);
        return true;
      }
    }
    failed_refreshes_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }

 protected:
  bool keep_error(const redisReply& r) const noexcept override {
    const std::string_view e(r.str, r.len);
    return e.substr(0, 6) == "MOVED " || e.substr(0, 4) == "ASK " || e.substr(0, 8) == "TRYAGAIN";
  }

 private:
  /// A MOVED refreshes the map at most this often (each also patches its own slot at once).
  static constexpr std::chrono::nanoseconds min_moved_refresh = std::chrono::milliseconds{10};

  static RedisOptions seed_options(const std::vector<RedisNode>& seeds, RedisOptions o) {
    if (seeds.empty()) throw std::invalid_argument("seeds = []: at least one node is needed");
    if (o.db != 0) invalid("db", o.db, "must be 0 on a Redis Cluster (SELECT is refused)");
    o.host = seeds.front().host;
    o.port = seeds.front().port;
    return o;
  }

  static std::int64_t steady_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  void refresh_if_due(std::chrono::nanoseconds min_interval) {
    const std::int64_t last = last_refresh_ns_.load(std::memory_order_relaxed);
    if (last != 0 && steady_ns() - last < min_interval.count()) return;
    refresh();
  }

  /// The pool and breaker of `address`, created on first sight. Never removed, so the pointers
  /// handed out stay valid (a cluster has few addresses, even across failovers).
  RedisNodeClient& node(const RedisNode& address) {
    std::lock_guard lock(nodes_mutex_);
    for (const auto& n : cluster_nodes_)
      if (n->pool.node() == address) return *n;
    const RedisOptions& o = options();
    cluster_nodes_.push_back(std::make_unique<RedisNodeClient>(
        address, RedisConnectionSettings{o.connect_timeout, o.command_timeout, o.password, 0},
        o.pool_size, o.breaker_backoff, o.breaker_max_backoff));
    return *cluster_nodes_.back();
  }

  RedisNodeClient& owner_of(std::string_view redis_key) {
    RedisNodeClient* n = owners_[static_cast<std::size_t>(redis_key_slot(redis_key))].load(
        std::memory_order_acquire);
    return n != nullptr ? *n : node(seeds_.front());
  }

  /// "MOVED 3999 127.0.0.1:6381" or "ASK ...": the slot and the node.
  static std::optional<std::pair<int, RedisNode>> redirect_target(std::string_view error) {
    const auto first = error.find(' ');
    const auto second = error.find(' ', first + 1);
    if (first == std::string_view::npos || second == std::string_view::npos) return std::nullopt;
    int slot = 0;
    for (const char c : error.substr(first + 1, second - first - 1)) {
      if (c < '0' || c > '9') return std::nullopt;
      slot = slot * 10 + (c - '0');
      if (slot >= redis_cluster_slots) return std::nullopt;
    }
    try {
      return std::pair<int, RedisNode>{slot, parse_redis_node(error.substr(second + 1), "node")};
    } catch (const std::invalid_argument&) {
      return std::nullopt;
    }
  }

  /// One pipelined round trip per target node: plain calls as they are, ASK redirections as
  /// ASKING + EVAL (the target may not have the script cached yet, and a NOSCRIPT reload would
  /// go without ASKING and be redirected back).
  template <class Target>
  void run_round(const std::vector<RedisCall>& calls, const std::vector<std::size_t>& pending,
                 const std::vector<Target>& targets, std::vector<RedisResult>& results,
                 std::chrono::steady_clock::time_point deadline) {
    std::vector<std::pair<RedisNodeClient*, std::vector<std::size_t>>> plain;
    std::vector<std::pair<RedisNodeClient*, std::vector<std::size_t>>> asking;
    for (const std::size_t i : pending) {
      auto& groups = targets[i].asking ? asking : plain;
      auto it = groups.begin();
      while (it != groups.end() && it->first != targets[i].node) ++it;
      if (it == groups.end()) it = groups.insert(groups.end(), {targets[i].node, {}});
      it->second.push_back(i);
    }
    for (auto& [n, indexes] : plain) run_on(*n, calls, indexes, results, deadline);
    for (auto& [n, indexes] : asking) {
      std::vector<RedisCall> sub;
      std::vector<std::size_t> all;
      for (const std::size_t i : indexes) {
        RedisCall asking_call;
        asking_call.argv = {"ASKING"};
        asking_call.keys = calls[i].keys;
        sub.push_back(std::move(asking_call));
        RedisCall eval;
        eval.keys = calls[i].keys;
        eval.argv = command_of(calls[i], true);
        sub.push_back(std::move(eval));
      }
      for (std::size_t j = 0; j < sub.size(); ++j) all.push_back(j);
      std::vector<RedisResult> sub_results(sub.size());
      run_on(*n, sub, all, sub_results, deadline);
      for (std::size_t k = 0; k < indexes.size(); ++k) {
        RedisResult& asked = sub_results[2 * k];
        results[indexes[k]] = asked.failure ? std::move(asked) : std::move(sub_results[2 * k + 1]);
      }
    }
  }

  /// Asks `n` for CLUSTER SLOTS and installs the map. False if it cannot answer.
  bool learn_from(RedisNodeClient& n) {
    RedisReplyPtr reply;
    try {
      // Its own budget: one connect and one command timeout (a refresh runs apart from any
      // decision's deadline only when no decision waits on it).
      const auto deadline =
          std::chrono::steady_clock::now() + options().connect_timeout + options().command_timeout;
      auto lease = n.pool.acquire(deadline);
      try {
        auto replies = lease->pipeline({{"CLUSTER", "SLOTS"}}, deadline);
        reply = std::move(replies.front());
      } catch (const RedisError&) {
        lease.discard();
        throw;
      }
    } catch (const RedisError&) {
      n.pool.drop_idle();
      return false;
    }
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements == 0) return false;
    std::vector<std::pair<std::array<int, 2>, RedisNode>> ranges;
    for (std::size_t i = 0; i < reply->elements; ++i) {
      const redisReply* e = reply->element[i];
      if (e->type != REDIS_REPLY_ARRAY || e->elements < 3) return false;
      const redisReply* from = e->element[0];
      const redisReply* to = e->element[1];
      const redisReply* primary = e->element[2];
      if (from->type != REDIS_REPLY_INTEGER || to->type != REDIS_REPLY_INTEGER ||
          primary->type != REDIS_REPLY_ARRAY || primary->elements < 2 ||
          primary->element[0]->type != REDIS_REPLY_STRING ||
          primary->element[1]->type != REDIS_REPLY_INTEGER)
        return false;
      if (from->integer < 0 || to->integer >= redis_cluster_slots || from->integer > to->integer)
        return false;
      std::string host(primary->element[0]->str, primary->element[0]->len);
      // An empty or "?" endpoint means "the address you reached me on".
      if (host.empty() || host == "?") host = n.pool.node().host;
      ranges.push_back(
          {{static_cast<int>(from->integer), static_cast<int>(to->integer)},
           RedisNode{std::move(host), static_cast<int>(primary->element[1]->integer)}});
    }
    for (const auto& [range, address] : ranges) {
      RedisNodeClient* owner = &node(address);
      for (int s = range[0]; s <= range[1]; ++s)
        owners_[static_cast<std::size_t>(s)].store(owner, std::memory_order_release);
    }
    return true;
  }

  std::vector<RedisNode> seeds_;
  int max_redirects_;
  std::array<std::atomic<RedisNodeClient*>, redis_cluster_slots> owners_;
  mutable std::mutex nodes_mutex_;
  std::vector<std::unique_ptr<RedisNodeClient>> cluster_nodes_;
  std::mutex refresh_mutex_;
  std::atomic<bool> mapped_{false};
  std::atomic<std::int64_t> last_refresh_ns_{0};
  std::atomic<std::uint64_t> moved_{0};
  std::atomic<std::uint64_t> ask_{0};
  std::atomic<std::uint64_t> tryagain_{0};
  std::atomic<std::uint64_t> refreshes_{0};
  std::atomic<std::uint64_t> failed_refreshes_{0};
};

}  // namespace ratelimit::detail
