// Conformance, the limits every algorithm reports alike (README, "Semantics shared by all" and
// the Decision fields): a fresh key, spending it unit by unit, a cost above the limit (never),
// and a cost below 1 or a negative max_wait (std::invalid_argument). Written once, run for
// every Case<Algo, Backend> (conformance.hpp) with the algorithm's row of table.hpp.
#include <chrono>
#include <cstdint>
#include <limits>
#include <stdexcept>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

#include "conformance.hpp"

using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::ManualClock;
using rltest::admitted;
using rltest::denied;
using rltest::fresh;
using rltest::conformance::Cases;

TEMPLATE_LIST_TEST_CASE("A key never seen is fresh at any time, and its first request finds it so",
                        "[conformance][any_storage]", Cases) {
  using Row = typename TestType::Row;
  INFO(TestType::label());
  ManualClock clock;
  auto limiter = TestType::make(clock);
  const auto limit = TestType::limit;
  CHECK(limiter.peek("k") == fresh(limit));
  clock.set(7s);
  CHECK(limiter.peek("never seen") == fresh(limit));
  CHECK(limiter.peek("k") == fresh(limit));
  // The whole limit at once, from the fresh state.
  CHECK(limiter.try_acquire("other", limit) == Row::whole_at_7s);
  clock.set(7300ms);
  CHECK(limiter.peek("yet another") == fresh(limit));
}

TEMPLATE_LIST_TEST_CASE("Unit requests spend a fresh key one by one down to remaining 0",
                        "[conformance][any_storage]", Cases) {
  using Row = typename TestType::Row;
  INFO(TestType::label());
  ManualClock clock;
  auto limiter = TestType::make(clock);
  const auto limit = TestType::limit;
  // The i-th leaves limit - i; the row says when each is reset (and served, for a queue).
  for (std::int64_t i = 1; i <= limit; ++i) {
    INFO("unit request #" << i);
    CHECK(limiter.try_acquire("k") == Row::unit(i));
  }
  CHECK(limiter.try_acquire("k") == Row::unit_denied);
  CHECK(limiter.peek("k") == Row::unit_denied);
}

TEMPLATE_LIST_TEST_CASE(
    "A cost above the limit is denied with retry_after never, reports the key as it is and "
    "changes nothing, and acquire returns it at once",
    "[conformance][any_storage][acquire]", Cases) {
  constexpr auto row = TestType::Row::never;
  INFO(TestType::label());
  ManualClock clock;
  auto limiter = TestType::make(clock);
  const auto limit = TestType::limit;
  // Fresh: all `limit` units left, nothing to reset, but limit + 1 can never fit.
  const Decision fresh_never = denied(limit, limit, Decision::never, 0ms);
  CHECK(limiter.try_acquire("k", limit + 1) == fresh_never);
  clock.set(row.spend_at);
  CHECK(limiter.try_acquire("k", limit + 1) == fresh_never);
  CHECK(limiter.try_acquire("k", row.cost) == row.spent);
  clock.set(row.ask_at);
  CHECK(limiter.try_acquire("k", limit + 1) == row.never);
  CHECK(limiter.try_acquire("k", 1'000'000'000) == row.never);
  CHECK(limiter.try_acquire("k", limit + 1) == row.never);
  // acquire never waits for what cannot happen, however long it may wait.
  CHECK(limiter.acquire("k", limit + 1, 1h) == row.never);
  CHECK(limiter.acquire("k", limit + 1, Decision::never) == row.never);
  CHECK(clock.now() == row.ask_at);
  CHECK(limiter.peek("k") == row.peek);
}

TEMPLATE_LIST_TEST_CASE(
    "A cost below 1 and a negative max_wait throw std::invalid_argument and change nothing",
    "[conformance][any_storage][acquire]", Cases) {
  using Row = typename TestType::Row;
  INFO(TestType::label());
  ManualClock clock;
  auto limiter = TestType::make(clock);
  const auto every_bad_call = [&] {
    for (const std::int64_t cost : {std::int64_t{0}, std::int64_t{-1}, std::int64_t{-3},
                                    std::numeric_limits<std::int64_t>::min()}) {
      INFO("cost " << cost);
      CHECK_THROWS_AS(limiter.try_acquire("k", cost), std::invalid_argument);
      CHECK_THROWS_AS(limiter.acquire("k", cost, 1s), std::invalid_argument);
      CHECK_THROWS_AS(limiter.acquire("k", cost, 0ms), std::invalid_argument);
    }
    for (const std::chrono::nanoseconds wait :
         {-1ns, std::chrono::nanoseconds{-1ms}, std::chrono::nanoseconds{-1s}}) {
      INFO("max_wait " << wait.count() << " ns");
      CHECK_THROWS_AS(limiter.acquire("k", 1, wait), std::invalid_argument);
    }
  };
  // On a fresh key: still fresh, and no time passed.
  every_bad_call();
  CHECK(limiter.peek("k") == fresh(TestType::limit));
  CHECK(clock.now() == 0ms);
  // On a key that has spent one unit: nothing more spent, no time passed.
  CHECK(limiter.try_acquire("k") == Row::unit(1));
  every_bad_call();
  CHECK(limiter.try_acquire("k") == Row::unit(2));
  CHECK(clock.now() == 0ms);
}

namespace limits_lowered_test {

/// Spends 5 of `key` under a limit of 10, then decides it under a limit of 2 with the same name
/// (a reload that lowered the limit, or two instances of a rolling deploy that disagree): the
/// lower limit denies with remaining 0 (max(0, 2 - 5)), is not degraded, and spends nothing.
template <class Limiter, class Storage>
ratelimit::Decision lowered(Storage storage, ManualClock clock) {
  Limiter high(ratelimit::Rate{10, std::chrono::minutes{1}}, storage, clock, "lowered");
  Limiter low(ratelimit::Rate{2, std::chrono::minutes{1}}, storage, clock, "lowered");
  CHECK(high.try_acquire("k", 5).remaining == 5);  // 10 - 5
  const Decision d = low.try_acquire("k");
  CHECK_FALSE(d.allowed);
  CHECK_FALSE(d.degraded);
  CHECK(d.limit == 2);
  CHECK(d.remaining == 0);
  CHECK(high.peek("k").remaining == 5);  // the denial spent nothing
  return d;
}

}  // namespace limits_lowered_test

TEMPLATE_LIST_TEST_CASE(
    "A key spent past a lowered limit is denied with remaining 0, not degraded, on every storage",
    "[conformance][any_storage][regression]", Backends) {
  // Fault: a window's count above the limit (spent under a higher one) made Redis's reply fail
  // the client's check (count <= N): every decision of such a key was degraded (admitted under
  // fail_open, the default) and reported to on_failure; in process `remaining` went negative
  // (2 - 5 = -3). Counts are now bounded by the largest N, and remaining by 0.
  using S = typename TestType::Storage;
  ManualClock clock;
  clock.set(7s);
  // Fixed window [0, 60 s): the window ends 60 - 7 = 53 s away.
  CHECK(
      limits_lowered_test::lowered<ratelimit::FixedWindow<ManualClock, S>>(TestType::make(), clock)
          .retry_after == 53s);
  // Sliding log: 5 entries at 7 s; 1 more fits once 4 have left, at 7 + 60 s: 60 s away.
  CHECK(limits_lowered_test::lowered<ratelimit::SlidingLog<ManualClock, S>>(TestType::make(), clock)
            .retry_after == 60s);
  // Sliding counter: the estimate 5 > 2 denies (its wait is the counter's own formula).
  CHECK(limits_lowered_test::lowered<ratelimit::SlidingCounter<ManualClock, S>>(TestType::make(),
                                                                                clock)
            .retry_after > 0s);
}
