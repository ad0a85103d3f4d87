// Issue 2, Semantics, rule 1 (TokenBucket) and worked examples (a), (b), run against every
// storage backend. Unless a test says otherwise: capacity B = 10, refill r = 2 tokens/s, so one
// token takes 500 ms and a whole refill 5 s. Times are whole milliseconds.
#include <chrono>
#include <stdexcept>

#include <catch2/catch.hpp>
#include <ratelimit/manual_clock.hpp>
#include <ratelimit/token_bucket.hpp>

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

TEMPLATE_LIST_TEST_CASE("A token bucket key starts full", "[token_bucket][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto tb = make_bucket<TestType>(ten_at_two_per_second, clock);
  // T = B = 10: remaining 10, nothing to refill.
  CHECK(tb.peek("k") == admitted(10, 10, 0ms));
  clock.set(7s);
  CHECK(tb.peek("never seen") == admitted(10, 10, 0ms));
  // The first request of a key finds all B tokens: T = 10 - 10 = 0, reset (10 - 0) / 2 = 5 s.
  CHECK(tb.try_acquire("other", 10) == admitted(10, 0, 5s));
}

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
    "A denied token bucket request reports when it would pass and changes "
    "nothing",
    "[token_bucket][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto tb = make_bucket<TestType>(ten_at_two_per_second, clock);
  // The i-th of 10 unit requests leaves T = 10 - i, reset i / 2 s.
  for (int i = 1; i <= 10; ++i) CHECK(tb.try_acquire("k") == admitted(10, 10 - i, i * 500ms));
  const Decision before = tb.peek("k");
  // T = 0: retry (1 - 0) / 2 = 500 ms, reset (10 - 0) / 2 = 5 s.
  CHECK(tb.try_acquire("k") == denied(10, 0, 500ms, 5s));
  // Cost 3: retry (3 - 0) / 2 = 1.5 s.
  CHECK(tb.try_acquire("k", 3) == denied(10, 0, 1500ms, 5s));
  CHECK(tb.try_acquire("k", 10) == denied(10, 0, 5s, 5s));
  // The same denial again: nothing was spent.
  CHECK(tb.try_acquire("k") == denied(10, 0, 500ms, 5s));
  CHECK(tb.peek("k") == before);
  // At 250 ms T = 0.5: retry (1 - 0.5) / 2 = 250 ms, reset (10 - 0.5) / 2 = 4.75 s.
  clock.set(250ms);
  CHECK(tb.try_acquire("k") == denied(10, 0, 250ms, 4750ms));
  // At 1.5 s T = 3: exactly the cost 3 that was denied 1.5 s earlier; T = 0, reset 5 s.
  clock.set(1500ms);
  CHECK(tb.try_acquire("k", 3) == admitted(10, 0, 5s));
}

TEMPLATE_LIST_TEST_CASE("A token bucket request costing more than the capacity is never admitted",
                        "[token_bucket][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto tb = make_bucket<TestType>(ten_at_two_per_second, clock);
  // Fresh: T = 10, but 11 > B can never fit; the state is reported as it is.
  CHECK(tb.try_acquire("k", 11) == denied(10, 10, Decision::never, 0ms));
  // T = 10 - 4 = 6, reset (10 - 6) / 2 = 2 s.
  CHECK(tb.try_acquire("k", 4) == admitted(10, 6, 2s));
  CHECK(tb.try_acquire("k", 11) == denied(10, 6, Decision::never, 2s));
  CHECK(tb.try_acquire("k", 1'000'000'000) == denied(10, 6, Decision::never, 2s));
  CHECK(tb.peek("k") == admitted(10, 6, 2s));
  // acquire returns at once, even with an unbounded wait.
  CHECK(tb.acquire("k", 11, 1h) == denied(10, 6, Decision::never, 2s));
  CHECK(tb.acquire("k", 11, Decision::never) == denied(10, 6, Decision::never, 2s));
  CHECK(clock.now() == 0ms);
}

TEMPLATE_LIST_TEST_CASE("A token bucket peek changes nothing and reports a cost-1 request",
                        "[token_bucket][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto tb = make_bucket<TestType>(ten_at_two_per_second, clock);
  CHECK(tb.try_acquire("k", 3) == admitted(10, 7, 1500ms));
  // T = 7: a cost-1 request would pass; remaining 7 and reset (10 - 7) / 2 = 1.5 s as it is.
  for (int i = 0; i < 3; ++i) CHECK(tb.peek("k") == admitted(10, 7, 1500ms));
  // The peeks spent nothing: T = 7 - 1 = 6, reset 2 s.
  CHECK(tb.try_acquire("k") == admitted(10, 6, 2s));
  CHECK(tb.try_acquire("k", 6) == admitted(10, 0, 5s));
  // T = 0: a cost-1 request would wait (1 - 0) / 2 = 500 ms.
  CHECK(tb.peek("k") == denied(10, 0, 500ms, 5s));
  // At 750 ms T = 1.5: cost 1 passes; remaining floor(1.5) = 1, reset (10 - 1.5) / 2 = 4.25 s.
  clock.set(750ms);
  CHECK(tb.peek("k") == admitted(10, 1, 4250ms));
  CHECK(tb.peek("k") == admitted(10, 1, 4250ms));
  // T = 1.5 - 1 = 0.5: remaining 0, reset (10 - 0.5) / 2 = 4.75 s.
  CHECK(tb.try_acquire("k") == admitted(10, 0, 4750ms));
}

TEMPLATE_LIST_TEST_CASE("Resetting a token bucket key makes it fresh again",
                        "[token_bucket][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto tb = make_bucket<TestType>(ten_at_two_per_second, clock);
  CHECK(tb.try_acquire("k", 10) == admitted(10, 0, 5s));
  CHECK(tb.try_acquire("j", 4) == admitted(10, 6, 2s));
  tb.reset("k");
  CHECK(tb.peek("k") == admitted(10, 10, 0ms));
  CHECK(tb.try_acquire("k", 10) == admitted(10, 0, 5s));
  // Only "k" was reset.
  CHECK(tb.peek("j") == admitted(10, 6, 2s));
  tb.reset("never seen");
  CHECK(tb.peek("never seen") == admitted(10, 10, 0ms));
}

TEMPLATE_LIST_TEST_CASE("A token bucket decides a stepped-back clock at the key's latest time",
                        "[token_bucket][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto tb = make_bucket<TestType>(ten_at_two_per_second, clock);
  clock.set(10s);
  CHECK(tb.try_acquire("k", 10) == admitted(10, 0, 5s));
  // Back to 4 s: decided at 10 s, where T = 0 (read at 4 s it would be a full bucket).
  clock.set(4s);
  CHECK(tb.peek("k") == denied(10, 0, 500ms, 5s));
  CHECK(tb.try_acquire("k") == denied(10, 0, 500ms, 5s));
  // 10.25 s is later than the key's time: T = 0.5, retry 250 ms, reset 4.75 s.
  clock.set(10250ms);
  CHECK(tb.try_acquire("k") == denied(10, 0, 250ms, 4750ms));
  // 10.5 s: T = 1 -> 0.
  clock.set(10500ms);
  CHECK(tb.try_acquire("k") == admitted(10, 0, 5s));
  // Back to 3 s: decided at 10.5 s, T = 0 again.
  clock.set(3s);
  CHECK(tb.try_acquire("k") == denied(10, 0, 500ms, 5s));
  // Another key has no latest time: it is fresh at 3 s.
  CHECK(tb.try_acquire("j") == admitted(10, 9, 500ms));
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

TEMPLATE_LIST_TEST_CASE("Token bucket calls reject a cost below 1 and acquire a negative max_wait",
                        "[token_bucket][any_storage][acquire]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto tb = make_bucket<TestType>(ten_at_two_per_second, clock);
  CHECK_THROWS_AS(tb.try_acquire("k", 0), std::invalid_argument);
  CHECK_THROWS_AS(tb.try_acquire("k", -1), std::invalid_argument);
  CHECK_THROWS_AS(tb.acquire("k", 0, 1s), std::invalid_argument);
  CHECK_THROWS_AS(tb.acquire("k", 1, -1ns), std::invalid_argument);
  CHECK_THROWS_AS(tb.acquire("k", 1, -1s), std::invalid_argument);
  // Nothing was spent, nothing waited.
  CHECK(tb.peek("k") == admitted(10, 10, 0ms));
  CHECK(clock.now() == 0ms);
}
