// Issue 2, Semantics, rule 3 (FixedWindow) and worked example (d), run against every storage
// backend. Unless a test says otherwise: N = 3 requests per window W = 1 s; window k covers
// [k s, (k + 1) s). Times are whole milliseconds.
#include <chrono>
#include <stdexcept>

#include <catch2/catch.hpp>
#include <ratelimit/fixed_window.hpp>
#include <ratelimit/manual_clock.hpp>
#include <ratelimit/sliding_log.hpp>

#include "../support/backends.hpp"
#include "../support/expect.hpp"

using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::ManualClock;
using ratelimit::Rate;
using rltest::admitted;
using rltest::denied;

namespace {

template <class Backend>
auto make_window(Rate rate, ManualClock clock) {
  return ratelimit::FixedWindow<ManualClock, typename Backend::Storage>(rate, Backend::make(),
                                                                        clock);
}

constexpr Rate three_per_second{3, std::chrono::seconds{1}};

}  // namespace

TEMPLATE_LIST_TEST_CASE("A fixed window key starts with an empty window",
                        "[fixed_window][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto fw = make_window<TestType>(three_per_second, clock);
  // c = 0: remaining 3, reset 0 (fresh).
  CHECK(fw.peek("k") == admitted(3, 3, 0ms));
  clock.set(7300ms);
  CHECK(fw.peek("never seen") == admitted(3, 3, 0ms));
}

TEMPLATE_LIST_TEST_CASE(
    "A fixed window counts admissions until the window aligned to the epoch "
    "ends",
    "[fixed_window][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto fw = make_window<TestType>(three_per_second, clock);
  clock.set(200ms);
  // Window 0 ends at 1 s: reset (0 + 1) * 1000 - 200 = 800 ms. c = 1, remaining 2.
  CHECK(fw.try_acquire("k") == admitted(3, 2, 800ms));
  // Cost 2: c = 3, remaining 0.
  CHECK(fw.try_acquire("k", 2) == admitted(3, 0, 800ms));
  // c + 1 > 3: retry and reset at the window's end, 800 ms.
  CHECK(fw.try_acquire("k") == denied(3, 0, 800ms, 800ms));
  clock.set(999ms);
  CHECK(fw.try_acquire("k") == denied(3, 0, 1ms, 1ms));
  // Window 1 starts at 1 s with c = 0: fresh (reset 0) until it counts.
  clock.set(1000ms);
  CHECK(fw.peek("k") == admitted(3, 3, 0ms));
  CHECK(fw.try_acquire("k") == admitted(3, 2, 1s));
  // Window 1 ends at 2 s: 2000 - 1750 = 250 ms.
  clock.set(1750ms);
  CHECK(fw.try_acquire("k", 2) == admitted(3, 0, 250ms));
}

TEMPLATE_LIST_TEST_CASE("A denied fixed window request changes nothing",
                        "[fixed_window][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto fw = make_window<TestType>(three_per_second, clock);
  clock.set(400ms);
  CHECK(fw.try_acquire("k") == admitted(3, 2, 600ms));
  const Decision before = fw.peek("k");
  // c = 1: cost 3 does not fit (1 + 3 > 3) until window 1, 600 ms away.
  CHECK(fw.try_acquire("k", 3) == denied(3, 2, 600ms, 600ms));
  CHECK(fw.try_acquire("k", 3) == denied(3, 2, 600ms, 600ms));
  CHECK(fw.peek("k") == before);
  // Cost 2 still fits: the denials counted nothing.
  CHECK(fw.try_acquire("k", 2) == admitted(3, 0, 600ms));
}

TEMPLATE_LIST_TEST_CASE("A fixed window request costing more than N is never admitted",
                        "[fixed_window][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto fw = make_window<TestType>(three_per_second, clock);
  clock.set(100ms);
  CHECK(fw.try_acquire("k", 4) == denied(3, 3, Decision::never, 0ms));
  CHECK(fw.try_acquire("k") == admitted(3, 2, 900ms));
  CHECK(fw.try_acquire("k", 4) == denied(3, 2, Decision::never, 900ms));
  CHECK(fw.acquire("k", 4, 1h) == denied(3, 2, Decision::never, 900ms));
  CHECK(clock.now() == 100ms);
}

TEMPLATE_LIST_TEST_CASE("A fixed window peek changes nothing and reports a cost-1 request",
                        "[fixed_window][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto fw = make_window<TestType>(three_per_second, clock);
  clock.set(250ms);
  CHECK(fw.try_acquire("k", 2) == admitted(3, 1, 750ms));
  for (int i = 0; i < 3; ++i) CHECK(fw.peek("k") == admitted(3, 1, 750ms));
  CHECK(fw.try_acquire("k") == admitted(3, 0, 750ms));
  // Full: a unit waits for window 1, 750 ms away.
  CHECK(fw.peek("k") == denied(3, 0, 750ms, 750ms));
  CHECK(fw.peek("k") == denied(3, 0, 750ms, 750ms));
}

TEMPLATE_LIST_TEST_CASE("Resetting a fixed window key empties its window",
                        "[fixed_window][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto fw = make_window<TestType>(three_per_second, clock);
  clock.set(250ms);
  CHECK(fw.try_acquire("k", 3) == admitted(3, 0, 750ms));
  CHECK(fw.try_acquire("j", 2) == admitted(3, 1, 750ms));
  fw.reset("k");
  CHECK(fw.peek("k") == admitted(3, 3, 0ms));
  CHECK(fw.try_acquire("k", 3) == admitted(3, 0, 750ms));
  CHECK(fw.peek("j") == admitted(3, 1, 750ms));
}

TEMPLATE_LIST_TEST_CASE("A fixed window decides a stepped-back clock at the key's latest time",
                        "[fixed_window][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto fw = make_window<TestType>(three_per_second, clock);
  clock.set(1500ms);
  CHECK(fw.try_acquire("k", 3) == admitted(3, 0, 500ms));
  // Back to 0.9 s (window 0, where "k" counted nothing): decided at 1.5 s, window 1 is full.
  clock.set(900ms);
  CHECK(fw.peek("k") == denied(3, 0, 500ms, 500ms));
  CHECK(fw.try_acquire("k") == denied(3, 0, 500ms, 500ms));
  clock.set(2000ms);
  CHECK(fw.try_acquire("k") == admitted(3, 2, 1s));
  // Back to 1.2 s: decided at 2 s, window 2 holds 1.
  clock.set(1200ms);
  CHECK(fw.try_acquire("k") == admitted(3, 1, 1s));
}

TEMPLATE_LIST_TEST_CASE(
    "Worked example (d): 100/min fixed windows admit 200 around a boundary, a "
    "sliding log only 100",
    "[fixed_window][sliding_log][any_storage][example]", Backends) {
  INFO("storage: " << TestType::name);
  using namespace std::chrono;
  ManualClock clock;
  auto storage = TestType::make();
  ratelimit::FixedWindow<ManualClock, typename TestType::Storage> fw(ratelimit::per_minute(100),
                                                                     storage, clock);
  ratelimit::SlidingLog<ManualClock, typename TestType::Storage> log(ratelimit::per_minute(100),
                                                                     storage, clock);
  // 10:05:59 is 36359 s after the epoch, in minute 605 = [36300 s, 36360 s).
  clock.set(hours{10} + minutes{5} + seconds{59});
  int fixed_admitted = 0, log_admitted = 0;
  for (int i = 1; i <= 100; ++i) {
    // The minute ends 1 s later; c = i.
    CHECK(fw.try_acquire("user") == admitted(100, 100 - i, 1s));
    ++fixed_admitted;
    // The log's window (t - 60 s, t]; newest + 60 s - t = 60 s.
    CHECK(log.try_acquire("user") == admitted(100, 100 - i, 60s));
    ++log_admitted;
  }
  // 10:06:00 = 36360 s opens minute 606.
  clock.set(hours{10} + minutes{6});
  for (int i = 1; i <= 100; ++i) {
    const Decision f = fw.try_acquire("user");
    CHECK(f == admitted(100, 100 - i, 60s));
    fixed_admitted += f.allowed;
    // (36300 s, 36360 s] still holds the 100 stamped 36359 s: the oldest leaves at
    // 36359 + 60 - 36360 = 59 s from now; the newest likewise.
    const Decision l = log.try_acquire("user");
    CHECK(l == denied(100, 0, 59s, 59s));
    log_admitted += l.allowed;
  }
  CHECK(fixed_admitted == 200);
  CHECK(log_admitted == 100);
}

TEMPLATE_LIST_TEST_CASE("Fixed window acquire waits for the next window, within max_wait",
                        "[fixed_window][any_storage][acquire]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto fw = make_window<TestType>(three_per_second, clock);
  clock.set(200ms);
  CHECK(fw.acquire("k", 3, 0ms) == admitted(3, 0, 800ms));
  // Window 1 is 800 ms away.
  CHECK(fw.acquire("k", 1, 799ms) == denied(3, 0, 800ms, 800ms));
  CHECK(clock.now() == 200ms);
  CHECK(fw.acquire("k", 2, 800ms) == admitted(3, 1, 1s));
  CHECK(clock.now() == 1000ms);
  CHECK_THROWS_AS(fw.acquire("k", 0, 1s), std::invalid_argument);
  CHECK_THROWS_AS(fw.acquire("k", 1, -1ms), std::invalid_argument);
  CHECK_THROWS_AS(fw.try_acquire("k", 0), std::invalid_argument);
  CHECK_THROWS_AS(fw.try_acquire("k", -1), std::invalid_argument);
  CHECK(fw.peek("k") == admitted(3, 1, 1s));
  CHECK(clock.now() == 1000ms);
}
