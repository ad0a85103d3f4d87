// Conformance, what must change nothing (README, "Semantics shared by all"): a denied request,
// a peek, and a clock that steps back (a key's time never goes backwards, so it never mints
// capacity). Written once, run for every Case<Algo, Backend> (conformance.hpp) with the
// algorithm's row of table.hpp.
//
// Two consequences of "a denial changes nothing" hold for every algorithm and are used below:
// while nothing is admitted, the instant a denied cost would pass and the instant the key is
// fresh again stay where they are, so `retry_after` and `reset_after` shrink exactly as the
// clock advances; and the cost passes exactly at that instant, not a millisecond sooner.
#include <chrono>
#include <cstdint>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

#include "conformance.hpp"

using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::ManualClock;
using rltest::denied;
using rltest::fresh;
using rltest::conformance::Cases;

TEMPLATE_LIST_TEST_CASE(
    "A denied request changes nothing: what was left stays spendable, its retry_after is exact "
    "and it does not move the key's time",
    "[conformance][any_storage]", Cases) {
  constexpr auto row = TestType::Row::denial;
  INFO(TestType::label());
  ManualClock clock;
  auto limiter = TestType::make(clock);
  const auto limit = TestType::limit;

  // Part spent: m units left. Asking m + 1 is denied, twice alike, and m still pass.
  clock.set(row.at);
  CHECK(limiter.try_acquire("k", row.first_cost) == row.first);
  const std::int64_t m = row.first.remaining;
  const Decision partial_peek = limiter.peek("k");
  const Decision partial_denial = denied(limit, m, row.partial_retry, row.first.reset_after);
  CHECK(limiter.try_acquire("k", m + 1) == partial_denial);
  CHECK(limiter.try_acquire("k", m + 1) == partial_denial);
  CHECK(limiter.peek("k") == partial_peek);
  CHECK(limiter.try_acquire("k", m) == row.rest);

  // Spent: every cost is denied with its own retry_after, again and again alike.
  clock.set(row.deny_at);
  const Decision before = limiter.peek("k");
  for (const auto& d : row.denials) {
    INFO("cost " << d.cost);
    CHECK(limiter.try_acquire("k", d.cost) == denied(limit, 0, d.retry_after, row.reset_after));
  }
  for (const auto& d : row.denials) {
    INFO("cost " << d.cost << ", asked again");
    CHECK(limiter.try_acquire("k", d.cost) == denied(limit, 0, d.retry_after, row.reset_after));
  }
  CHECK(limiter.peek("k") == before);

  // `later` on, the same instants are `later` closer (and a unit still does not fit: 0 left).
  REQUIRE(row.denials.front().cost == 1);
  REQUIRE(row.later > 0ms);
  clock.set(row.deny_at + row.later);
  for (const auto& d : row.denials) {
    INFO("cost " << d.cost << ", " << row.later.count() << " ns later");
    REQUIRE(d.retry_after > row.later);
    CHECK(limiter.try_acquire("k", d.cost) ==
          denied(limit, 0, d.retry_after - row.later, row.reset_after - row.later));
  }
  // Those denials did not move the key's time: back at deny_at it reads as before.
  clock.set(row.deny_at);
  CHECK(limiter.peek("k") == before);

  // The cost passes exactly its retry_after after deny_at, not 1 ms sooner.
  std::chrono::nanoseconds wait{-1};
  for (const auto& d : row.denials)
    if (d.cost == row.pass_cost) wait = d.retry_after;
  REQUIRE(wait > 0ms);
  clock.set(row.deny_at + wait - 1ms);
  CHECK(limiter.try_acquire("k", row.pass_cost) ==
        denied(limit, row.remaining_1ms_before, 1ms, row.reset_after - wait + 1ms));
  clock.set(row.deny_at + wait);
  CHECK(limiter.try_acquire("k", row.pass_cost) == row.pass);
}

TEMPLATE_LIST_TEST_CASE("peek reports what a cost-1 request would get and changes nothing",
                        "[conformance][any_storage]", Cases) {
  constexpr auto row = TestType::Row::peek;
  INFO(TestType::label());
  ManualClock clock;
  auto limiter = TestType::make(clock);
  clock.set(row.spend_at);
  CHECK(limiter.try_acquire("k", row.cost) == row.spent);
  clock.set(row.peek_at);
  for (int i = 0; i < 3; ++i) CHECK(limiter.peek("k") == row.peek);
  // The peeks spent nothing: the unit finds the state the first peek saw.
  CHECK(limiter.try_acquire("k") == row.unit);
  if (row.rest) {
    CHECK(limiter.try_acquire("k", row.unit.remaining) == *row.rest);
  } else {
    CHECK(row.unit.remaining == 0);
  }
  // Spent: the peek is the cost-1 request's denial, which changes nothing either.
  CHECK(limiter.peek("k") == row.spent_peek);
  CHECK(limiter.try_acquire("k") == row.spent_peek);
  CHECK(limiter.peek("k") == row.spent_peek);
  // When a unit fits again, the peek says so without taking it.
  clock.set(row.later_at);
  CHECK(limiter.peek("k") == row.later_peek);
  CHECK(limiter.peek("k") == row.later_peek);
  CHECK(limiter.try_acquire("k") == row.later_unit);
}

TEMPLATE_LIST_TEST_CASE(
    "A clock stepped back never mints capacity: a key is decided at its latest time, and its "
    "durations count from there",
    "[conformance][any_storage]", Cases) {
  constexpr auto row = TestType::Row::step_back;
  INFO(TestType::label());
  ManualClock clock;
  auto limiter = TestType::make(clock);
  const auto limit = TestType::limit;
  clock.set(row.at);
  CHECK(limiter.try_acquire("k", limit) == row.spent);
  // Back before the key's time: decided at `at`, where the limit is spent.
  clock.set(row.back_to);
  CHECK(limiter.peek("k") == row.back);
  CHECK(limiter.try_acquire("k") == row.back);
  CHECK(limiter.try_acquire("k") == row.back);
  // Forward past it again, the instants reported from back_to hold: half the wait later, half
  // of it is left...
  const auto half = row.back.retry_after / 2;
  REQUIRE(half * 2 == row.back.retry_after);
  clock.set(row.at + half);
  const Decision halfway = denied(limit, 0, half, row.back.reset_after - half);
  CHECK(limiter.peek("k") == halfway);
  CHECK(limiter.try_acquire("k") == halfway);
  // ... and a unit passes exactly at the end of it.
  clock.set(row.at + row.back.retry_after);
  CHECK(limiter.try_acquire("k") == row.after);
  // Back again, before the key's new time: decided there.
  clock.set(row.back_again_to);
  CHECK(limiter.try_acquire("k", row.back_again_cost) == row.back_again);
  // Another key has no latest time: it is decided at the clock's time, fresh.
  CHECK(limiter.peek("j") == fresh(limit));
  CHECK(limiter.try_acquire("j") == row.other);
}

TEMPLATE_LIST_TEST_CASE(
    "A refund gives back at most what its take removed, in the take's own window; a penalty "
    "spends beyond the limit, at most twice it, and retry_after grows by its worth",
    "[conformance][any_storage][refund][penalty]", Cases) {
  if constexpr (ratelimit::Adjustable<typename TestType::Algo::Model>) {
    constexpr auto row = TestType::Row::adjust;
    INFO(TestType::label());
    ManualClock clock;
    auto limiter = TestType::make(clock);
    const auto limit = TestType::limit;
    clock.set(row.at);
    CHECK(limiter.try_acquire("k", row.cost) == row.taken);
    REQUIRE(limiter.try_acquire("j", row.late_cost).allowed);
    clock.set(row.refund_at);
    CHECK(limiter.refund("k", row.refund_cost, row.at) == row.refunded);
    CHECK(limiter.peek("k") == row.refunded);  // the refund's decision is the peek after it
    clock.set(row.late_at);
    const Decision before = limiter.peek("j");
    CHECK(limiter.refund("j", row.late_cost, row.at) == row.late);
    CHECK(before == row.late);  // nothing was left to give back: nothing changed
    CHECK(limiter.peek("j") == row.late);

    clock.set(row.at);
    CHECK(limiter.penalty("p", row.penalty_cost) == row.penalized);
    CHECK(limiter.peek("p") == row.penalized);
    CHECK(limiter.penalty("c", 100 * limit) == row.capped);
    // A penalty of the whole cap again changes nothing: at most twice the limit stays spent.
    CHECK(limiter.penalty("c", 100 * limit) == row.capped);
    REQUIRE(row.penalized.retry_after > 0ms);
    clock.set(row.at + row.penalized.retry_after - 1ms);
    CHECK_FALSE(limiter.try_acquire("p").allowed);
    clock.set(row.at + row.penalized.retry_after);
    CHECK(limiter.try_acquire("p") == row.pass);
  }
}

TEMPLATE_LIST_TEST_CASE(
    "A reservation takes now, into debt, and says when its units are due; one due later than "
    "its bound, or that would leave more than twice the limit spent, is refused and changes "
    "nothing; a cancel before the units are due gives them all back, after it nothing",
    "[conformance][any_storage][reserve]", Cases) {
  if constexpr (ratelimit::Reservable<typename TestType::Algo::Model>) {
    constexpr auto row = TestType::Row::reserve;
    INFO(TestType::label());
    ManualClock clock;
    auto limiter = TestType::make(clock);
    const auto limit = TestType::limit;
    clock.set(0ms);
    CHECK(limiter.try_acquire("k", row.spent_cost) == row.spent);
    const ratelimit::Reservation r = limiter.reserve("k", row.cost);
    CHECK(r.decision == row.reserved);
    CHECK(r.ok());
    CHECK(r.cost == row.cost);
    CHECK(r.reserved_at == 0ms);
    CHECK(r.delay() == row.reserved.delay);
    CHECK(r.delay_from(row.reserved.delay / 2) == row.reserved.delay - row.reserved.delay / 2);
    ratelimit::Reservation far = r;  // built by hand: due_at saturates rather than overflow
    far.reserved_at = Decision::never;
    CHECK(far.due_at() == Decision::never);
    CHECK(far.delay_from(0ms) == Decision::never);
    const Decision debt = limiter.peek("k");
    const auto late = limiter.reserve("k", limit, row.late_wait);
    CHECK(late.decision == row.late);
    CHECK_FALSE(late.ok());
    CHECK(late.delay() == Decision::never);
    CHECK(limiter.reserve("k", row.over_cost).decision == row.over);
    // More than the limit is never reserved: the key as it is, retry_after never.
    Decision never = debt;
    never.retry_after = Decision::never;
    CHECK(limiter.reserve("k", limit + 1).decision == never);
    CHECK(limiter.peek("k") == debt);  // the refusals changed nothing
    // Cancelling a refusal gives nothing back.
    CHECK(limiter.cancel("k", late) == debt);
    clock.set(row.cancel_at);
    CHECK(limiter.cancel("k", r) == row.cancelled);
    CHECK(limiter.peek("k") == row.cancelled);

    clock.set(0ms);
    const auto now = limiter.reserve("j", row.now_cost);
    CHECK(now.decision == row.now);
    clock.set(1ms);
    CHECK(limiter.cancel("j", now) == row.kept);
    CHECK(limiter.peek("j") == row.kept);

    clock.set(0ms);
    REQUIRE(limiter.try_acquire("m", limit).allowed);
    CHECK(limiter.reserve("m", 2, row.wait).decision == row.edge);
    CHECK(limiter.reserve("m", 1, row.wait).decision == row.past);

    // Shadow mode: a refusal comes back ok, flagged, nothing taken; its cancel gives nothing.
    limiter.set_shadow_mode(true);
    const Decision before = limiter.peek("m");
    const auto shadowed = limiter.reserve("m", limit, 0ms);
    CHECK(shadowed.ok());
    CHECK(shadowed.decision.shadow_denied);
    CHECK(shadowed.decision.delay == 0ms);
    CHECK(limiter.cancel("m", shadowed) == before);
    CHECK(limiter.peek("m") == before);
    limiter.set_shadow_mode(false);
    CHECK_THROWS_AS(limiter.reserve("m", 0), std::invalid_argument);
    CHECK_THROWS_AS(limiter.reserve("m", 1, -1ns), std::invalid_argument);
  }
}
