// Conformance, parameters (docs/algorithms.md, "Semantics shared by all"): a key whose state was
// written under other parameters (a rules reload or a deploy that changed a rate, a limit or a
// window; a limiter of the same name built with another rate) is decided under the new ones: never
// degraded, and never with more than a fresh key would get. Written once over every
// Case<Algo, Backend> (conformance.hpp) with the rows of change_table.hpp, plus the two algorithms
// outside that list (the concurrency limit here; the calendar quota in params_calendar_test.cpp),
// and the fault that was reproduced in production, by name.
#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

#include "change_table.hpp"
#include "conformance.hpp"
#include "support/backends.hpp"
#include "support/counting_listener.hpp"

using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::ManualClock;
using rltest::admitted;
using rltest::denied;
using rltest::conformance::Cases;

TEMPLATE_LIST_TEST_CASE("A key spent under other parameters is decided under the new ones",
                        "[conformance][any_storage][params]", Cases) {
  using Algo = typename TestType::Algo;
  constexpr auto row = rltest::conformance::Change<Algo>::row;
  INFO(TestType::label());
  ManualClock clock;
  auto storage = TestType::Backend::make();
  // Limiters of one algorithm and one name on one storage share each key's state.
  auto before = Algo::make(TestType::Row::shape, storage, clock, "reloaded");
  clock.set(row.spend_at);
  CHECK(before.try_acquire("up", row.spend_cost) == row.spent);
  CHECK(before.try_acquire("down", row.spend_cost) == row.spent);

  for (const auto& [key, to] : {std::pair{"up", row.larger}, std::pair{"down", row.smaller}}) {
    INFO("key " << key << ": limit " << to.shape.limit << ", " << to.shape.rate.count << " per "
                << to.shape.rate.period.count() << " ns");
    auto after = Algo::make(to.shape, storage, clock, "reloaded");
    clock.set(to.at);
    const Decision peek = after.peek(key);
    CHECK_FALSE(peek.degraded);
    CHECK(peek == to.peek);
    const Decision d = after.try_acquire(key, to.cost);
    CHECK_FALSE(d.degraded);
    CHECK(d == to.decision);
    // Never more than a fresh key: one never seen, decided alike at the same time.
    const Decision fresh = after.peek("never seen");
    CHECK(peek.remaining <= fresh.remaining);
  }
}

// The fault this pins: a TokenBucket of 3 per second, then a TokenBucket of 10 per hour with
// the same name on the same key of a RedisStorage, was decided degraded ("unexpected reply from
// the token_bucket script") until the key expired: the script stored the bucket's instant as
// whole us plus a remainder in thirds of a ns, which the 10-per-hour reader (whose unit is the
// ns) refused as out of range. Under fail_open every active key lost its limit for up to a
// whole refill after a reload; under fail_closed every one was denied.
TEMPLATE_LIST_TEST_CASE(
    "A token bucket of 3 per second, then 10 per hour with the same name on the same key, decides "
    "without degrading",
    "[conformance][any_storage][params][token_bucket]", Backends) {
  using Bucket = ratelimit::TokenBucket<ManualClock, typename TestType::Storage>;
  INFO(TestType::name);
  ManualClock clock;
  auto storage = TestType::make();
  Bucket fast({3, ratelimit::per_second(3)}, storage, clock, "api");
  // Cost 1 at 0: T = 2, the bucket full again at 1/3 s = 333333333 1/3 ns, reported rounded
  // up to the next ns.
  CHECK(fast.try_acquire("k") == admitted(3, 2, 333'333'334ns));

  Bucket slow({10, ratelimit::per_hour(10)}, storage, clock, "api");
  // The instant 1/3 s was written in thirds of a ns; 10 per hour counts in whole ns (count 1
  // per 360 s), so the remainder cannot be read and the instant is rounded up to the next whole
  // us on every storage: in process the remainder's width (2 bits) is not the new one (0), on
  // Redis the remainder, 1000 thirds of a ns past 333333 us, is not below the new unit of 1000.
  // Never earlier than written: at most what the key had.
  const std::chrono::nanoseconds at = 333'334us;
  // Backlog `at` < 360 s: one token missing of 10 (remaining 9), reset `at`.
  const Decision peek = slow.peek("k");
  CHECK_FALSE(peek.degraded);
  CHECK(peek == admitted(10, 9, at));
  // Cost 9: at + 9 x 360 s <= 3600 s; then T = 0, reset at + 3240 s.
  CHECK(slow.try_acquire("k", 9) == admitted(10, 0, at + 3240s));
  // The 10th: at + 3600 s > 3600 s: it waits `at`.
  CHECK(slow.try_acquire("k") == denied(10, 0, at, at + 3240s));

  // The other way, on another key: 10 per hour spent whole at 0 (full again at 3600 s, a whole
  // ns: nothing to round), then 3 per second (a whole refill 1 s): a unit fits once the backlog
  // is at most 1 - 1/3 = 2/3 s, at 3600 - 2/3 = 3599 1/3 s, reported rounded up to the ns
  // (remaining 0: the backlog is worth 10800 tokens); reset 3600 s.
  CHECK(slow.try_acquire("j", 10) == admitted(10, 0, 3600s));
  const Decision back = fast.try_acquire("j");
  CHECK_FALSE(back.degraded);
  CHECK(back == denied(3, 0, 3'599'333'333'334ns, 3600s));
}

TEMPLATE_LIST_TEST_CASE("A concurrency limit's held leases count under a changed limit",
                        "[conformance][any_storage][params][concurrency]", Backends) {
  using Limiter = ratelimit::ConcurrencyLimiter<ManualClock, typename TestType::Storage>;
  INFO(TestType::name);
  ManualClock clock;
  auto storage = TestType::make();
  Limiter three({3, 10s}, storage, clock, "workers");
  // Three slots at 0, leases ending at 10 s: 0 remaining, reset 10 s.
  auto a = three.try_acquire("k");
  auto b = three.try_acquire("k");
  auto c = three.try_acquire("k");
  REQUIRE(c);
  CHECK(c.decision() == admitted(3, 0, 10s));

  clock.set(1s);
  // N = 1: 3 held > 1 (remaining 0); a slot waits for the (3 + 1 - 1) = 3rd earliest end,
  // 10 s: 9 s; the latest ends in 9 s too.
  Limiter one({1, 10s}, storage, clock, "workers");
  const auto denied_slot = one.try_acquire("k");
  CHECK_FALSE(denied_slot);
  CHECK_FALSE(denied_slot.decision().degraded);
  CHECK(denied_slot.decision() == denied(1, 0, 9s, 9s));
  // N = 5: 3 + 1 <= 5, remaining 1; the new lease ends at 1 + 10 = 11 s, reset 10 s.
  Limiter five({5, 10s}, storage, clock, "workers");
  auto d = five.try_acquire("k");
  CHECK(d);
  CHECK(d.decision() == admitted(5, 1, 10s));
}

namespace {

/// The parameters a limiter of `shape` decides with (`Limiter::params()`): built by a limiter
/// on a throwaway in-process storage, so that each algorithm's own configuration type (a
/// bucket's capacity and refill, a window's rate) is built by its Algo struct alone.
template <class Algo>
auto params_of(const rltest::Shape& shape) {
  return Algo::make(shape, ratelimit::InMemoryStorage{}, ManualClock{}).params();
}

}  // namespace

// The same rows as "A key spent under other parameters is decided under the new ones", each
// decision now carrying its key's parameters (a plan from a database) on one limiter built with
// yet other parameters: the values are the rows' (change_table.hpp), derived there, since by
// definition a decision with parameters p is the decision of a limiter of p on the same key.
TEMPLATE_LIST_TEST_CASE("A decision that carries its key's parameters is decided under them",
                        "[conformance][any_storage][params][per_call]", Cases) {
  using Algo = typename TestType::Algo;
  constexpr auto row = rltest::conformance::Change<Algo>::row;
  INFO(TestType::label());
  ManualClock clock;
  // The limiter's own parameters are the row's "larger" ones: no call below decides with them
  // unless it says so.
  auto limiter = Algo::make(row.larger.shape, TestType::Backend::make(), clock, "plans");
  const auto plan = params_of<Algo>(TestType::Row::shape);
  clock.set(row.spend_at);
  CHECK(limiter.try_acquire("up", row.spend_cost, plan) == row.spent);
  CHECK(limiter.try_acquire("down", row.spend_cost, plan, row.spend_at) == row.spent);

  // "up": every parameter larger, decided blocking.
  const auto larger = params_of<Algo>(row.larger.shape);
  clock.set(row.larger.at);
  CHECK(limiter.peek("up", larger) == row.larger.peek);
  CHECK(limiter.try_acquire("up", row.larger.cost, larger) == row.larger.decision);

  // "down": every parameter smaller, decided without blocking (a future, then a callback).
  const auto smaller = params_of<Algo>(row.smaller.shape);
  clock.set(row.smaller.at);
  CHECK(limiter.peek("down", smaller) == row.smaller.peek);
  CHECK(limiter.try_acquire_async("down", row.smaller.cost, smaller).get() == row.smaller.decision);
  // Both rows' smaller decisions are denials: nothing was spent, so the same again.
  REQUIRE_FALSE(row.smaller.decision.allowed);
  std::promise<Decision> called;
  limiter.try_acquire_async("down", row.smaller.cost, smaller,
                            [&](Decision d) { called.set_value(d); });
  CHECK(called.get_future().get() == row.smaller.decision);

  // Shadow mode and listeners as for try_acquire: the denial comes back admitted, marked, its
  // other fields the enforced decision's; a listener hears a shadow_limited outcome per call.
  auto listener = std::make_shared<rltest::CountingListener>();
  limiter.attach_listener(listener);
  limiter.set_shadow_mode(true);
  Decision shadowed = row.smaller.decision;
  shadowed.allowed = true;
  shadowed.shadow_denied = true;
  CHECK(limiter.try_acquire("down", row.smaller.cost, smaller) == shadowed);
  CHECK(limiter.try_acquire_async("down", row.smaller.cost, smaller).get() == shadowed);
  CHECK(listener->count("plans", ratelimit::Outcome::shadow_limited) == 2);
  CHECK(listener->total() == 2);  // peeks are not heard
  CHECK(limiter.peek("down", smaller) == row.smaller.peek);
}

TEMPLATE_LIST_TEST_CASE(
    "A decision whose parameters are out of range throws naming the field and changes nothing",
    "[conformance][any_storage][params][per_call]", Cases) {
  using Algo = typename TestType::Algo;
  using Model = typename Algo::Model;
  INFO(TestType::label());
  ManualClock clock;
  auto limiter = TestType::make(clock);
  auto plan = limiter.params();
  if constexpr (requires { Model::check_params(plan); }) {
    // The row's limit spent but one: a peek then reports 1 remaining.
    REQUIRE(limiter.try_acquire("k", TestType::limit - 1, plan).allowed);
    const Decision before = limiter.peek("k", plan);
    CHECK(before.remaining == 1);
    auto bad = plan;
    bad.limit = 0;  // a limit is in [1, 10^9]
    CHECK_THROWS_WITH(limiter.try_acquire("k", 1, bad), Catch::Contains("params.limit = 0"));
    CHECK_THROWS_WITH(limiter.peek("k", bad), Catch::Contains("params.limit = 0"));
    bool called = false;
    CHECK_THROWS_WITH(limiter.try_acquire_async("k", 1, bad, [&](Decision) { called = true; }),
                      Catch::Contains("params.limit = 0"));
    CHECK_FALSE(called);
    if constexpr (ratelimit::Adjustable<Model>) {
      CHECK_THROWS_WITH(limiter.penalty("k", 1, bad), Catch::Contains("params.limit = 0"));
      CHECK_THROWS_WITH(limiter.refund("k", 1, 0ms, bad), Catch::Contains("params.limit = 0"));
    }
    CHECK_THROWS_AS(limiter.try_acquire("k", 0, plan), std::invalid_argument);  // cost < 1
    CHECK(limiter.peek("k", plan) == before);
  }
}

// The rows of "A refund gives back at most what its take removed ..." (table.hpp's `adjust`,
// derived there for the row's shape), on a limiter of other parameters whose every call carries
// the row's: by definition they decide as the row's limiter does.
TEMPLATE_LIST_TEST_CASE("Refunds and penalties carry their key's parameters",
                        "[conformance][any_storage][params][per_call][refund][penalty]", Cases) {
  using Algo = typename TestType::Algo;
  if constexpr (ratelimit::Adjustable<typename Algo::Model>) {
    constexpr auto row = TestType::Row::adjust;
    INFO(TestType::label());
    ManualClock clock;
    const auto other = rltest::conformance::Change<Algo>::row.smaller.shape;
    auto limiter = Algo::make(other, TestType::Backend::make(), clock, "plans");
    const auto plan = params_of<Algo>(TestType::Row::shape);
    const auto limit = TestType::limit;
    auto listener = std::make_shared<rltest::CountingListener>();
    limiter.attach_listener(listener);
    clock.set(row.at);
    CHECK(limiter.try_acquire("k", row.cost, plan) == row.taken);
    REQUIRE(limiter.try_acquire("j", row.late_cost, plan).allowed);
    clock.set(row.refund_at);
    CHECK(limiter.refund("k", row.refund_cost, row.at, plan) == row.refunded);
    CHECK(limiter.peek("k", plan) == row.refunded);
    clock.set(row.late_at);
    CHECK(limiter.refund("j", row.late_cost, row.at, plan) == row.late);

    clock.set(row.at);
    CHECK(limiter.penalty("p", row.penalty_cost, plan) == row.penalized);
    CHECK(limiter.peek("p", plan) == row.penalized);
    CHECK(limiter.penalty("c", 100 * limit, plan) == row.capped);
    CHECK(listener->count("plans", ratelimit::Outcome::refunded) == 2);
    CHECK(listener->count("plans", ratelimit::Outcome::penalized) == 2);
    REQUIRE(row.penalized.retry_after > 0ms);
    clock.set(row.at + row.penalized.retry_after);
    CHECK(limiter.try_acquire("p", 1, plan) == row.pass);
  }
}

// docs/algorithms.md's example, "Per-key parameters at run time": one limiter, each user's plan
// read with the user, on every storage.
TEMPLATE_LIST_TEST_CASE("One token bucket serves every plan, each request carrying its user's",
                        "[conformance][any_storage][params][per_call][token_bucket]", Backends) {
  using Api = ratelimit::TokenBucket<ManualClock, typename TestType::Storage>;
  INFO(TestType::name);
  ManualClock clock;
  Api api({100, ratelimit::per_minute(100)}, TestType::make(), clock, "api");
  const std::map<std::string, typename Api::Params> plans{
      {"free", Api::params_of(ratelimit::TokenBucketConfig{100, ratelimit::per_minute(100)})},
      {"pro", Api::params_of(ratelimit::TokenBucketConfig{5000, ratelimit::per_minute(5000)})}};
  // free: B = 100, a token per 60 s / 100 = 600 ms; pro: B = 5000, a token per 12 ms.
  // alice (free) spends her 100 at 0: the backlog is 100 x 600 ms = 60 s.
  CHECK(api.try_acquire("alice", 1, plans.at("free")) == admitted(100, 99, 600ms));
  CHECK(api.try_acquire("alice", 99, plans.at("free")) == admitted(100, 0, 60s));
  CHECK(api.try_acquire("alice", 1, plans.at("free")) == denied(100, 0, 600ms, 60s));
  // bob (pro) at 0: one token of 5000 gone, back in 12 ms.
  CHECK(api.try_acquire("bob", 1, plans.at("pro")) == admitted(5000, 4999, 12ms));
  // alice upgrades at 1 s: her bucket keeps its full instant, 60 s; the backlog 59 s is worth
  // 59 s / 12 ms = 4916.67 pro tokens, rounded up: 5000 - 4917 = 83 left, full in 59 s.
  clock.set(1s);
  CHECK(api.peek("alice", plans.at("pro")) == admitted(5000, 83, 59s));
  // A call without parameters decides with the limiter's own, free's: the backlog 59 s plus a
  // token's 600 ms is 59.6 s <= 60 s, admitted, leaving 100 - ceil(59.6 / 0.6) = 0 tokens.
  CHECK(api.try_acquire("alice") == admitted(100, 0, 59600ms));
}
