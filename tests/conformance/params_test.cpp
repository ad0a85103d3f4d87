// Conformance, parameters (docs/algorithms.md, "Semantics shared by all"): a key whose state was
// written under other parameters (a rules reload or a deploy that changed a rate, a limit or a
// window; a limiter of the same name built with another rate) is decided under the new ones: never
// degraded, and never with more than a fresh key would get. Written once over every
// Case<Algo, Backend> (conformance.hpp) with the rows of change_table.hpp, plus the two algorithms
// outside that list (the concurrency limit here; the calendar quota in params_calendar_test.cpp),
// and the fault that was reproduced in production, by name.
#include <chrono>
#include <cstdint>
#include <string>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

#include "change_table.hpp"
#include "conformance.hpp"
#include "support/backends.hpp"

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
