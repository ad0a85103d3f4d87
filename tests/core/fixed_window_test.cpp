// The fixed window's own semantics (README, "The algorithms"): what only the fixed window shows,
// windows aligned to the epoch, worked example (d) and acquire, run against every storage backend.
// The rules every algorithm shares (fresh key, denial, peek, cost limits, reset, stepped-back
// clock) are in tests/conformance, with this window's expected values in its row of table.hpp.
// Unless a test says otherwise: N = 3 requests per window W = 1 s; window k covers
// [k s, (k + 1) s). Times are whole milliseconds.
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
auto make_window(Rate rate, ManualClock clock) {
  return ratelimit::FixedWindow<ManualClock, typename Backend::Storage>(rate, Backend::make(),
                                                                        clock);
}

constexpr Rate three_per_second{3, std::chrono::seconds{1}};

}  // namespace

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
