// The concurrency limit (algorithms/concurrency.hpp), on every storage of the suite.
// Unless a test says otherwise: N = 2 slots per key, a lease of 1 s. Times are whole ms.
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/algorithms/concurrency.hpp>
#include <ratelimit/ratelimit.hpp>

#include "../support/backends.hpp"
#include "../support/expect.hpp"

using namespace std::chrono_literals;

namespace concurrency_limit_test {

using ratelimit::ConcurrencyConfig;
using ratelimit::Decision;
using ratelimit::ManualClock;
using ratelimit::Priority;

template <class Backend>
auto make_limiter(ConcurrencyConfig config, ManualClock clock) {
  return ratelimit::ConcurrencyLimiter<ManualClock, typename Backend::Storage>(
      config, Backend::make(), clock);
}

constexpr ConcurrencyConfig two_for_a_second{2, 1s};

}  // namespace concurrency_limit_test

TEMPLATE_LIST_TEST_CASE("A concurrency limit holds N slots and frees one when its holder ends",
                        "[concurrency_limit][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  using namespace concurrency_limit_test;
  ManualClock clock;
  auto limiter = make_limiter<TestType>(two_for_a_second, clock);
  auto a = limiter.try_acquire("k");
  // One of 2 held: 1 free; the latest lease ends at 0 + 1 s.
  CHECK(a.decision() == rltest::admitted(2, 1, 1s));
  CHECK(a.lease_end() == 1s);
  clock.set(100ms);
  {
    auto b = limiter.try_acquire("k");
    // Both held; b's lease ends last, at 1.1 s: reset after 1.1 s - 100 ms.
    CHECK(b.decision() == rltest::admitted(2, 0, 1000ms));
    // Full: the third waits for the earliest lease (a's, at 1 s): 1 s - 100 ms = 900 ms.
    // (reset after 1.1 s - 100 ms.)
    auto c = limiter.try_acquire("k");
    CHECK_FALSE(c);
    CHECK(c.decision() == rltest::denied(2, 0, 900ms, 1000ms));
  }  // b goes out of scope: released
  auto d = limiter.try_acquire("k");
  CHECK(d);
  // Released explicitly: one slot back (d still held, a released), and only once.
  const auto after = a.release();
  REQUIRE(after.has_value());
  CHECK(after->remaining == 1);
  CHECK_FALSE(a.release().has_value());
  CHECK_FALSE(a);
  CHECK(limiter.peek("k").remaining == 1);
}

TEMPLATE_LIST_TEST_CASE("A slot never released frees itself when its lease ends",
                        "[concurrency_limit][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  using namespace concurrency_limit_test;
  ManualClock clock;
  auto limiter = make_limiter<TestType>(two_for_a_second, clock);
  // Two holders that never release (a crashed process): their slots are held until 1 s.
  auto crashed1 = limiter.try_acquire("k");
  auto crashed2 = limiter.try_acquire("k");
  CHECK_FALSE(limiter.try_acquire("k"));
  clock.set(999ms);
  CHECK_FALSE(limiter.try_acquire("k"));  // 999 ms < 1 s: still held
  clock.set(1s);
  // A lease ending at e is held at t iff e > t: at 1 s both have ended.
  auto fresh1 = limiter.try_acquire("k");
  auto fresh2 = limiter.try_acquire("k");
  CHECK(fresh1);
  CHECK(fresh2);
  // The late releases of the ended leases give back nothing they no longer hold: still full.
  (void)crashed1.release();
  (void)crashed2.release();
  CHECK_FALSE(limiter.try_acquire("k"));
  CHECK(limiter.peek("k").remaining == 0);
}

TEMPLATE_LIST_TEST_CASE("A concurrency limit keeps its reserves free of the lower priorities",
                        "[concurrency_limit][priority][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  using namespace concurrency_limit_test;
  ManualClock clock;
  // N = 10; R(normal) = ceil(10 x 0.1) = 1, R(sheddable) = ceil(10 x 0.4) = 4.
  auto limiter = make_limiter<TestType>({10, 1s}, clock);
  limiter.set_reserves({0.1, 0.4});
  std::vector<decltype(limiter.try_acquire("k"))> held;
  const auto take_all = [&](Priority p) {
    int n = 0;
    for (auto s = limiter.try_acquire("k", p); s; s = limiter.try_acquire("k", p), ++n)
      held.push_back(std::move(s));
    return n;
  };
  CHECK(take_all(Priority::sheddable) == 6);  // while 4 stay free: 10 - 4
  CHECK(take_all(Priority::normal) == 3);     // up to 10 - 1 = 9 held
  CHECK(take_all(Priority::critical) == 1);   // the last one
  // Each waits for its own number of leases to end: all ended at 1 s, whatever the priority.
  CHECK(limiter.try_acquire("k", Priority::sheddable).decision().retry_after == 1s);
  held.pop_back();  // the critical slot is released: 9 held
  CHECK_FALSE(limiter.try_acquire("k", Priority::sheddable));
  CHECK_FALSE(limiter.try_acquire("k", Priority::normal));  // 9 + 1 > 9
  CHECK(limiter.try_acquire("k", Priority::critical));      // released at once again
}

TEST_CASE("A concurrency limit outside its range is refused, naming the field and value",
          "[concurrency_limit]") {
  using ratelimit::ConcurrencyLimiter;
  CHECK_THROWS_WITH(ConcurrencyLimiter<>({0, 1s}), "limit = 0: must be in [1, 1000000] slots");
  CHECK_THROWS_WITH(ConcurrencyLimiter<>({1, 0s}),
                    "lease (ns) = 0: must be in [1 ms, 366 days] = [1000000, "
                    "31622400000000000] ns");
}
