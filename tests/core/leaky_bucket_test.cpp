// The leaky bucket's own semantics (a shaping queue in the fluid model; README, "The
// algorithms"): what only the
// leaky bucket shows, the delay behind queued work and acquire waiting it out, run against every
// storage backend. The rules every algorithm shares (fresh key, a burst unit by unit, denial,
// peek, cost limits, reset, stepped-back clock) are in tests/conformance, with this queue's
// expected values in its row of table.hpp.
// Unless a test says otherwise: queue size Q = 10, leak r = 2 units/s, so a unit leaks in
// 500 ms and a full queue drains in 5 s. Times are whole milliseconds.
#include <chrono>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

#include "../support/backends.hpp"
#include "../support/expect.hpp"

using namespace std::chrono_literals;
using ratelimit::LeakyBucketConfig;
using ratelimit::ManualClock;
using rltest::admitted;
using rltest::denied;

namespace {

template <class Backend>
auto make_queue(LeakyBucketConfig config, ManualClock clock) {
  return ratelimit::LeakyBucket<ManualClock, typename Backend::Storage>(config, Backend::make(),
                                                                        clock);
}

constexpr LeakyBucketConfig queue_of_ten_at_two_per_second{10, ratelimit::per_second(2)};

}  // namespace

TEMPLATE_LIST_TEST_CASE("An admitted leaky bucket request waits behind the queued work",
                        "[leaky_bucket][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto lb = make_queue<TestType>(queue_of_ten_at_two_per_second, clock);
  // Cost 3 on an empty queue: delay 0, L = 3, remaining 7, reset 3 / 2 = 1.5 s.
  CHECK(lb.try_acquire("k", 3) == admitted(10, 7, 1500ms, 0ms));
  // Cost 2: delay 3 / 2 = 1.5 s, L = 5, remaining 5, reset 2.5 s.
  CHECK(lb.try_acquire("k", 2) == admitted(10, 5, 2500ms, 1500ms));
  // At 750 ms L = 5 - 2 * 0.75 = 3.5: delay 1.75 s, then L = 4.5: remaining floor(5.5) = 5,
  // reset 4.5 / 2 = 2.25 s.
  clock.set(750ms);
  CHECK(lb.try_acquire("k") == admitted(10, 5, 2250ms, 1750ms));
  // At 10 s the queue is long empty (L never drops below 0): delay 0, L = 4, reset 2 s.
  clock.set(10s);
  CHECK(lb.try_acquire("k", 4) == admitted(10, 6, 2s, 0ms));
}

TEMPLATE_LIST_TEST_CASE("Leaky bucket acquire waits out the delay, within max_wait",
                        "[leaky_bucket][any_storage][acquire]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto lb = make_queue<TestType>(queue_of_ten_at_two_per_second, clock);
  // Empty queue: no delay, no wait.
  CHECK(lb.acquire("k", 1, 0ms) == admitted(10, 9, 500ms, 0ms));
  CHECK(clock.now() == 0ms);
  // L = 1: the unit fits but would be served 500 ms from now > max_wait 0: denied at once.
  // Asked again with max_wait 0 it passes once L = 0, 500 ms from now; with max_wait 200 ms once
  // L = 0.4, 300 ms from now.
  CHECK(lb.acquire("k", 1, 0ms) == denied(10, 9, 500ms, 500ms));
  CHECK(lb.acquire("k", 1, 200ms) == denied(10, 9, 300ms, 500ms));
  CHECK(clock.now() == 0ms);
  CHECK(lb.peek("k") == admitted(10, 9, 500ms, 500ms));
  // max_wait 500 ms covers the delay: admitted at 0 with delay 500 ms (L = 2: remaining 8,
  // reset 1 s), and acquire returns after waiting it out.
  CHECK(lb.acquire("k", 1, 500ms) == admitted(10, 8, 1s, 500ms));
  CHECK(clock.now() == 500ms);
}

TEMPLATE_LIST_TEST_CASE(
    "Leaky bucket acquire counts both the wait for room and the delay against "
    "max_wait",
    "[leaky_bucket][any_storage][acquire]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto lb = make_queue<TestType>(queue_of_ten_at_two_per_second, clock);
  CHECK(lb.try_acquire("k", 10) == admitted(10, 0, 5s, 0ms));
  CHECK(lb.try_acquire("j", 10) == admitted(10, 0, 5s, 0ms));
  // L = 10: a unit fits after 500 ms and is then served behind L = 9, 4.5 s later: 5 s in all.
  // 4.999 s is too little: denied at once, the plain denial.
  CHECK(lb.acquire("j", 1, 4999ms) == denied(10, 0, 500ms, 5s));
  CHECK(clock.now() == 0ms);
  // 5 s is enough: the admitting decision is taken at 500 ms (delay 4.5 s, L = 10 again).
  CHECK(lb.acquire("k", 1, 5s) == admitted(10, 0, 5s, 4500ms));
  CHECK(clock.now() == 5s);
  // Now at 5 s: "k" has L = 10 - 2 * 4.5 = 1, "j" is empty. Cost 3 on a full queue at 5 s:
  CHECK(lb.try_acquire("j", 10) == admitted(10, 0, 5s, 0ms));
  // room after (10 + 3 - 10) / 2 = 1.5 s, then served behind L = 7 after 3.5 s: 5 s in all.
  CHECK(lb.acquire("j", 3, 5s) == admitted(10, 0, 5s, 3500ms));
  CHECK(clock.now() == 10s);
}
