// Load shedding by priority (core/priority.hpp), on every storage of the suite.
// Reserves used unless a test says otherwise: normal 0.1, sheddable 0.4 of a limit of 10 units,
// so R(normal) = ceil(10 x 100000 / 10^6) = 1 and R(sheddable) = ceil(10 x 400000 / 10^6) = 4:
// a normal request is admitted only if 1 unit is left after it, a sheddable one only if 4 are.
// Times are whole milliseconds (ManualClock).
#include <array>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

#include "../support/algorithms.hpp"
#include "../support/backends.hpp"
#include "../support/expect.hpp"

using namespace std::chrono_literals;

namespace priority_test {

using ratelimit::Decision;
using ratelimit::ManualClock;
using ratelimit::Priority;
using ratelimit::Reserves;

constexpr Reserves stripe_like{0.1, 0.4};
constexpr std::array<Priority, 3> lowest_first{Priority::sheddable, Priority::normal,
                                               Priority::critical};

/// Admitted requests per priority (index = Priority).
using Counts = std::array<int, 3>;

/// `rounds` rounds of one sheddable, one normal and one critical request (lowest first, the
/// order that is worst for the critical ones), each at `clock`'s time, cost 1.
template <class L>
void replay_round(L& limiter, Counts& admitted) {
  for (const Priority p : lowest_first)
    if (limiter.try_acquire("trace", 1, p)) ++admitted[static_cast<std::size_t>(p)];
}

}  // namespace priority_test

TEMPLATE_LIST_TEST_CASE(
    "A burst of mixed priorities is admitted per priority as the reserves say, every algorithm",
    "[priority][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  using namespace priority_test;
  rltest::for_each_algorithm([]<class Algo>() {
    // The library's algorithms (the test-only sixth does not take a state spent under a larger
    // limit: see Reserves).
    if constexpr (ratelimit::Algorithms::contains<typename Algo::Model>) {
      INFO("algorithm: " << Algo::name);
      ManualClock clock;
      // 10 units (capacity, queue or window count); nothing refills within the burst (one instant).
      auto limiter =
          Algo::make(rltest::Shape{10, ratelimit::per_second(10)}, TestType::make(), clock);
      limiter.set_reserves(stripe_like);
      Counts admitted{};
      for (int round = 0; round < 5; ++round) replay_round(limiter, admitted);
      // Used u before each request, lowest first; sheddable needs u + 1 <= 10 - 4 = 6, normal
      // u + 1 <= 9, critical u + 1 <= 10:
      //   round 1: S (u 0 -> 1), N (-> 2), C (-> 3);  round 2: S (-> 4), N (-> 5), C (-> 6);
      //   round 3: S denied (7 > 6), N (-> 7), C (-> 8);  round 4: S denied, N (-> 9), C (-> 10);
      //   round 5: S denied, N denied (11 > 9), C denied (11 > 10).
      CHECK(admitted == Counts{4, 4, 2});  // index = Priority: critical, normal, sheddable
      // Each priority sees its own limit: 10, 10 - 1 = 9, 10 - 4 = 6, nothing left to any.
      CHECK(limiter.peek("trace", Priority::critical).limit == 10);
      CHECK(limiter.peek("trace", Priority::normal).limit == 9);
      CHECK(limiter.peek("trace", Priority::sheddable).limit == 6);
      CHECK(limiter.peek("trace", Priority::sheddable).remaining == 0);
    }
  });
}

TEMPLATE_LIST_TEST_CASE(
    "Under a replayed overload a token bucket keeps the critical rate and sheds the lowest "
    "first, with retry_after per priority",
    "[priority][token_bucket][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  using namespace priority_test;
  ManualClock clock;
  // B = 10 tokens, r = 10/s: one token per 100 ms. Each 100 ms tick brings one request of each
  // priority: 3 tokens asked per token refilled.
  ratelimit::TokenBucket<ManualClock, typename TestType::Storage> tb(
      {10, ratelimit::per_second(10)}, TestType::make(), clock);
  tb.set_reserves(stripe_like);
  Counts admitted{};
  for (int tick = 0; tick < 20; ++tick) {
    clock.set(std::chrono::milliseconds(100 * tick));
    replay_round(tb, admitted);
  }
  // Tokens T at each tick (after its refill), lowest first; sheddable needs T - 1 >= 4, normal
  // T - 1 >= 1, critical T - 1 >= 0:
  //   tick 0: T 10: S (-> 9), N (-> 8), C (-> 7)    tick 1: T 8: S (-> 7), N (-> 6), C (-> 5)
  //   tick 2: T 6: S (-> 5), N (-> 4), C (-> 3)     tick 3: T 4: S denied, N (-> 3), C (-> 2)
  //   tick 4: T 3: S denied, N (-> 2), C (-> 1)     tick 5: T 2: S denied, N (-> 1), C (-> 0)
  //   tick 6 on: T 1: S denied, N denied (0 < 1), C (-> 0).
  // Over 20 ticks: critical 20 of 20 (its whole rate), normal 6, sheddable 3.
  CHECK(admitted == Counts{20, 6, 3});
  // At tick 19 after its critical request T = 0: a cost-1 request fits again once T >= 1 + R,
  // after (1 + R) x 100 ms: critical 100 ms, normal 200 ms, sheddable 500 ms.
  CHECK(tb.peek("trace", Priority::critical).retry_after == 100ms);
  CHECK(tb.peek("trace", Priority::normal).retry_after == 200ms);
  CHECK(tb.peek("trace", Priority::sheddable).retry_after == 500ms);
  // A cost over what a priority may ever use can never succeed for it (10 - 4 = 6 < 7), but
  // can for a higher one.
  CHECK(tb.try_acquire("other", 7, Priority::sheddable).retry_after == Decision::never);
  CHECK(tb.try_acquire("other", 7, Priority::normal).allowed);
}

TEMPLATE_LIST_TEST_CASE("Without reserves every priority decides as a call without one",
                        "[priority][token_bucket][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  using namespace priority_test;
  ManualClock clock;
  auto storage = TestType::make();
  ratelimit::TokenBucket<ManualClock, typename TestType::Storage> a({3, ratelimit::per_second(1)},
                                                                    storage, clock, "a"),
      b({3, ratelimit::per_second(1)}, storage, clock, "b");
  b.set_reserves({});  // all zero: the default
  for (int i = 0; i < 5; ++i) {
    const Priority p = lowest_first[static_cast<std::size_t>(i) % 3];
    CHECK(b.try_acquire("k", 1, p) == a.try_acquire("k", 1));
  }
}

TEMPLATE_LIST_TEST_CASE("A reserve of the whole limit never admits that priority",
                        "[priority][token_bucket][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  using namespace priority_test;
  ManualClock clock;
  // Capacity 1: R(sheddable) = ceil(1 x 0.1) = 1, the whole bucket.
  ratelimit::TokenBucket<ManualClock, typename TestType::Storage> tb({1, ratelimit::per_second(1)},
                                                                     TestType::make(), clock);
  tb.set_reserves({0.0, 0.1});
  const Decision d = tb.try_acquire("k", 1, Priority::sheddable);
  CHECK_FALSE(d.allowed);
  CHECK(d.retry_after == Decision::never);
  CHECK(tb.try_acquire("k", 1, Priority::normal).allowed);  // R(normal) = 0: the whole bucket
}

TEST_CASE("Reserves outside [0, 1] or not monotone are refused, naming the field and value",
          "[priority]") {
  ratelimit::TokenBucket<ManualClock> tb({10, ratelimit::per_second(1)});
  const auto message = [&](ratelimit::Reserves r) {
    try {
      tb.set_reserves(r);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(message({-0.1, 0.4}).find("reserves.normal = -0.100000") == 0);
  CHECK(message({0.1, 1.5}).find("reserves.sheddable = 1.500000") == 0);
  CHECK(message({0.5, 0.4}).find("reserves.sheddable = 0.400000: must be >= reserves.normal") == 0);
  // The refused reserves left the limiter as it was.
  CHECK(tb.reserves().normal == 0.0);
  CHECK(tb.try_acquire("k", 10, ratelimit::Priority::sheddable).allowed);
}
