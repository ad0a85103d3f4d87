#pragma once
/// @file redis/cluster.hpp
/// The Redis storage on a Redis Cluster: the same scripts, keys, decisions and failure policy as
/// `RedisStorage`, with each decision sent to the primary that owns its key's hash slot. Needs
/// hiredis (CMake target `ratelimit::redis`). See docs/cluster.md.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../core/detail/validate.hpp"
#include "../core/storage.hpp"
#include "detail/cluster_client.hpp"
#include "options.hpp"
#include "storage.hpp"

namespace ratelimit {

/// Configuration of a `RedisClusterStorage`.
/// Thread safety: a plain value; `redis.on_failure` is called from the deciding threads.
struct RedisClusterOptions {
  /// Nodes to learn the cluster from, "host:port" (any primaries or replicas; one is enough,
  /// more survive that one being down at start). At least one.
  std::vector<std::string> seeds{"127.0.0.1:7000"};
  /// Everything else, as for `RedisStorage`, applied per node: `pool_size` connections per node,
  /// timeouts per round trip, one circuit breaker per node, `failure_policy` for the decisions
  /// whose node cannot decide. `host` and `port` are ignored (the seeds and the slot map name
  /// the nodes); `db` must be 0 (a cluster has one database).
  RedisOptions redis{};
  /// Redirections (MOVED, ASK, TRYAGAIN) one decision may follow before it is degraded, 1..100.
  int max_redirects = 5;
};

/// What the routing layer did since construction (shared by every copy).
/// Thread safety: a plain value (a snapshot of atomic counters).
struct RedisClusterStats {
  std::uint64_t moved = 0;             ///< MOVED replies followed (a slot changed owner)
  std::uint64_t ask = 0;               ///< ASK replies followed (a slot being migrated)
  std::uint64_t tryagain = 0;          ///< TRYAGAIN replies (keys split mid-migration)
  std::uint64_t refreshes = 0;         ///< slot maps learned (CLUSTER SLOTS)
  std::uint64_t failed_refreshes = 0;  ///< attempts where no node could tell the map
};

/// Keeps every key's state on a Redis Cluster. A `RedisStorage` (bindings, limiters, batches
/// and rule sets written for `RedisStorage` take it as is: copying it into a `RedisStorage`
/// keeps the cluster routing, since a storage is a handle) whose calls are routed by slot:
///  - the slot is CRC16 of the key's hash tag mod 16384 (every key of one decision shares the
///    tag, so one script call never spans nodes); the slot map comes from CLUSTER SLOTS, learned
///    on first use and re-learned after MOVED, and, at most once per `breaker_backoff`, after a
///    node fails (that is how a failover is noticed: the promoted replica takes over its slots);
///  - MOVED: the call goes to the named node and the map is refreshed; ASK: the call is sent
///    once to the named node after ASKING; TRYAGAIN: retried after a short pause;
///  - one connection pool and one circuit breaker per node: while a primary is down, decisions
///    for its slots are degraded by `failure_policy`, the other slots are unaffected;
///  - scripts are cached per node; NOSCRIPT (a promoted replica, a new node) reloads them;
///  - `RedisBatch` splits its calls by node and pipelines each node's share.
/// Construction does not connect unless `redis.warm_up` (see `RedisStorage::warm_up`). Errors: the
/// constructor throws `std::invalid_argument` naming a bad option (seeds, db, max_redirects, or any
/// field of `redis`); `bind` as `RedisStorage`. Thread safety: every member is safe from many
/// threads.
class RedisClusterStorage : public RedisStorage {
 public:
  /// A storage on the cluster that `options.seeds` belong to.
  explicit RedisClusterStorage(RedisClusterOptions options)
      : RedisClusterStorage(make_client(std::move(options))) {}

  /// Routing counters since construction (shared by every copy).
  RedisClusterStats cluster_stats() const noexcept {
    const auto c = cluster_->counters();
    return {c.moved, c.ask, c.tryagain, c.refreshes, c.failed_refreshes};
  }

  /// The node ("host:port") the current slot map sends `client_key`'s decisions of model `M`
  /// under limiter `name` to: for operations and tests. Learns the map if it has none yet.
  template <Model M>
  std::string node_of(std::string_view name, std::string_view client_key) const {
    if (cluster_->counters().refreshes == 0) cluster_->refresh();
    return cluster_->node_address(detail::redis_key(
        options().key_prefix, client_key, detail::redis_key_tail(M::Wire::key_tag, name)));
  }

  /// Re-learns the slot map now. True if some node told it.
  bool refresh_slots() const { return cluster_->refresh(); }

 private:
  explicit RedisClusterStorage(std::shared_ptr<detail::RedisClusterClient> client)
      : RedisStorage(client), cluster_(std::move(client)) {}

  static std::shared_ptr<detail::RedisClusterClient> make_client(RedisClusterOptions o) {
    if (o.max_redirects < 1 || o.max_redirects > 100)
      detail::invalid("max_redirects", o.max_redirects, "must be in [1, 100]");
    std::vector<detail::RedisNode> seeds;
    for (std::size_t i = 0; i < o.seeds.size(); ++i)
      seeds.push_back(detail::parse_redis_node(o.seeds[i], "seeds[" + std::to_string(i) + "]"));
    return std::make_shared<detail::RedisClusterClient>(std::move(seeds), std::move(o.redis),
                                                        o.max_redirects);
  }

  std::shared_ptr<detail::RedisClusterClient> cluster_;
};

static_assert(StorageFor<RedisClusterStorage, TokenBucketModel> &&
                  StorageFor<RedisClusterStorage, LeakyBucketModel> &&
                  StorageFor<RedisClusterStorage, FixedWindowModel> &&
                  StorageFor<RedisClusterStorage, SlidingLogModel> &&
                  StorageFor<RedisClusterStorage, SlidingCounterModel>,
              "RedisClusterStorage must hold every algorithm");

}  // namespace ratelimit
