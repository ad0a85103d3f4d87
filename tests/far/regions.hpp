#pragma once
/// @file regions.hpp
/// Several regions on loopback for the regional storage's tests: one redis-server of the
/// test's own per region (redis/redis_admin.hpp's ThrowawayRedis), and between every two
/// regions a DelayProxy per direction, through which a region reaches another's Redis. Cutting
/// a region off partitions every link to and from it.

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <ratelimit/redis/regional/storage.hpp>

#include "redis/redis_admin.hpp"
#include "support/delay_proxy.hpp"
#include "support/redis_backend.hpp"

namespace rltest {

class Regions {
 public:
  /// `count` regions named "r0", "r1", ...
  explicit Regions(std::size_t count) : prefix_(unique_prefix("far")) {
    (void)redis_endpoint();  // Redis tests are wanted (or this fails / opts out)
    for (std::size_t i = 0; i < count; ++i) servers_.push_back(std::make_unique<ThrowawayRedis>());
    links_.resize(count);
    for (std::size_t from = 0; from < count; ++from)
      for (std::size_t to = 0; to < count; ++to)
        links_[from].push_back(
            from == to ? nullptr
                       : std::make_unique<DelayProxy>("127.0.0.1", servers_[to]->endpoint().port));
  }

  static std::string name(std::size_t i) { return "r" + std::to_string(i); }
  std::size_t size() const noexcept { return servers_.size(); }

  /// Region i's options: its own Redis directly, every other one through the link's proxy.
  /// Short timeouts and back-offs on the links, so that a cut link fails a round quickly and
  /// a healed one is tried again at the next round.
  ratelimit::RegionalOptions options(std::size_t i, std::chrono::milliseconds interval,
                                     std::chrono::milliseconds delay) const {
    ratelimit::RegionalOptions o;
    o.region = name(i);
    o.local = redis_at(servers_[i]->endpoint().port);
    o.exchange_interval = interval;
    o.one_way_delay = delay;
    for (std::size_t j = 0; j < size(); ++j) {
      if (j == i) continue;
      ratelimit::RemoteRegion r;
      r.name = name(j);
      r.redis = redis_at(links_[i][j]->port());
      r.redis.command_timeout = std::chrono::milliseconds{300};
      r.redis.breaker_backoff = std::chrono::milliseconds{1};
      r.redis.breaker_max_backoff = std::chrono::milliseconds{1};
      o.remotes.push_back(std::move(r));
    }
    return o;
  }

  /// Cuts region i off from every other region (or heals it).
  void partition(std::size_t i, bool cut) {
    for (std::size_t j = 0; j < size(); ++j) {
      if (j == i) continue;
      links_[i][j]->set_partitioned(cut);
      links_[j][i]->set_partitioned(cut);
    }
  }

  /// The proxy through which region `from` reaches region `to`'s Redis.
  DelayProxy& link(std::size_t from, std::size_t to) { return *links_[from][to]; }
  RedisEndpoint endpoint(std::size_t i) const { return servers_[i]->endpoint(); }

 private:
  ratelimit::RedisOptions redis_at(int port) const {
    ratelimit::RedisOptions o;
    o.host = "127.0.0.1";
    o.port = port;
    o.key_prefix = prefix_;
    o.ttl_margin = std::chrono::minutes{10};  // ManualClock time: keys must outlive real time
    o.connect_timeout = std::chrono::seconds{2};
    o.command_timeout = std::chrono::seconds{5};
    o.failure_policy = ratelimit::FailurePolicy::fail_closed;
    return o;
  }

  std::string prefix_;
  std::vector<std::unique_ptr<ThrowawayRedis>> servers_;
  std::vector<std::vector<std::unique_ptr<DelayProxy>>> links_;  ///< [from][to]
};

}  // namespace rltest
