// The token bucket's own semantics (README, "The algorithms"): what only the token bucket shows,
// its refill between requests, worked examples (a), (b) and acquire, run against every storage
// backend. The rules every algorithm shares (fresh key, denial, peek, cost limits, reset,
// stepped-back clock) are in tests/conformance, with this bucket's expected values in its row of
// table.hpp.
//
// Unless a test says otherwise: capacity B = 10, refill r = 2 tokens/s, so one token takes 500 ms
// and a whole refill 5 s. Times are whole milliseconds.
#include <chrono>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

#include "../support/backends.hpp"
#include "../support/expect.hpp"

using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::ManualClock;
using ratelimit::TokenBucketConfig;
using rltest::admitted;
using rltest::denied;

namespace {

template <class Backend>
auto make_bucket(TokenBucketConfig config, ManualClock clock) {
  return ratelimit::TokenBucket<ManualClock, typename Backend::Storage>(config, Backend::make(),
                                                                        clock);
}

constexpr TokenBucketConfig ten_at_two_per_second{10, ratelimit::per_second(2)};

}  // namespace

TEMPLATE_LIST_TEST_CASE(
    "An admitted token bucket request reports the tokens left and the refill "
    "time",
    "[token_bucket][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto tb = make_bucket<TestType>(ten_at_two_per_second, clock);
  // T = 10 - 1 = 9; retry_after 0; reset_after (10 - 9) / 2 = 500 ms.
  CHECK(tb.try_acquire("k") == admitted(10, 9, 500ms));
  // Cost 3: T = 9 - 3 = 6; reset (10 - 6) / 2 = 2 s.
  CHECK(tb.try_acquire("k", 3) == admitted(10, 6, 2s));
  // 250 ms later T = 6 + 2 * 0.25 = 6.5; minus 1 = 5.5: remaining floor(5.5) = 5,
  // reset (10 - 5.5) / 2 = 2.25 s.
  clock.set(250ms);
  CHECK(tb.try_acquire("k") == admitted(10, 5, 2250ms));
  // 10 s later the bucket is full again (min(B, ...)): T = 10 - 4 = 6, reset 2 s.
  clock.set(10250ms);
  CHECK(tb.try_acquire("k", 4) == admitted(10, 6, 2s));
}

TEMPLATE_LIST_TEST_CASE(
    "Worked example (a): a 10-token bucket at 2/s admits 10 of 15, then 5 of "
    "5 three seconds later",
    "[token_bucket][any_storage][example]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto tb = make_bucket<TestType>({10, ratelimit::per_second(2)}, clock);
  int admitted_now = 0, denied_now = 0;
  for (int i = 0; i < 15; ++i) (tb.try_acquire("user") ? admitted_now : denied_now)++;
  CHECK(admitted_now == 10);
  CHECK(denied_now == 5);
  // At t = 3 s: T = min(10, 0 + 2 * 3) = 6; five requests leave T = 1.
  clock.set(3s);
  Decision last{};
  for (int i = 0; i < 5; ++i) {
    last = tb.try_acquire("user");
    CHECK(last.allowed);
  }
  CHECK(last.remaining == 1);
}

TEMPLATE_LIST_TEST_CASE("Worked example (b): a 5-token bucket at 1/s denies the 6th for 1 s",
                        "[token_bucket][any_storage][example]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto tb = make_bucket<TestType>({5, ratelimit::per_second(1)}, clock);
  // The i-th leaves T = 5 - i; reset i / 1 s.
  for (int i = 1; i <= 5; ++i) CHECK(tb.try_acquire("user") == admitted(5, 5 - i, i * 1s));
  // T = 0: retry (1 - 0) / 1 = 1 s, reset 5 s.
  CHECK(tb.try_acquire("user") == denied(5, 0, 1s, 5s));
  clock.advance(1s);
  // T = 1 -> 0.
  CHECK(tb.try_acquire("user") == admitted(5, 0, 5s));
  CHECK(tb.try_acquire("user") == denied(5, 0, 1s, 5s));
}

TEMPLATE_LIST_TEST_CASE("Token bucket acquire waits retry_after through the clock, within max_wait",
                        "[token_bucket][any_storage][acquire]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto tb = make_bucket<TestType>(ten_at_two_per_second, clock);
  // Admissible now: no wait at all, even with max_wait 0.
  CHECK(tb.acquire("k", 1, 0ms) == admitted(10, 9, 500ms));
  CHECK(tb.acquire("k", 9, 0ms) == admitted(10, 0, 5s));
  CHECK(clock.now() == 0ms);
  // T = 0, cost 3: wait (3 - 0) / 2 = 1.5 s <= 2 s; then T = 3 - 3 = 0.
  CHECK(tb.acquire("k", 3, 2s) == admitted(10, 0, 5s));
  CHECK(clock.now() == 1500ms);
  // A unit needs 500 ms > 499 ms: denied at once, clock and state untouched.
  CHECK(tb.acquire("k", 1, 499ms) == denied(10, 0, 500ms, 5s));
  CHECK(clock.now() == 1500ms);
  // Exactly 500 ms is enough.
  CHECK(tb.acquire("k", 1, 500ms) == admitted(10, 0, 5s));
  CHECK(clock.now() == 2000ms);
}
