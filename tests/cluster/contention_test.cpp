// Contention: several processes (each its own RedisClusterStorage, so its own
// slot map and pools, as separate service instances would have), two threads each, on one key
// with time frozen, admit exactly the limit, for every algorithm.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

#include "support/algorithms.hpp"
#include "support/child.hpp"
#include "support/cluster_backend.hpp"

using namespace std::chrono_literals;
using ratelimit::ManualClock;
using ratelimit::RedisClusterStorage;

namespace {

constexpr int processes = 4;
constexpr int threads_per_process = 2;
constexpr int attempts_per_thread = 30;  // 4 x 2 x 30 = 240 attempts, far above the limit

/// Forks one child per process; each returns its admitted count (or -1 on any degraded
/// decision or error). Returns the counts (-3 for a child that did not report).
template <class Algo>
std::vector<std::int64_t> run_children(const rltest::Shape& shape,
                                       const ratelimit::RedisClusterOptions& options) {
  std::vector<rltest::Child> children;
  for (int p = 0; p < processes; ++p)
    children.push_back(rltest::spawn([&]() -> std::int64_t {
      ManualClock clock;
      clock.set(5s);
      auto limiter = Algo::make(shape, RedisClusterStorage(options), clock);
      std::atomic<std::int64_t> admitted{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < threads_per_process; ++t)
        threads.emplace_back([&] {
          for (int i = 0; i < attempts_per_thread; ++i) {
            const auto d = limiter.try_acquire("shared");
            if (d.degraded) {
              admitted.store(-1000000);  // a failure must not pass for a decision
              return;
            }
            if (d.allowed) admitted.fetch_add(1);
          }
        });
      for (auto& t : threads) t.join();
      return admitted.load();
    }));
  std::vector<std::int64_t> counts;
  for (const auto& c : children) counts.push_back(rltest::collect(c));
  return counts;
}

template <class Algo>
void hammer_one_key(const rltest::Shape& shape) {
  INFO("algorithm: " << Algo::name);
  auto options = rltest::test_cluster_options("contention");  // fails here if no cluster
  std::int64_t total = 0;
  for (const auto n : run_children<Algo>(shape, options)) {
    CHECK(n >= 0);
    total += n;
  }
  // Frozen time: exactly the limit (37) is admitted, never one more.
  CHECK(total == shape.limit);
}

}  // namespace

TEST_CASE(
    "Four processes of two threads on one cluster key admit exactly the limit, for every "
    "algorithm",
    "[cluster][concurrent]") {
  // Limit 37; the rate is slow (per hour) and time frozen, so only the limit matters.
  hammer_one_key<rltest::TokenBucketAlgo>({37, ratelimit::per_hour(1)});
  hammer_one_key<rltest::LeakyBucketAlgo>({37, ratelimit::per_hour(1)});
  hammer_one_key<rltest::FixedWindowAlgo>({37, ratelimit::Rate{37, 1h}});
  hammer_one_key<rltest::SlidingLogAlgo>({37, ratelimit::Rate{37, 1h}});
  hammer_one_key<rltest::SlidingCounterAlgo>({37, ratelimit::Rate{37, 1h}});
}
