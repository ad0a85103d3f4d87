// The sliding log's own semantics (README, "The algorithms"): what only the sliding log shows,
// entries leaving the window one by one and acquire waiting for them, run against every storage
// backend. The rules every algorithm shares (fresh key, denial, peek, cost limits, reset,
// stepped-back clock) are in tests/conformance, with this log's expected values in its row of
// table.hpp.
//
// Unless a test says otherwise: N = 3 requests in any window (t - W, t] with W = 1 s. Times are
// whole milliseconds.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <stdexcept>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

#include "../support/backends.hpp"
#include "../support/expect.hpp"

using namespace std::chrono_literals;
using ratelimit::ManualClock;
using ratelimit::Rate;
using rltest::admitted;
using rltest::denied;

namespace {

template <class Backend>
auto make_log(Rate rate, ManualClock clock) {
  return ratelimit::SlidingLog<ManualClock, typename Backend::Storage>(rate, Backend::make(),
                                                                       clock);
}

constexpr Rate log_three_per_second{3, std::chrono::seconds{1}};

}  // namespace

TEMPLATE_LIST_TEST_CASE(
    "A sliding log admits N in any window and waits for the oldest entry to "
    "leave",
    "[sliding_log][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto sl = make_log<TestType>(log_three_per_second, clock);
  // Each admission is the newest entry: reset newest + W - t = 1 s.
  CHECK(sl.try_acquire("k") == admitted(3, 2, 1s));  // log {0}
  clock.set(200ms);
  CHECK(sl.try_acquire("k") == admitted(3, 1, 1s));  // log {0, 200}
  clock.set(400ms);
  CHECK(sl.try_acquire("k") == admitted(3, 0, 1s));  // log {0, 200, 400}
  // At 500 ms |log| = 3; cost n waits for the (3 + n - 3) = n-th oldest: e + 1000 - 500.
  // reset = 400 + 1000 - 500 = 900 ms.
  clock.set(500ms);
  CHECK(sl.try_acquire("k") == denied(3, 0, 500ms, 900ms));     // e = 0
  CHECK(sl.try_acquire("k", 2) == denied(3, 0, 700ms, 900ms));  // e = 200
  CHECK(sl.try_acquire("k", 3) == denied(3, 0, 900ms, 900ms));  // e = 400
  // At 999 ms the entry at 0 still counts (999 - 1000 < 0): 1 ms to go; reset 401 ms.
  clock.set(999ms);
  CHECK(sl.try_acquire("k") == denied(3, 0, 1ms, 401ms));
  // At 1000 ms an entry stamped exactly t - W = 0 no longer counts: log {200, 400} + 1000.
  clock.set(1000ms);
  CHECK(sl.try_acquire("k") == admitted(3, 0, 1s));
  // At 1100 ms the oldest, 200, leaves in 200 + 1000 - 1100 = 100 ms; reset 1000 + 1000 - 1100.
  clock.set(1100ms);
  CHECK(sl.peek("k") == denied(3, 0, 100ms, 900ms));
  // At 2000 ms every entry is at or before t - W: the key is fresh again.
  clock.set(2000ms);
  CHECK(sl.peek("k") == admitted(3, 3, 0ms));
}

TEMPLATE_LIST_TEST_CASE(
    "A sliding log counts each unit of a costly request as an entry at its "
    "time",
    "[sliding_log][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto sl = make_log<TestType>(log_three_per_second, clock);
  CHECK(sl.try_acquire("k", 2) == admitted(3, 1, 1s));  // log {0, 0}
  clock.set(300ms);
  CHECK(sl.try_acquire("k") == admitted(3, 0, 1s));  // log {0, 0, 300}
  clock.set(500ms);
  // reset 300 + 1000 - 500 = 800 ms. The 1st and 2nd oldest are both stamped 0: 500 ms;
  // the 3rd is 300: 800 ms.
  CHECK(sl.try_acquire("k") == denied(3, 0, 500ms, 800ms));
  CHECK(sl.try_acquire("k", 2) == denied(3, 0, 500ms, 800ms));
  CHECK(sl.try_acquire("k", 3) == denied(3, 0, 800ms, 800ms));
  // At 1000 ms both entries at 0 leave together: cost 2 fits, log {300, 1000, 1000}.
  clock.set(1000ms);
  CHECK(sl.try_acquire("k", 2) == admitted(3, 0, 1s));
}

TEMPLATE_LIST_TEST_CASE("Sliding log acquire waits for entries to leave, within max_wait",
                        "[sliding_log][any_storage][acquire]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto sl = make_log<TestType>(log_three_per_second, clock);
  CHECK(sl.acquire("k", 1, 0ms) == admitted(3, 2, 1s));  // log {0}
  clock.set(200ms);
  CHECK(sl.acquire("k", 1, 0ms) == admitted(3, 1, 1s));  // log {0, 200}
  clock.set(400ms);
  CHECK(sl.acquire("k", 1, 0ms) == admitted(3, 0, 1s));  // log {0, 200, 400}
  clock.set(500ms);
  // The entry at 0 leaves at 1000 ms: 500 ms away.
  CHECK(sl.acquire("k", 1, 499ms) == denied(3, 0, 500ms, 900ms));
  CHECK(clock.now() == 500ms);
  CHECK(sl.acquire("k", 1, 500ms) == admitted(3, 0, 1s));  // at 1000: log {200, 400, 1000}
  CHECK(clock.now() == 1000ms);
  // Cost 2 needs the 2nd oldest (400) gone: 400 + 1000 - 1000 = 400 ms; then log
  // {1000, 1400, 1400}.
  CHECK(sl.acquire("k", 2, 400ms) == admitted(3, 0, 1s));
  CHECK(clock.now() == 1400ms);
  CHECK_THROWS_AS(sl.acquire("k", 0, 1s), std::invalid_argument);
  CHECK_THROWS_AS(sl.acquire("k", 1, -1ms), std::invalid_argument);
  CHECK_THROWS_AS(sl.try_acquire("k", 0), std::invalid_argument);
  CHECK(clock.now() == 1400ms);
}

namespace {
/// Counts the outcomes it hears.
struct OutcomeCounter : ratelimit::Listener {
  std::atomic<int> counts[ratelimit::outcome_count] = {};
  void on_decision(const ratelimit::DecisionEvent& e) override {
    ++counts[static_cast<std::size_t>(e.outcome)];
  }
  int operator[](ratelimit::Outcome o) const { return counts[static_cast<std::size_t>(o)]; }
};
}  // namespace

TEMPLATE_LIST_TEST_CASE(
    "A login lockout: 5 failures in 15 min lock the account for 1 h, a success refunds its "
    "attempt",
    "[sliding_log][lockout][refund][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  using namespace std::chrono_literals;
  ManualClock clock;
  ratelimit::Lockout login(make_log<TestType>(Rate{5, 15min}, clock), 1h);
  auto listener = std::make_shared<OutcomeCounter>();
  login.limiter().attach_listener(listener);
  const auto attempt = [&](std::chrono::nanoseconds at, bool success) {
    clock.set(at);
    const auto d = login.try_acquire("alice");
    if (d.allowed && success) (void)login.refund("alice", 1, at);
    return d;
  };
  // Failures at 0, 1, 2 and 3 min: N - |log| left; the newest entry leaves 15 min after it.
  for (int i = 0; i < 4; ++i) {
    INFO("failure " << i + 1);
    CHECK(attempt(i * 1min, false) == admitted(5, 4 - i, 15min));
  }
  // A success at 4 min is admitted (|log| = 5) and refunded: the entry at 4 min keeps no unit
  // (it stays the key's latest time), so one attempt is left, reset 4 + 15 - 4 = 15 min.
  CHECK(attempt(4min, true) == admitted(5, 0, 15min));
  CHECK(login.peek("alice") == admitted(5, 1, 15min));
  // The 5th failure at 5 min: |log| = 5.
  CHECK(attempt(5min, false) == admitted(5, 0, 15min));
  // The 6th attempt at 6 min is denied by the limit (the entry at 0 leaves at 15 min) and
  // locks the account from 6 min for 1 h: retry_after and reset_after are the hour.
  CHECK(attempt(6min, true) == denied(5, 0, 1h, 1h));
  CHECK(login.locked_for("alice") == 1h);
  // At 30 min the log is empty (the last entry left at 20 min) but the lock holds until
  // 66 min: 36 min left; nothing is spent.
  CHECK(attempt(30min, true) == denied(5, 0, 36min, 36min));
  CHECK(attempt(65min, false) == denied(5, 0, 1min, 1min));
  // At 66 min the lock has ended: a fresh log, one entry.
  clock.set(66min);
  CHECK(login.locked_for("alice") == 0ms);
  CHECK(attempt(66min, false) == admitted(5, 4, 15min));
  // Listeners: 7 admitted takes (4 failures, the success, the 5th failure, the one at 66 min),
  // the locking denial, two lockout denials and a refund.
  CHECK((*listener)[ratelimit::Outcome::allowed] == 7);
  CHECK((*listener)[ratelimit::Outcome::limited] == 1);
  CHECK((*listener)[ratelimit::Outcome::locked_out] == 2);
  CHECK((*listener)[ratelimit::Outcome::refunded] == 1);
  // Another account is not locked.
  CHECK(login.try_acquire("bob") == admitted(5, 4, 15min));
}

TEMPLATE_LIST_TEST_CASE("In shadow mode a lockout admits what it would deny, and says so",
                        "[sliding_log][lockout][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  using namespace std::chrono_literals;
  ManualClock clock;
  ratelimit::Lockout login(make_log<TestType>(Rate{2, 1min}, clock), 10min);
  login.limiter().set_shadow_mode(true);
  auto listener = std::make_shared<OutcomeCounter>();
  login.limiter().attach_listener(listener);
  CHECK(login.try_acquire("k") == admitted(2, 1, 1min));
  CHECK(login.try_acquire("k") == admitted(2, 0, 1min));
  // The limit denies (shadow: admitted, shadow_denied) and the lock is taken as enforced.
  auto d = login.try_acquire("k");
  CHECK((d.allowed && d.shadow_denied && d.retry_after == 10min));
  clock.set(2min);  // the log is empty, the lock holds until 10 min: 8 min left
  d = login.try_acquire("k");
  CHECK((d.allowed && d.shadow_denied && d.retry_after == 8min && d.remaining == 0));
  CHECK((*listener)[ratelimit::Outcome::shadow_limited] == 1);
  CHECK((*listener)[ratelimit::Outcome::locked_out] == 1);
}
