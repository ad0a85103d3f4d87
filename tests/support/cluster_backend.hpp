#pragma once
/// @file cluster_backend.hpp
/// The Redis Cluster side of the storage parameterization (see backends.hpp): `ClusterBackend`,
/// plus the helpers the cluster tests share to find their cluster.
///
/// The cluster is named by RATELIMIT_TEST_CLUSTER=host:port, any of its nodes (scripts/test.sh
/// starts a throwaway one with scripts/redis_cluster.sh). When it is unset or does not answer
/// with cluster_state:ok, the test FAILS; a developer without it may opt out explicitly with
/// RATELIMIT_TEST_CLUSTER_OPTOUT=1, which exits 77 (CTest: skipped), except when CI=true.

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <string_view>

#include <ratelimit/redis.hpp>
#include "redis/blocking_connection.hpp"

namespace rltest {

inline bool cluster_env_is(const char* name, std::string_view value) {
  const char* v = std::getenv(name);
  return v != nullptr && value == v;
}

/// Fails (throws) or, when the developer opted out outside CI, exits 77.
[[noreturn]] inline void no_cluster(const std::string& why) {
  if (!cluster_env_is("CI", "true") && cluster_env_is("RATELIMIT_TEST_CLUSTER_OPTOUT", "1")) {
    std::cerr << "SKIPPED (RATELIMIT_TEST_CLUSTER_OPTOUT=1): " << why << "\n";
    std::exit(77);
  }
  throw std::runtime_error(
      "Redis Cluster tests need a cluster: " + why +
      ". Run them through scripts/test.sh (it starts one with scripts/redis_cluster.sh), or set "
      "RATELIMIT_TEST_CLUSTER=host:port, or opt out with RATELIMIT_TEST_CLUSTER_OPTOUT=1 (not "
      "under CI=true)");
}

/// The seed node, checked once per process: it must answer CLUSTER INFO with cluster_state:ok.
inline const std::string& cluster_seed() {
  static const std::string seed = [] {
    const char* v = std::getenv("RATELIMIT_TEST_CLUSTER");
    if (v == nullptr || *v == '\0') no_cluster("RATELIMIT_TEST_CLUSTER is not set");
    ratelimit::detail::RedisNode node;
    try {
      node = ratelimit::detail::parse_redis_node(v, "RATELIMIT_TEST_CLUSTER");
    } catch (const std::invalid_argument& e) {
      no_cluster(e.what());
    }
    try {
      ratelimit::detail::RedisConnectionSettings s;
      s.connect_timeout = std::chrono::seconds{1};
      s.command_timeout = std::chrono::seconds{1};
      auto c = rltest::BlockingConnection::open(node, s);
      auto r = c.pipeline({{"CLUSTER", "INFO"}});
      if (r.front()->type != REDIS_REPLY_STRING)
        no_cluster(std::string(v) + " is not a cluster node");
      if (std::string_view(r.front()->str, r.front()->len).find("cluster_state:ok") ==
          std::string_view::npos)
        no_cluster(std::string(v) + " does not report cluster_state:ok");
    } catch (const ratelimit::detail::RedisError& e) {
      no_cluster("nothing answers at " + std::string(v) + ": " + e.what());
    }
    return std::string(v);
  }();
  return seed;
}

/// The part of every key prefix this process uses: "rltest:c:<pid>.<start>.".
inline const std::string& cluster_prefix_base() {
  static const std::string base =
      "rltest:c:" + std::to_string(::getpid()) + "." +
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + ".";
  return base;
}

/// A key prefix no other storage of this run, or of an earlier run, uses.
inline std::string cluster_unique_prefix(std::string_view tag) {
  static std::atomic<std::uint64_t> counter{0};
  return cluster_prefix_base() + std::string(tag) + "." + std::to_string(counter.fetch_add(1)) +
         ":";
}

/// Options for the test cluster with a fresh key prefix; fail closed, so a failure can never
/// pass for an expected decision. Long TTL margin: time is a ManualClock.
inline ratelimit::RedisClusterOptions test_cluster_options(std::string_view tag = "t") {
  ratelimit::RedisClusterOptions o;
  o.seeds = {cluster_seed()};
  o.redis.key_prefix = cluster_unique_prefix(tag);
  o.redis.ttl_margin = std::chrono::minutes{10};
  o.redis.connect_timeout = std::chrono::seconds{2};
  o.redis.command_timeout = std::chrono::seconds{5};
  o.redis.failure_policy = ratelimit::FailurePolicy::fail_closed;
  o.redis.pool_size = 2;  // many test storages are alive at once: few sockets each
  return o;
}

}  // namespace rltest

/// The Redis Cluster storage for the parameterized rule suite: keys no other test case shares,
/// decisions at whole microseconds (the suite uses whole milliseconds).
struct ClusterBackend {
  static constexpr const char* name = "redis-cluster";
  using Storage = ratelimit::RedisClusterStorage;
  static Storage make() { return Storage{rltest::test_cluster_options("suite")}; }
  static constexpr std::chrono::nanoseconds resolution = std::chrono::microseconds{1};
};
