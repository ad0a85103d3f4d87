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
/// Everything after the first send runs on the client's I/O thread: redirections are followed,
/// TRYAGAIN retried (after a timer, never a sleep) and the slot map re-learned there, so no
/// decision ever waits on a refresh; every step of a decision keeps the decision's deadline.
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

  RedisStats stats() const noexcept override {
    RedisStats s = RedisClient::stats();
    std::lock_guard lock(nodes_mutex_);
    s.circuit_open = false;
    for (const auto& n : cluster_nodes_) s.circuit_open = s.circuit_open || n->breaker.is_open();
    return s;
  }

  RedisClusterCounters counters() const noexcept {
    return {moved_.load(std::memory_order_relaxed), ask_.load(std::memory_order_relaxed),
            tryagain_.load(std::memory_order_relaxed), refreshes_.load(std::memory_order_relaxed),
            failed_refreshes_.load(std::memory_order_relaxed)};
  }

  /// The node the current slot map names for `redis_key` ("host:port"; a seed if unknown).
  std::string node_address(std::string_view redis_key) {
    return owner_of(redis_key).address().address();
  }

  /// Re-learns the slot map now and waits for it (each node asked has one connect and one
  /// command timeout). True if some node told it. On the I/O thread it cannot wait: false.
  bool refresh() {
    if (loop().on_loop_thread()) return false;
    struct Waiter {
      OneShot done;
      bool learned = false;
    };
    auto w = std::make_shared<Waiter>();
    learn(candidates(), 0, [w](bool learned) {
      w->learned = learned;
      w->done.notify();
    });
    w->done.wait();
    return w->learned;
  }

 protected:
  bool routes_by_key() const noexcept override { return true; }

  std::chrono::nanoseconds retry_in_key(std::string_view redis_key) noexcept override {
    return owner_of(redis_key).breaker.retry_in();
  }

  /// Learns the slot map (unless known), then loads `scripts` on every primary it names.
  bool load_scripts(const std::vector<const RedisScript*>& scripts,
                    std::chrono::steady_clock::time_point deadline) override {
    if (!mapped_.load(std::memory_order_acquire) && !refresh()) return false;
    std::vector<RedisNodeClient*> primaries;
    for (const auto& owner : owners_) {
      RedisNodeClient* n = owner.load(std::memory_order_acquire);
      if (n != nullptr && std::find(primaries.begin(), primaries.end(), n) == primaries.end())
        primaries.push_back(n);
    }
    return load_on(primaries, scripts, deadline);
  }

  bool keep_error(const redisReply& r) const noexcept override {
    const std::string_view e(r.str, r.len);
    return e.substr(0, 6) == "MOVED " || e.substr(0, 4) == "ASK " || e.substr(0, 8) == "TRYAGAIN";
  }

  /// Routes every call by its first key's slot; with no slot map yet, to a seed (its MOVED
  /// replies route them meanwhile) while the map is learned in the background.
  void start(const OpPtr& op) override {
    if (!mapped_.load(std::memory_order_acquire)) refresh_in_background(min_unmapped_refresh);
    op->targets.resize(op->calls.size());
    op->asking.assign(op->calls.size(), 0);
    op->rounds.assign(op->calls.size(), 0);
    std::vector<std::size_t> all(op->calls.size());
    for (std::size_t i = 0; i < all.size(); ++i) {
      all[i] = i;
      op->targets[i] =
          &owner_of(op->calls[i].keys.empty() ? std::string_view{} : op->calls[i].keys.front());
    }
    op->outstanding.store(1, std::memory_order_relaxed);  // held until every group is sent
    dispatch(op, std::move(all));
    release(op);
  }

 private:
  /// The most node addresses one storage learns (Redis Cluster's own limit is about 1,000).
  static constexpr std::size_t max_nodes = 1024;

  /// Without a map, decisions ask for one at most this often: a seed that can never give one
  /// (a standalone Redis) must not get a CLUSTER SLOTS beside every decision.
  static constexpr std::chrono::nanoseconds min_unmapped_refresh = std::chrono::milliseconds{100};

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

  void release(const OpPtr& op) {
    if (op->outstanding.fetch_sub(1, std::memory_order_acq_rel) == 1) finish(op);
  }

  /// Sends `indexes` to their targets: one request per (node, asking) group.
  void dispatch(const OpPtr& op, std::vector<std::size_t> indexes) {
    std::vector<std::pair<std::pair<RedisNodeClient*, bool>, std::vector<std::size_t>>> groups;
    for (const std::size_t i : indexes) {
      const std::pair<RedisNodeClient*, bool> to{op->targets[i], op->asking[i] != 0};
      auto it = groups.begin();
      while (it != groups.end() && it->first != to) ++it;
      if (it == groups.end()) it = groups.insert(groups.end(), {to, {}});
      it->second.push_back(i);
    }
    op->outstanding.fetch_add(groups.size(), std::memory_order_acq_rel);
    for (auto& [to, group] : groups)
      send(*to.first, op, std::move(group), to.second,
           [this](const OpPtr& o, std::vector<std::size_t>&& settled) {
             follow(o, std::move(settled));
           });
  }

  /// A group's results are in: follow MOVED/ASK at once, TRYAGAIN after a pause, keep the rest.
  void follow(const OpPtr& op, std::vector<std::size_t> settled) {
    std::vector<std::size_t> again, later;
    bool node_failed = false;
    for (const std::size_t i : settled) {
      RedisResult& r = op->results[i];
      if (r.failure) {
        node_failed = node_failed || r.failure->kind != RedisFailureKind::reply;
        continue;
      }
      if (!r.reply || r.reply->type != REDIS_REPLY_ERROR) continue;
      const std::string_view error(r.reply->str, r.reply->len);
      const bool tryagain = error.substr(0, 8) == "TRYAGAIN";
      if (!tryagain && error.substr(0, 6) != "MOVED " && error.substr(0, 4) != "ASK ")
        continue;  // another error: the binding reports it
      if (tryagain) tryagain_.fetch_add(1, std::memory_order_relaxed);  // every reply counts
      if (++op->rounds[i] > max_redirects_) {
        fail(r, {RedisFailureKind::reply,
                 "more than " + std::to_string(max_redirects_) + " cluster redirections"});
        continue;
      }
      if (tryagain) {
        // A multi-key call whose keys are split by a slot migration in progress.
        op->asking[i] = 0;
        r.reply.reset();
        later.push_back(i);
        continue;
      }
      const bool ask = error[0] == 'A';
      const auto target = redirect_target(error);
      if (!target) {
        fail(r, {RedisFailureKind::protocol, "unreadable redirection: " + std::string(error)});
        continue;
      }
      RedisNodeClient* known = known_node(target->second);
      if (known == nullptr) {
        fail(r, {RedisFailureKind::protocol, "redirected to a node past the " +
                                                 std::to_string(max_nodes) +
                                                 " this cluster may have: " + std::string(error)});
        continue;
      }
      RedisNodeClient& to = *known;
      if (ask) {
        ask_.fetch_add(1, std::memory_order_relaxed);
      } else {
        moved_.fetch_add(1, std::memory_order_relaxed);
        // The slot has a new owner for good: route there now, and learn whatever else changed
        // with it (a resharding rarely moves one slot alone).
        owners_[static_cast<std::size_t>(target->first)].store(&to, std::memory_order_release);
        refresh_in_background(min_moved_refresh);
      }
      op->targets[i] = &to;
      op->asking[i] = ask ? 1 : 0;
      r.reply.reset();
      again.push_back(i);
    }
    if (node_failed) refresh_in_background(std::chrono::nanoseconds(options().breaker_backoff));
    if (!again.empty()) dispatch(op, std::move(again));
    if (!later.empty()) retry_later(op, std::move(later));
    release(op);
  }

  /// TRYAGAIN: the same calls again after 1, 2, 4, 8, 16 ms, if that fits the deadline.
  void retry_later(const OpPtr& op, std::vector<std::size_t> later) {
    int round = 0;
    for (const std::size_t i : later) round = std::max(round, op->rounds[i]);
    const auto at =
        std::chrono::steady_clock::now() + std::chrono::milliseconds{1 << std::min(round - 1, 4)};
    if (at >= op->deadline) {
      for (const std::size_t i : later)
        fail(op->results[i], {RedisFailureKind::timeout,
                              "TRYAGAIN (a slot migration in progress) until the deadline"});
      return;
    }
    op->outstanding.fetch_add(1, std::memory_order_acq_rel);
    loop().post_at(at, [this, op, later = std::move(later)]() mutable {
      dispatch(op, std::move(later));
      release(op);
    });
  }

  void fail(RedisResult& r, RedisFailure f) {
    r.reply.reset();
    r.failure = std::move(f);
    report(*r.failure);
  }

  /// Starts learning the slot map on the I/O thread unless a refresh is running or one ran
  /// less than `min_interval` ago. No decision waits for it.
  void refresh_in_background(std::chrono::nanoseconds min_interval) {
    const std::int64_t last = last_refresh_ns_.load(std::memory_order_relaxed);
    if (last != 0 && steady_ns() - last < min_interval.count()) return;
    if (refreshing_.exchange(true, std::memory_order_acq_rel)) return;
    last_refresh_ns_.store(steady_ns(), std::memory_order_relaxed);
    learn(candidates(), 0, [this](bool) { refreshing_.store(false, std::memory_order_release); });
  }

  /// Nodes to ask for the map: those the map names, then the seeds; nodes being avoided last
  /// (a dead one would only cost its timeouts).
  std::shared_ptr<std::vector<RedisNodeClient*>> candidates() {
    auto out = std::make_shared<std::vector<RedisNodeClient*>>();
    for (auto& owner : owners_) {
      RedisNodeClient* n = owner.load(std::memory_order_acquire);
      if (n != nullptr && std::find(out->begin(), out->end(), n) == out->end()) out->push_back(n);
    }
    for (const auto& seed : seeds_) {
      RedisNodeClient* n = &node(seed);
      if (std::find(out->begin(), out->end(), n) == out->end()) out->push_back(n);
    }
    std::stable_partition(out->begin(), out->end(),
                          [](RedisNodeClient* n) { return !n->breaker.is_open(); });
    return out;
  }

  /// Asks candidates[k], then the next ones, for CLUSTER SLOTS; `done(learned)` on the I/O
  /// thread. Each ask has its own budget (one connect and one command timeout): it runs apart
  /// from every decision.
  void learn(std::shared_ptr<std::vector<RedisNodeClient*>> cands, std::size_t k,
             std::function<void(bool)> done) {
    if (k >= cands->size()) {
      failed_refreshes_.fetch_add(1, std::memory_order_relaxed);
      return done(false);
    }
    RedisNodeClient* n = (*cands)[k];
    IoRequest req;
    append_command(req.wire, {"CLUSTER", "SLOTS"});
    req.replies = 1;
    req.deadline =
        std::chrono::steady_clock::now() + options().connect_timeout + options().command_timeout;
    // Holds the client: the refresh may outlive the last storage handle by its budget.
    req.done = [self = shared_from_this(), this, cands = std::move(cands), k, n,
                done = std::move(done)](IoOutcome&& o) mutable {
      if (!o.error && install(*o.replies.front(), *n)) {
        refreshes_.fetch_add(1, std::memory_order_relaxed);
        mapped_.store(true, std::memory_order_release);
        return done(true);
      }
      if (!o.error && o.replies.front()->type == REDIS_REPLY_ERROR)
        warn_not_cluster(*n, *o.replies.front());
      learn(std::move(cands), k + 1, std::move(done));
    };
    loop().submit(n->io, std::move(req));
  }

  /// A seed that answers CLUSTER SLOTS with an error (a standalone Redis: "cluster support
  /// disabled") is a misconfiguration that would otherwise go unnoticed: decisions still reach
  /// it, but seeds that are separate servers each keep their own limits. Told once per storage.
  void warn_not_cluster(const RedisNodeClient& n, const redisReply& error) {
    if (warned_not_cluster_.exchange(true, std::memory_order_relaxed)) return;
    notify({RedisFailureKind::warning,
            n.address().address() + " answered CLUSTER SLOTS with \"" +
                std::string(error.str, error.len) +
                "\": not a Redis Cluster node. Decisions go to the first seed that answers; "
                "seeds that are separate servers keep separate limits (use RedisStorage for one "
                "server)"});
  }

  /// The pool and breaker of `address`, created on first sight. Never removed, so the pointers
  /// handed out stay valid (a cluster has few addresses, even across failovers).
  /// `node(address)`, or null for a new address once `max_nodes` are known: a server that keeps
  /// redirecting to new addresses must not grow the table (and the I/O thread's work) forever.
  RedisNodeClient* known_node(const RedisNode& address) {
    {
      std::lock_guard lock(nodes_mutex_);
      for (const auto& n : cluster_nodes_)
        if (n->address() == address) return n.get();
      if (cluster_nodes_.size() >= max_nodes) return nullptr;
    }
    return &node(address);
  }

  RedisNodeClient& node(const RedisNode& address) {
    std::lock_guard lock(nodes_mutex_);
    for (const auto& n : cluster_nodes_)
      if (n->address() == address) return *n;
    const RedisOptions& o = options();
    cluster_nodes_.push_back(std::make_unique<RedisNodeClient>(
        loop().node(address), o.breaker_backoff, o.breaker_max_backoff, probe_budget()));
    return *cluster_nodes_.back();
  }

  /// The slot's owner in the map; unknown, the first seed not being avoided.
  RedisNodeClient& owner_of(std::string_view redis_key) {
    RedisNodeClient* n = owners_[static_cast<std::size_t>(redis_key_slot(redis_key))].load(
        std::memory_order_acquire);
    if (n != nullptr) return *n;
    for (const auto& seed : seeds_) {
      RedisNodeClient& s = node(seed);
      if (!s.breaker.is_open()) return s;
    }
    return node(seeds_.front());
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

  /// Installs the map in a CLUSTER SLOTS reply from `n`. False if the reply is not one.
  bool install(const redisReply& r, RedisNodeClient& n) {
    const redisReply* reply = &r;
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
      if (host.empty() || host == "?") host = n.address().host;
      ranges.push_back(
          {{static_cast<int>(from->integer), static_cast<int>(to->integer)},
           RedisNode{std::move(host), static_cast<int>(primary->element[1]->integer)}});
    }
    for (const auto& [range, address] : ranges)
      if (known_node(address) == nullptr) return false;  // more nodes than a cluster may have
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
  std::atomic<bool> refreshing_{false};
  std::atomic<bool> mapped_{false};
  std::atomic<bool> warned_not_cluster_{false};
  std::atomic<std::int64_t> last_refresh_ns_{0};
  std::atomic<std::uint64_t> moved_{0};
  std::atomic<std::uint64_t> ask_{0};
  std::atomic<std::uint64_t> tryagain_{0};
  std::atomic<std::uint64_t> refreshes_{0};
  std::atomic<std::uint64_t> failed_refreshes_{0};
};

/// A client for `options`: on the one Redis it names when `cluster_seeds` is empty, else on the
/// Redis Cluster those nodes ("host:port") belong to, routed by slot (`options` then applies per
/// node: host and port unused, db 0; at most 5 redirections per call). The far storages build
/// their clients with it. Throws std::invalid_argument naming `field` (as `field`[i]) for a bad
/// seed, or the bad option.
inline std::shared_ptr<RedisClient> make_redis_client(RedisOptions options,
                                                      const std::vector<std::string>& cluster_seeds,
                                                      const std::string& field) {
  if (cluster_seeds.empty()) return std::make_shared<RedisClient>(std::move(options));
  std::vector<RedisNode> seeds;
  for (std::size_t i = 0; i < cluster_seeds.size(); ++i)
    seeds.push_back(parse_redis_node(cluster_seeds[i], field + "[" + std::to_string(i) + "]"));
  return std::make_shared<RedisClusterClient>(std::move(seeds), std::move(options), 5);
}

}  // namespace ratelimit::detail
