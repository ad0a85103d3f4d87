// The sliding counter's own semantics (README, "The algorithms"): what only the sliding counter
// shows, the previous window weighed by its overlap and the exact earliest instant, worked example
// (c) and acquire, run against every storage backend. The rules every algorithm shares (fresh key,
// denial, peek, cost limits, reset, stepped-back clock) are in tests/conformance, with this
// counter's expected values in its row of table.hpp.
//
// Unless a test says otherwise: N = 10 per window W = 1 s; window k covers [k s, (k + 1) s); at t,
// e = t - kW and the estimate is E = c + p (W - e) / W. Times are whole milliseconds.
#include <chrono>
#include <stdexcept>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

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
auto make_counter(Rate rate, ManualClock clock) {
  return ratelimit::SlidingCounter<ManualClock, typename Backend::Storage>(rate, Backend::make(),
                                                                           clock);
}

constexpr Rate ten_per_second{10, std::chrono::seconds{1}};

}  // namespace

TEMPLATE_LIST_TEST_CASE("A sliding counter weighs the previous window by its overlap",
                        "[sliding_counter][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto sc = make_counter<TestType>(ten_per_second, clock);
  clock.set(200ms);
  // c = 4, p = 0: E = 4, remaining 6; reset (0 + 2) * 1000 - 200 = 1800 ms.
  CHECK(sc.try_acquire("k", 4) == admitted(10, 6, 1800ms));
  // At 1250 ms (k = 1, e = 250): c = 0, p = 4, E = 4 * 750 / 1000 = 3: remaining 7;
  // only p > 0: reset (1 + 1) * 1000 - 1250 = 750 ms.
  clock.set(1250ms);
  CHECK(sc.peek("k") == admitted(10, 7, 750ms));
  // c = 1: E = 1 + 3 = 4: remaining 6; reset (1 + 2) * 1000 - 1250 = 1750 ms.
  CHECK(sc.try_acquire("k") == admitted(10, 6, 1750ms));
  // At 1900 ms: E = 1 + 4 * 100 / 1000 = 1.4: remaining floor(8.6) = 8; reset 1100 ms.
  clock.set(1900ms);
  CHECK(sc.peek("k") == admitted(10, 8, 1100ms));
  // At 3000 ms (k = 3) the key counted neither in window 3 nor in window 2: fresh.
  clock.set(3000ms);
  CHECK(sc.peek("k") == admitted(10, 10, 0ms));
}

TEMPLATE_LIST_TEST_CASE(
    "A denied sliding counter request gets the exact earliest instant and "
    "changes nothing",
    "[sliding_counter][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto sc = make_counter<TestType>(ten_per_second, clock);
  // The i-th unit at 0: c = i, remaining 10 - i, reset 2 s.
  for (int i = 1; i <= 10; ++i) CHECK(sc.try_acquire("k") == admitted(10, 10 - i, 2s));
  clock.set(500ms);
  const Decision before = sc.peek("k");
  // E = 10. No room in window 0 (p = 0). In window 1, c = 0 and p = 10: n + 10 (W - e) / W <= 10
  // iff 10 e >= n W: cost 1 at e = 100 ms (1100 ms, 600 ms away); cost 5 at e = 500 ms (1 s
  // away); cost 10 needs e = W, i.e. window 2 at 2000 ms (1.5 s away). reset (0 + 2) s - 0.5 s.
  CHECK(sc.try_acquire("k") == denied(10, 0, 600ms, 1500ms));
  CHECK(sc.try_acquire("k", 5) == denied(10, 0, 1s, 1500ms));
  CHECK(sc.try_acquire("k", 10) == denied(10, 0, 1500ms, 1500ms));
  CHECK(sc.peek("k") == before);
  // At 1099 ms: E = 10 * 901 / 1000 = 9.01, 9.01 + 1 > 10.
  clock.set(1099ms);
  CHECK(sc.try_acquire("k") == denied(10, 0, 1ms, 901ms));
  // At 1100 ms: E = 10 * 900 / 1000 = 9, 9 + 1 <= 10. Then c = 1: E = 10, remaining 0,
  // reset (1 + 2) s - 1.1 s = 1.9 s.
  clock.set(1100ms);
  CHECK(sc.try_acquire("k") == admitted(10, 0, 1900ms));
  // Within window 1, with p = 10: (c + n) W + p (W - e) <= N W iff 10 e >= (1 + 1 + 10 - 10) W:
  // e = 200 ms, 100 ms away.
  CHECK(sc.try_acquire("k") == denied(10, 0, 100ms, 1900ms));
  // At 1150 ms E = 1 + 10 * 850 / 1000 = 9.5: remaining floor(0.5) = 0, retry 50 ms.
  clock.set(1150ms);
  CHECK(sc.peek("k") == denied(10, 0, 50ms, 1850ms));
  // At 1200 ms E = 1 + 8 = 9: one more fits.
  clock.set(1200ms);
  CHECK(sc.try_acquire("k") == admitted(10, 0, 1800ms));
}

TEMPLATE_LIST_TEST_CASE(
    "Worked example (c): 100/min with 80 in the previous minute and 30 in "
    "this one admits a request 15 s in, leaving 9",
    "[sliding_counter][any_storage][example]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto sc = make_counter<TestType>(ratelimit::per_minute(100), clock);
  // 80 in minute 0 (at 30 s).
  clock.set(30s);
  for (int i = 0; i < 80; ++i) REQUIRE(sc.try_acquire("user"));
  // 30 in minute 1, at 70 s (e = 10 s): the last sees 29 + 80 * 50 / 60 + 1 = 96.67 <= 100.
  clock.set(70s);
  for (int i = 0; i < 30; ++i) REQUIRE(sc.try_acquire("user"));
  // 15 s into minute 1: E = 30 + 80 * 45 / 60 = 90; remaining 10; reset (1 + 2) min - 75 s.
  clock.set(75s);
  CHECK(sc.peek("user") == admitted(100, 10, 105s));
  // Admitted: E = 91, remaining 9.
  CHECK(sc.try_acquire("user") == admitted(100, 9, 105s));
}

TEMPLATE_LIST_TEST_CASE("Sliding counter acquire waits for the estimate to fall, within max_wait",
                        "[sliding_counter][any_storage][acquire]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto sc = make_counter<TestType>(ten_per_second, clock);
  CHECK(sc.acquire("k", 10, 0ms) == admitted(10, 0, 2s));
  clock.set(500ms);
  // As in the denial test: a unit fits at 1100 ms.
  CHECK(sc.acquire("k", 1, 599ms) == denied(10, 0, 600ms, 1500ms));
  CHECK(clock.now() == 500ms);
  CHECK(sc.acquire("k", 1, 600ms) == admitted(10, 0, 1900ms));
  CHECK(clock.now() == 1100ms);
  CHECK_THROWS_AS(sc.acquire("k", 0, 1s), std::invalid_argument);
  CHECK_THROWS_AS(sc.acquire("k", 1, -1ms), std::invalid_argument);
  CHECK_THROWS_AS(sc.try_acquire("k", 0), std::invalid_argument);
  CHECK(clock.now() == 1100ms);
}
