// The ManualClock, the fake clock every test relies on: it starts at 0, has advance(d), set(t)
// and now(); copies share one time, thread-safe; its sleep_for(d) advances the time by d instead
// of sleeping, so blocking calls are instant in tests. Every other test relies on this.
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

using namespace std::chrono_literals;
using ratelimit::ManualClock;

static_assert(ratelimit::Clock<ManualClock>);
static_assert(ratelimit::Clock<ratelimit::SteadyClock>);
static_assert(ratelimit::Clock<ratelimit::SystemClock>);

TEST_CASE("ManualClock starts at 0 and moves only when told", "[clock][in_memory]") {
  ManualClock clock;
  CHECK(clock.now() == 0ns);
  clock.advance(1500ms);
  CHECK(clock.now() == 1500ms);
  clock.advance(0ns);
  CHECK(clock.now() == 1500ms);
  clock.set(200ms);  // back
  CHECK(clock.now() == 200ms);
  clock.set(7s);
  CHECK(clock.now() == 7s);
}

TEST_CASE("ManualClock copies share one time", "[clock][in_memory]") {
  ManualClock a;
  ManualClock b = a;
  a.advance(3s);
  CHECK(b.now() == 3s);
  b.set(1s);
  CHECK(a.now() == 1s);
}

TEST_CASE("ManualClock sleep_for advances instead of sleeping", "[clock][in_memory]") {
  ManualClock clock;
  clock.sleep_for(250ms);
  CHECK(clock.now() == 250ms);
  clock.sleep_for(0ns);
  clock.sleep_for(-5s);  // nothing to wait
  CHECK(clock.now() == 250ms);
}

TEST_CASE("ManualClock rejects negative steps and times beyond 2^62 ns, unchanged",
          "[clock][in_memory][range]") {
  ManualClock clock;
  const std::chrono::nanoseconds max{std::int64_t{1} << 62};
  CHECK(ManualClock::max_time == max);
  CHECK_THROWS_AS(clock.advance(-1ns), std::invalid_argument);
  CHECK_THROWS_AS(clock.set(-1ns), std::invalid_argument);
  CHECK_THROWS_AS(clock.set(max + 1ns), std::invalid_argument);
  CHECK(clock.now() == 0ns);
  clock.set(max - 1ns);
  CHECK_THROWS_AS(clock.advance(2ns), std::invalid_argument);
  CHECK(clock.now() == max - 1ns);
  clock.advance(1ns);
  CHECK(clock.now() == max);
}

TEST_CASE("ManualClock advances from many threads add up", "[clock][in_memory]") {
  ManualClock clock;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([clock]() mutable {
      for (int i = 0; i < 1000; ++i) clock.advance(1ns);
    });
  for (auto& t : threads) t.join();
  // 4 threads x 1000 steps of 1 ns.
  CHECK(clock.now() == 4000ns);
}

TEST_CASE("try_acquire with an explicit time decides at that time without reading the clock",
          "[clock][in_memory]") {
  // An explicit time: a caller that read the clock once passes the reading (one clock read for
  // several decisions). The limiter's own clock
  // stays at 0 throughout, so every decision below is at the time passed.
  ManualClock clock;
  ratelimit::TokenBucket<ManualClock> bucket({2, ratelimit::per_second(1)}, {}, clock);
  // Capacity 2 at t = 10 s: two pass, the third waits 1 s (one token per second).
  CHECK(bucket.try_acquire("k", 1, 10s).allowed);
  CHECK(bucket.try_acquire("k", 1, 10s).allowed);
  const auto denied = bucket.try_acquire("k", 1, 10s);
  CHECK_FALSE(denied.allowed);
  CHECK(denied.retry_after == 1s);
  // At 11 s one token is back; a reading before the key's latest time (5 s) is decided at 11 s.
  CHECK(bucket.try_acquire("k", 1, 11s).allowed);
  CHECK(bucket.try_acquire("k", 1, 5s).retry_after == 1s);
  CHECK(clock.now() == 0ns);
  CHECK_THROWS_AS(bucket.try_acquire("k", 0, 11s), std::invalid_argument);
}

#if defined(__linux__) && defined(CLOCK_MONOTONIC_COARSE)
TEST_CASE("CoarseClock never goes back and reports its tick", "[clock][in_memory]") {
  static_assert(ratelimit::Clock<ratelimit::CoarseClock>);
  ratelimit::CoarseClock clock;
  CHECK(ratelimit::CoarseClock::resolution() > 0ns);
  auto previous = clock.now();
  for (int i = 0; i < 1000; ++i) {
    const auto t = clock.now();
    CHECK(t >= previous);
    previous = t;
  }
}
#endif
