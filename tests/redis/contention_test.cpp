// Exactness under contention: several processes (each with its own
// RedisStorage, i.e. its own connection pool, as separate service instances would have), each
// with two threads, hammer one key with time frozen; together they must admit exactly the
// limit, for every algorithm. Then two limiter instances in separate processes walk the same
// run of time and must never exceed the shared limit.
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

#include "support/algorithms.hpp"
#include "support/child.hpp"
#include "support/redis_backend.hpp"

using namespace std::chrono_literals;
using ratelimit::ManualClock;
using ratelimit::RedisStorage;
using rltest::Shape;

namespace {

/// Collects every child's count (each must be >= 0: no failure) and returns their sum.
std::int64_t collect_all(const std::vector<rltest::Child>& children) {
  std::int64_t total = 0;
  for (const auto& c : children) {
    const auto n = rltest::collect(c);
    CHECK(n >= 0);
    total += n;
  }
  return total;
}

constexpr int processes = 4;
constexpr int threads_per_process = 2;
constexpr int attempts_per_thread = 30;  // 4 x 2 x 30 = 240 attempts, far above the limit

template <class Algo>
void hammer_one_key(const Shape& shape) {
  INFO("algorithm: " << Algo::name);
  // Fail here, in the parent, if there is no server (the children only count).
  auto options = rltest::test_redis_options("contention");
  std::vector<rltest::Child> children;
  for (int p = 0; p < processes; ++p) {
    children.push_back(rltest::spawn([&]() -> std::int64_t {
      ManualClock clock;
      clock.set(5s);  // frozen: nothing refills, no window moves
      auto limiter = Algo::make(shape, RedisStorage(options), clock);
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
  }
  const std::int64_t total = collect_all(children);
  // Frozen time: exactly the limit (37) is admitted, never one more.
  CHECK(total == shape.limit);
}

}  // namespace

TEST_CASE("Four processes of two threads on one key admit exactly the limit, for every algorithm",
          "[redis][concurrent]") {
  // Limit 37; the rate is slow (per hour) and time frozen, so only the limit matters.
  hammer_one_key<rltest::TokenBucketAlgo>({37, ratelimit::per_hour(1)});
  hammer_one_key<rltest::LeakyBucketAlgo>({37, ratelimit::per_hour(1)});
  hammer_one_key<rltest::FixedWindowAlgo>({37, ratelimit::Rate{37, 1h}});
  hammer_one_key<rltest::SlidingLogAlgo>({37, ratelimit::Rate{37, 1h}});
  hammer_one_key<rltest::SlidingCounterAlgo>({37, ratelimit::Rate{37, 1h}});
}

TEST_CASE("Two limiter instances in separate processes never exceed the shared limit over a run",
          "[redis][concurrent][token_bucket][fixed_window]") {
  auto options = rltest::test_redis_options("two-instances");
  // Both walk t = 0, 100 ms, ..., 5 s (51 steps) and try 3 requests at each step.
  constexpr int steps = 51;
  const auto run = [&](auto make) {
    return rltest::spawn([&, make]() -> std::int64_t {
      ManualClock clock;
      auto limiter = make(RedisStorage(options), clock);
      std::int64_t admitted = 0;
      for (int s = 0; s < steps; ++s) {
        clock.set(std::chrono::milliseconds{100 * s});
        for (int i = 0; i < 3; ++i) {
          const auto d = limiter.try_acquire("shared");
          if (d.degraded) return -1000000;
          admitted += d.allowed ? 1 : 0;
        }
      }
      return admitted;
    });
  };
  SECTION("token bucket") {
    // B = 5, r = 10/s (one token per 100 ms step) over T = 5 s: at most B + r T = 5 + 50 = 55
    // tokens exist. Demand (3 per process per step) exceeds the refill at every step, so after
    // the first burst the bucket is never full (no refill is wasted) and ends empty: exactly 55.
    const auto make = [](RedisStorage s, ManualClock c) {
      return rltest::TokenBucketAlgo::make({5, ratelimit::per_second(10)}, std::move(s), c);
    };
    const auto a = run(make), b = run(make);
    const auto na = rltest::collect(a), nb = rltest::collect(b);
    CHECK(na >= 0);
    CHECK(nb >= 0);
    CHECK(na + nb == 55);
  }
  SECTION("fixed window") {
    // N = 5 per 1 s: t = 0 .. 5 s touches windows 0..5, each saturated (6 requests per step,
    // 10 steps per window, from either process): exactly 6 x 5 = 30 admitted, never more.
    const auto make = [](RedisStorage s, ManualClock c) {
      return rltest::FixedWindowAlgo::make({5, ratelimit::per_second(5)}, std::move(s), c);
    };
    const auto a = run(make), b = run(make);
    const auto na = rltest::collect(a), nb = rltest::collect(b);
    CHECK(na >= 0);
    CHECK(nb >= 0);
    CHECK(na + nb == 30);
  }
}

TEST_CASE("Two instances with over-limit caches never deny what Redis alone would admit",
          "[redis][concurrent][hot_keys]") {
  // Two processes, each with the cache on, share one key; they step the same time line
  // together (a process-shared barrier per step, both stamping the step's time), so Redis never
  // decides a request at a later time than its own. Whenever a process's decision comes from
  // its cache, it asks Redis alone (a storage without a cache, same keys) the same request as a
  // dry run at the same instant: Redis must deny it too. Cached states are older than Redis's,
  // which only holds more spending, so a denial from the cache that Redis would not give means
  // the cache answered past the instant Redis alone would first have admitted.
  auto* shared = static_cast<pthread_barrier_t*>(::mmap(nullptr, sizeof(pthread_barrier_t),
                                                        PROT_READ | PROT_WRITE,
                                                        MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(shared != MAP_FAILED);
  pthread_barrierattr_t attr;
  ::pthread_barrierattr_init(&attr);
  ::pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  REQUIRE(::pthread_barrier_init(shared, &attr, 2) == 0);
  constexpr int steps = 300, per_step = 12;
  const auto run = [&]<class Algo>(const Shape& shape, std::string tag) {
    auto options = rltest::test_redis_options(tag);
    return rltest::spawn([&, options, shape]() -> std::int64_t {
      auto cached_options = options;
      cached_options.over_limit_cache.enabled = true;
      RedisStorage cached(cached_options), alone(options);
      ManualClock clock;
      auto limiter = Algo::make(shape, cached, clock), plain = Algo::make(shape, alone, clock);
      std::int64_t hits = 0, wrong = 0;
      bool failed = false;
      // Every step meets the barrier, even after a failure: the other process waits there.
      for (int s = 0; s < steps; ++s) {
        ::pthread_barrier_wait(shared);
        if (failed) continue;
        try {
          clock.set(std::chrono::milliseconds{10 * s});
          for (int i = 0; i < per_step; ++i) {
            // Mostly 1 (the sliding log's cache answers only its denial's cost), some 3.
            const std::int64_t cost = i % 4 == 3 ? 3 : 1;
            const auto before = cached.stats().cache_hits;
            const ratelimit::Decision d = limiter.try_acquire("hot", cost);
            failed = failed || d.degraded;
            if (cached.stats().cache_hits == before) continue;
            ++hits;
            const ratelimit::Operation dry{cost, true, ratelimit::Decision::never};
            if (plain.binding().apply("hot", clock.now(), dry).allowed) ++wrong;
          }
        } catch (...) {
          failed = true;
        }
      }
      if (failed) return -1'000'000;
      return wrong > 0 ? -wrong : hits;
    });
  };
  const auto both = [&]<class Algo>(const Shape& shape) {
    INFO("algorithm: " << Algo::name);
    const std::string tag = "two-caches-" + std::string(Algo::Model::Wire::key_tag);
    const auto a = run.template operator()<Algo>(shape, tag);
    const auto b = run.template operator()<Algo>(shape, tag);
    const auto ha = rltest::collect(a), hb = rltest::collect(b);
    CHECK(ha > 0);  // > 0: answers came from the cache, and Redis denied each of them too
    CHECK(hb > 0);
  };
  // 10 per second over 3 s of 10 ms steps, 24 requests of cost 1 or 3 per step: over the limit
  // almost always, with refills (or window ends) every few steps.
  both.template operator()<rltest::TokenBucketAlgo>({10, ratelimit::per_second(10)});
  both.template operator()<rltest::LeakyBucketAlgo>({10, ratelimit::per_second(10)});
  both.template operator()<rltest::FixedWindowAlgo>({10, ratelimit::per_second(10)});
  both.template operator()<rltest::SlidingLogAlgo>({10, ratelimit::per_second(10)});
  both.template operator()<rltest::SlidingCounterAlgo>({10, ratelimit::per_second(10)});
  ::pthread_barrier_destroy(shared);
  ::munmap(shared, sizeof(pthread_barrier_t));
}

TEST_CASE("Four processes of two threads never hold more than N slots of one key on Redis",
          "[redis][concurrent][concurrency_limit]") {
  // Each process has its own RedisStorage (its own connections, as a separate
  // instance would) and two threads that acquire a slot, hold it across one more Redis call,
  // and release it; time is frozen, so only releases free slots. A counter in memory shared by
  // the processes counts the slots held from after their acquire to just before their release,
  // which can never be more than Redis counts held: N = 3.
  constexpr std::int64_t slots = 3;
  constexpr int rounds = 25;
  auto* shared = static_cast<std::atomic<std::int64_t>*>(
      ::mmap(nullptr, 2 * sizeof(std::atomic<std::int64_t>), PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(shared != MAP_FAILED);
  std::atomic<std::int64_t>& in_flight = *new (&shared[0]) std::atomic<std::int64_t>{0};
  std::atomic<std::int64_t>& max_in_flight = *new (&shared[1]) std::atomic<std::int64_t>{0};
  auto options = rltest::test_redis_options("concurrency-limit");
  std::vector<rltest::Child> children;
  for (int p = 0; p < processes; ++p)
    children.push_back(rltest::spawn([&]() -> std::int64_t {
      ManualClock clock;
      clock.set(5s);
      ratelimit::ConcurrencyLimiter<ManualClock, RedisStorage> limiter(
          {slots, 1h}, RedisStorage(options), clock);
      std::atomic<std::int64_t> admitted{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < threads_per_process; ++t)
        threads.emplace_back([&] {
          for (int i = 0; i < rounds; ++i) {
            auto slot = limiter.try_acquire("shared");
            if (slot.decision().degraded) {
              admitted.store(-1000000);
              return;
            }
            if (!slot) continue;
            admitted.fetch_add(1);
            const std::int64_t now_held = in_flight.fetch_add(1) + 1;
            std::int64_t seen = max_in_flight.load();
            while (now_held > seen && !max_in_flight.compare_exchange_weak(seen, now_held)) {
            }
            (void)limiter.peek("shared");  // hold it across one more round trip
            in_flight.fetch_sub(1);
            const auto released = slot.release();
            if (!released || released->degraded) admitted.store(-1000000);
          }
        });
      for (auto& t : threads) t.join();
      return admitted.load();
    }));
  const std::int64_t total = collect_all(children);
  CHECK(total > 0);
  CHECK(max_in_flight.load() <= slots);
  // Every slot was given back: all N are free again.
  ManualClock clock;
  clock.set(5s);
  ratelimit::ConcurrencyLimiter<ManualClock, RedisStorage> check({slots, 1h}, RedisStorage(options),
                                                                 clock);
  CHECK(check.peek("shared").remaining == slots);
  ::munmap(shared, 2 * sizeof(std::atomic<std::int64_t>));
}
