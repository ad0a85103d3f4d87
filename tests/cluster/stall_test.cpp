// Deadlines on Redis Cluster: one deadline per decision across nodes, redirections and slot-map
// refreshes. With two of the three primaries stopped (SIGSTOP, shorter than the cluster's node
// timeout, so no failover), and with a first seed that accepts connections and never answers,
// 8 threads deciding keys spread over every slot get every decision back by its deadline plus
// a stated margin (the same as the single-node deadline tests': timer slack and scheduling on
// a loaded 2-core machine); and decisions are exact again afterwards.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

#include "cluster_admin.hpp"
#include "redis/listener.hpp"
#include "redis/traffic.hpp"
#include "support/cluster_backend.hpp"

using namespace std::chrono_literals;

namespace {

using Bucket = ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::RedisClusterStorage>;

constexpr auto margin = 50ms;

ratelimit::RedisClusterOptions stalled_options(const char* tag) {
  auto o = rltest::test_cluster_options(tag);
  o.redis.command_timeout = 100ms;
  o.redis.connect_timeout = 100ms;
  o.redis.breaker_backoff = 1ms;
  o.redis.breaker_max_backoff = 1ms;
  return o;
}

using rltest::ms;

/// 8 threads deciding, 1 ms apart (tests/redis/traffic.hpp).
template <class F>
rltest::Tally hammer(std::chrono::milliseconds duration, F decide) {
  return rltest::hammer(8, duration, decide);
}

/// The first decision of `key` that Redis makes (not degraded); polls for up to 10 s.
ratelimit::Decision decided(Bucket& b, const std::string& key) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  ratelimit::Decision d = b.try_acquire(key);
  while (d.degraded && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
    d = b.try_acquire(key);
  }
  return d;
}

}  // namespace

TEST_CASE("Two of three primaries stopped: 8 threads get every decision by its deadline",
          "[cluster][deadline]") {
  ratelimit::RedisClusterStorage storage(stalled_options("stall2"));
  ratelimit::ManualClock clock;
  Bucket tb({1'000'000, ratelimit::per_second(1)}, storage, clock);
  REQUIRE_FALSE(decided(tb, "warm").degraded);
  const auto primaries = rltest::live_primaries();
  REQUIRE(primaries.size() >= 3);
  std::vector<pid_t> stopped;
  for (std::size_t i = 0; i < 2; ++i) stopped.push_back(rltest::pid_of(primaries[i].address));
  std::thread chaos([&] {
    std::this_thread::sleep_for(200ms);
    for (const pid_t p : stopped) ::kill(p, SIGSTOP);
    std::this_thread::sleep_for(700ms);  // under cluster-node-timeout (1 s): no failover
    for (const pid_t p : stopped) ::kill(p, SIGCONT);
  });
  const auto t = hammer(1500ms, [&](int th, int i) {
    return tb.try_acquire("s" + std::to_string(th) + "." + std::to_string(i)).degraded;
  });
  chaos.join();
  CHECK(t.worst < 100ms + margin);
  CHECK(t.degraded > 0);            // the stopped primaries' keys
  CHECK(t.degraded < t.decisions);  // the third primary's keys were decided throughout
  // Back: a fresh key is decided by Redis, its first request leaving capacity - 1.
  const auto d = decided(tb, "after-stall");
  CHECK_FALSE(d.degraded);
  CHECK(d.remaining == 1'000'000 - 1);
  WARN("two primaries stopped: " << t.decisions << " decisions, " << t.degraded
                                 << " degraded, longest " << ms(t.worst) << " ms");
}

TEST_CASE("A first seed that never answers: decisions stay on time and the map is learned",
          "[cluster][deadline]") {
  rltest::BlackHole hole;
  auto o = stalled_options("hungseed");
  o.seeds = {"127.0.0.1:" + std::to_string(hole.port()), rltest::cluster_seed()};
  ratelimit::RedisClusterStorage storage(o);
  ratelimit::ManualClock clock;
  Bucket tb({1'000'000, ratelimit::per_second(1)}, storage, clock);
  const auto t = hammer(1000ms, [&](int th, int i) {
    return tb.try_acquire("h" + std::to_string(th) + "." + std::to_string(i)).degraded;
  });
  CHECK(t.worst < 100ms + margin);
  // The map came from the second seed, in the background; decisions are Redis's again.
  const auto d = decided(tb, "after-hung-seed");
  CHECK_FALSE(d.degraded);
  CHECK(d.remaining == 1'000'000 - 1);
  CHECK(storage.cluster_stats().refreshes >= 1u);
  WARN("hung seed: " << t.decisions << " decisions, " << t.degraded << " degraded, longest "
                     << ms(t.worst) << " ms");
  hole.stop();
}
