// Leased quotas (redis/lease/storage.hpp, docs/far.md) on the shared test Redis: a hot key
// costs one round trip per L units, a window never over-admits across instances, and unused
// units come back at a lease's end. Time is the ManualClock's (decisions take `now`).

#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis/lease/storage.hpp>

#include "support/child.hpp"
#include "support/delay_proxy.hpp"
#include "support/redis_backend.hpp"

namespace {

using namespace std::chrono_literals;
using ratelimit::FixedWindowModel;
using ratelimit::LeasedStorage;

ratelimit::LeaseOptions lease_options(const std::string& prefix) {
  ratelimit::LeaseOptions o;
  o.redis = rltest::test_redis_options("lease");
  o.redis.key_prefix = prefix;
  o.lease_duration = 100ms;
  return o;
}

ratelimit::detail::WindowParams per_second(std::int64_t n) {
  return {n, std::chrono::nanoseconds{1s}.count()};
}

const ratelimit::Operation one{1};

/// Runs `take_lease` (returning true once its lease is taken) in a child process, then kills
/// the child with SIGKILL: no destructor, no flush, its lease is never given back.
template <class F>
void die_holding_a_lease(F take_lease) {
  auto child = rltest::spawn([&]() -> std::int64_t { return take_lease() ? 1 : 0; },
                             rltest::Child::After::stay);  // holding the lease until killed
  const std::int64_t ok = rltest::read_result(child);
  ::kill(child.pid, SIGKILL);
  const int status = rltest::wait_for(child);
  REQUIRE(ok == 1);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
}

}  // namespace

TEMPLATE_TEST_CASE("A leased hot key costs one round trip per L units", "[far][lease][redis]",
                   FixedWindowModel, ratelimit::SlidingCounterModel) {
  LeasedStorage s(lease_options(rltest::unique_prefix("lease")));
  auto b = s.template bind<TestType>("api", per_second(100), 10);
  for (int i = 0; i < 25; ++i) REQUIRE(b.apply("k", 1ms, one).allowed);
  // Decisions 1, 11 and 21 find no units left and lease 10 each (3 round trips); the other 22
  // spend locally.
  const auto st = s.stats();
  CHECK(st.round_trips == 3);
  CHECK(st.local == 22);
  CHECK(st.units_leased == 30);
}

TEMPLATE_TEST_CASE("Leased windows never over-admit across instances, and unused units come back",
                   "[far][lease][redis]", FixedWindowModel, ratelimit::SlidingCounterModel) {
  const auto prefix = rltest::unique_prefix("lease");
  LeasedStorage a_store(lease_options(prefix)), b_store(lease_options(prefix));
  auto a = a_store.template bind<TestType>("api", per_second(50), 8);
  auto b = b_store.template bind<TestType>("api", per_second(50), 8);
  REQUIRE(a.apply("k", 1ms, one).allowed);  // a leases 8, spends 1: 7 held
  // b gets what is not leased: 50 - 8 = 42 (leases of 8, 8, 8, 8, 8, then the 2 left).
  std::int64_t b_admitted = 0;
  for (int i = 0; i < 60; ++i) b_admitted += b.apply("k", 2ms, one).allowed ? 1 : 0;
  CHECK(b_admitted == 42);
  // a's lease ends at 1 ms + H = 101 ms: its flush gives its 7 back, which b then spends.
  CHECK(a.flush(50ms) == 0);
  CHECK(a.flush(101ms) == 7);
  for (int i = 0; i < 10; ++i) b_admitted += b.apply("k", 102ms, one).allowed ? 1 : 0;
  // 1 (a) + 42 + 7 (b) = 50 = N: every unit spent once, none twice.
  CHECK(b_admitted == 49);
  // Window 1 starts afresh for the fixed window; for the sliding counter the 50 of window 0
  // still weigh 50 x 999 / 1000 > 49 at 1001 ms. Window 2 is fresh for both (window 1 counted
  // nothing).
  CHECK(a.apply("k", 1001ms, one).allowed == std::is_same_v<TestType, FixedWindowModel>);
  CHECK(a.apply("k", 2001ms, one).allowed);
}

TEMPLATE_TEST_CASE(
    "Random traffic over three leasing instances never admits more than N per "
    "window",
    "[far][lease][redis]", FixedWindowModel, ratelimit::SlidingCounterModel) {
  const auto prefix = rltest::unique_prefix("lease");
  std::vector<LeasedStorage> stores;
  std::vector<ratelimit::LeasedBinding<TestType>> b;
  for (int i = 0; i < 3; ++i) stores.emplace_back(lease_options(prefix));
  for (auto& s : stores) b.push_back(s.template bind<TestType>("api", per_second(40), 7));
  std::mt19937 rng(11);
  std::map<std::int64_t, std::int64_t> per_window;
  std::int64_t t_ms = 0;
  for (int i = 0; i < 2000; ++i) {
    t_ms += static_cast<std::int64_t>(rng() % 4);
    const auto now = std::chrono::nanoseconds{t_ms * 1'000'000};
    if (rng() % 50 == 0) (void)b[rng() % 3].flush(now);
    const auto cost = static_cast<std::int64_t>(1 + rng() % 3);
    if (b[rng() % 3].apply("k", now, ratelimit::Operation{cost}).allowed) {
      const std::int64_t k = t_ms / 1000, e = t_ms - k * 1000;
      const std::int64_t c = per_window[k] += cost;
      const std::int64_t p = per_window.count(k - 1) ? per_window[k - 1] : 0;
      if constexpr (std::is_same_v<TestType, FixedWindowModel>) {
        REQUIRE(c <= 40);
      } else {
        // The estimate on the units really spent: c + p (W - e) / W <= N, in ms units.
        REQUIRE(c * 1000 + p * (1000 - e) <= 40 * 1000);
      }
    }
  }
  CHECK(per_window.size() >= 2);
}

TEST_CASE("A sliding counter's lease grants only what the previous window leaves",
          "[far][lease][redis]") {
  LeasedStorage s(lease_options(rltest::unique_prefix("lease")));
  auto b = s.bind<ratelimit::SlidingCounterModel>("api", per_second(10), 8);
  std::int64_t first = 0;
  for (int i = 0; i < 12; ++i) first += b.apply("k", 1ms, one).allowed ? 1 : 0;
  REQUIRE(first == 10);  // leases of 8 and then the 2 left
  // At 1500 ms (e = 500 ms) the 10 of window 0 weigh 10 x 500 / 1000 = 5: the lease of 8
  // gets 10 - 5 = 5, which are admitted; the sixth is denied.
  std::int64_t second = 0;
  for (int i = 0; i < 8; ++i) second += b.apply("k", 1500ms, one).allowed ? 1 : 0;
  CHECK(second == 5);
  // The estimate on the units spent: 5 + 10 x 500 / 1000 = 10 = N, never above.
}

TEST_CASE("A leased decision reads a time past the clock's range as its end, 2^62 ns",
          "[far][lease][redis]") {
  // Fault pinned: apply computed the window's end (k + 1) W - t with `now` up to INT64_MAX,
  // a signed overflow; every other storage clamps `now` to the clock's range [0, 2^62 ns].
  LeasedStorage s(lease_options(rltest::unique_prefix("lease")));
  constexpr std::int64_t W = std::chrono::nanoseconds{1min}.count();
  auto b = s.bind<FixedWindowModel>("api", {100, W}, 10);
  const auto d = b.apply("k", std::chrono::nanoseconds::max(), one);
  REQUIRE(d.allowed);
  // t = 2^62 = 4 611 686 018 427 387 904 ns; 2^62 mod 60e9 = 38 427 387 904, so the window
  // ends 60 000 000 000 - 38 427 387 904 = 21 572 612 096 ns later.
  CHECK(d.reset_after == std::chrono::nanoseconds{21'572'612'096});
  // The same window as a decision at 2^62 itself: its lease (10, 9 left) is spent locally.
  const auto again = b.apply("k", ratelimit::max_clock_time, one);
  CHECK(again.allowed);
  CHECK(again.reset_after == std::chrono::nanoseconds{21'572'612'096});
  CHECK(s.stats().round_trips == 1);
  CHECK(s.stats().local == 1);
}

TEST_CASE("A priority's lower limit never spends a lease taken under the whole limit",
          "[far][lease][redis]") {
  // Fault pinned: set_reserves builds the lower priorities' bindings with with_params, which
  // share the leases; a sheddable request spent units a critical one had leased under 100,
  // past the sheddable limit of 5. The leased limiter must admit what the in-memory one does.
  // 100 a minute, sheddable reserve 0.95: sheddable requests see 100 - 95 = 5. One critical
  // request (count 1; the leased one takes L = 100 / 10 = 10 and keeps 9), then 50 sheddable:
  // counts 2..5 are admitted, 5 - 1 = 4, and the rest denied.
  LeasedStorage s(lease_options(rltest::unique_prefix("lease")));
  ratelimit::ManualClock clock;
  const ratelimit::Rate rate{100, 1min};
  ratelimit::FixedWindow<ratelimit::ManualClock, LeasedStorage> leased(rate, s, clock, "api");
  ratelimit::FixedWindow<ratelimit::ManualClock> memory(rate, {}, clock, "api");
  const auto run = [](auto& limiter) {
    limiter.set_reserves({0.5, 0.95});
    REQUIRE(limiter.try_acquire("k", 1, ratelimit::Priority::critical).allowed);
    int admitted = 0;
    for (int i = 0; i < 50; ++i)
      admitted += limiter.try_acquire("k", 1, ratelimit::Priority::sheddable).allowed ? 1 : 0;
    return admitted;
  };
  CHECK(run(memory) == 4);
  CHECK(run(leased) == 4);
}

TEMPLATE_TEST_CASE("A flood's denials on a leased key are answered in process for up to H",
                   "[far][lease][redis][flood]", FixedWindowModel, ratelimit::SlidingCounterModel) {
  // Fault pinned: every denial was a lease round trip (15 to 16 decisions per round trip under
  // a flood on a Redis 40 ms away). N = 100 per second, L = 10, H = 100 ms: the first 100
  // requests at 1 ms take 10 leases (10 round trips); the 101st asks Redis, is denied, and
  // the denial is remembered for min(its retry_after, H) = 100 ms (another instance's lease
  // would come back within H); requests 102 to 10 000 at 1 ms are denied here, each with the
  // same retry_after as Redis's denial. 10 000 / 11 round trips = 909 per round trip.
  LeasedStorage s(lease_options(rltest::unique_prefix("lease")));
  auto b = s.template bind<TestType>("api", per_second(100), 10);
  std::int64_t admitted = 0;
  std::chrono::nanoseconds first_retry{0};
  for (int i = 0; i < 10'000; ++i) {
    const auto d = b.apply("k", 1ms, one);
    admitted += d.allowed ? 1 : 0;
    if (i == 100) first_retry = d.retry_after;
    if (i > 100) REQUIRE(d.retry_after == first_retry);
  }
  CHECK(admitted == 100);
  const auto st = s.stats();
  CHECK(st.round_trips == 11);
  CHECK(st.denied_locally == 10'000 - 101);
  WARN("decisions per round trip under a flood: " << 10'000 / st.round_trips);
  CHECK(10'000 / st.round_trips >= 100);
  // H after the denial Redis is asked again (101 ms: still denied, one round trip), and in
  // the next window the instance leases again.
  CHECK_FALSE(b.apply("k", 101ms, one).allowed);
  CHECK(s.stats().round_trips == 12);
  CHECK(b.apply("k", 2s + 1ms, one).allowed);
  CHECK(s.stats().round_trips == 13);
}

TEST_CASE("A window lease whose holder was killed comes back H + G after it was taken",
          "[far][lease][redis][reclaim]") {
  // N = 50 per 10 s, L = 10, H = 100 ms, G = reclaim_grace = 1 s (the default). A child
  // process leases 10 at 1 ms, spends 1 and is killed with SIGKILL holding 9: its record
  // (9 units) expires at 1 ms + H + G = 1101 ms. Another instance meanwhile gets the 40 not
  // leased.
  const auto prefix = rltest::unique_prefix("lease");
  const auto params = ratelimit::detail::WindowParams{50, std::chrono::nanoseconds{10s}.count()};
  die_holding_a_lease([&] {
    LeasedStorage child(lease_options(prefix));
    return child.bind<FixedWindowModel>("api", params, 10).apply("k", 1ms, one).allowed;
  });
  LeasedStorage s(lease_options(prefix));
  REQUIRE(s.stats().units_reclaimed == 0);
  auto b = s.bind<FixedWindowModel>("api", params, 10);
  std::int64_t admitted = 0;
  for (int i = 0; i < 60; ++i) admitted += b.apply("k", 2ms, one).allowed ? 1 : 0;
  REQUIRE(admitted == 40);  // 50 - 10 leased by the child
  // 1100 ms, before the record's expiry (the denial remembered at 2 ms ended at 2 + H = 102
  // ms, so Redis is asked): still denied, nothing reclaimed.
  CHECK_FALSE(b.apply("k", 1100ms, one).allowed);
  CHECK(s.stats().units_reclaimed == 0);
  // 1201 ms: past the expiry and past the denial remembered at 1100 ms (until 1200 ms). The
  // decision reclaims the child's 9 and leases them: 9 of 20 admitted, and 1 (child) + 40 +
  // 9 = 50 = N.
  std::int64_t after = 0;
  for (int i = 0; i < 20; ++i) after += b.apply("k", 1201ms, one).allowed ? 1 : 0;
  CHECK(after == 9);
  CHECK(s.stats().units_reclaimed == 9);
}

TEST_CASE("A live holder whose record was reclaimed confirms what it spent",
          "[far][lease][redis][reclaim]") {
  // N = 50 per 10 s, L = 10, H = 100 ms, G = 0: records expire at the lease's time + H.
  // a leases 10 at 1 ms (record: 9 unconfirmed) and spends 4 more locally (5 spent, 5 left),
  // then stays silent past its record's expiry at 101 ms. b's decision at 200 ms reclaims the
  // 9: the count drops from 10 to 1, and b leases 10 (count 11). a's next decision gives back
  // its 5 with the reclaimed record: the count gains the 4 a had spent of the 9 (11 + 4 =
  // 15 = a's 5 + b's 10), so every unit a spent stays counted once.
  const auto prefix = rltest::unique_prefix("lease");
  auto o = lease_options(prefix);
  o.reclaim_grace = 0ms;
  const auto params = ratelimit::detail::WindowParams{50, std::chrono::nanoseconds{10s}.count()};
  LeasedStorage a_store(o), b_store(o);
  auto a = a_store.bind<FixedWindowModel>("api", params, 10);
  auto b = b_store.bind<FixedWindowModel>("api", params, 10);
  for (int i = 0; i < 5; ++i) REQUIRE(a.apply("k", 1ms, one).allowed);
  REQUIRE(b.apply("k", 200ms, one).allowed);
  CHECK(b_store.stats().units_reclaimed == 9);
  REQUIRE(a.apply("k", 201ms, one).allowed);  // gives back 5, confirms 4, leases 10
  // Both drain the window, give their leases back at its end (flush: the late confirmations
  // again, as a's flush reclaims b's expired record first), and b takes what is left: the
  // units admitted add up to exactly N, none counted twice or lost (5 + 1 + 1 so far).
  std::int64_t admitted = 5 + 1 + 1;
  for (int i = 0; i < 60; ++i) {
    admitted += a.apply("k", 202ms, one).allowed ? 1 : 0;
    admitted += b.apply("k", 202ms, one).allowed ? 1 : 0;
  }
  (void)a.flush(10s - 1ms);
  (void)b.flush(10s - 1ms);
  for (int i = 0; i < 60; ++i) admitted += b.apply("k", 10s - 1ms, one).allowed ? 1 : 0;
  CHECK(admitted == 50);
}

TEST_CASE("A bucket lease whose holder was killed credits its term H + G after it was taken",
          "[far][lease][bucket][redis][reclaim]") {
  // C = 100 tokens refilled at r = 10 per second (a token every 100 ms), H = 100 ms, G = 1 s
  // (the default). A child process leases 50 at 1 ms, spends 1 and is killed holding 49: the
  // bucket holds 50 from then, and the record expires at 1 ms + H + G = 1101 ms. At 1101 ms
  // the bucket refilled 1100 ms x 10/s = 11 (61 held), and the reclaim credits the record's
  // term min(49, 50 - r x 1100 ms) = min(49, 39) = 39 (the refill since the lease is not
  // credited twice): 61 + 39 = 100, a full bucket, as one exact bucket that spent 1 at 1 ms
  // would hold. Without the reclaim the instance would get 61.
  const auto prefix = rltest::unique_prefix("lease");
  const auto params = ratelimit::TokenBucketModel::make_params({100, ratelimit::per_second(10)});
  die_holding_a_lease([&] {
    LeasedStorage child(lease_options(prefix));
    return child.bind<ratelimit::TokenBucketModel>("api", params, 50).apply("k", 1ms, one).allowed;
  });
  LeasedStorage s(lease_options(prefix));
  auto b = s.bind<ratelimit::TokenBucketModel>("api", params, 10);
  std::int64_t admitted = 0;
  for (int i = 0; i < 150; ++i) admitted += b.apply("k", 1101ms, one).allowed ? 1 : 0;
  CHECK(admitted == 100);
  CHECK(s.stats().units_reclaimed == 39);
}

TEST_CASE("A give-back that Redis never answered goes again with the next call",
          "[far][lease][redis][reclaim]") {
  // N = 50 per 10 s, L = 10, H = 100 ms, G = 1 s. a (through a proxy) leases 10 at 1 ms
  // (record: 9) and spends 4 more: 5 spent, 5 left. At 200 ms its lease has ended, and the
  // call giving it back is cut off (the proxy drops everything): the decision degrades and
  // the ended lease is kept, records and all. Healed, a's next call gives the 5 back with the
  // record (count 10 - 5 = 5) and leases 10 (count 15). At 1201 ms, past the record's expiry
  // (1101 ms), another instance finds nothing to reclaim and gets 50 - 15 = 35. Had the record
  // been dropped with the failed call, its 9 would have been reclaimed, the 4 a spent of them
  // with them: 39, over N.
  const auto prefix = rltest::unique_prefix("lease");
  const auto& e = rltest::redis_endpoint();
  rltest::DelayProxy proxy(e.host, e.port);
  auto o = lease_options(prefix);
  o.redis.host = "127.0.0.1";
  o.redis.port = proxy.port();
  o.redis.command_timeout = 200ms;
  o.redis.breaker_backoff = 1ms;
  o.redis.breaker_max_backoff = 1ms;
  o.redis.failure_policy = ratelimit::FailurePolicy::fail_closed;
  const auto params = ratelimit::detail::WindowParams{50, std::chrono::nanoseconds{10s}.count()};
  LeasedStorage a_store(o), b_store(lease_options(prefix));
  auto a = a_store.bind<FixedWindowModel>("api", params, 10);
  auto b = b_store.bind<FixedWindowModel>("api", params, 10);
  for (int i = 0; i < 5; ++i) REQUIRE(a.apply("k", 1ms, one).allowed);
  proxy.set_partitioned(true);
  const auto cut = a.apply("k", 200ms, one);
  CHECK(cut.degraded);
  CHECK_FALSE(cut.allowed);
  proxy.set_partitioned(false);
  // The breaker may refuse a first call or two after the cut (its back-off, 1 ms): each
  // refused call keeps the ended lease again. A generous bound, only against a hang.
  bool answered = false;
  for (int i = 0; i < 2000 && !answered; ++i) {
    const auto d = a.apply("k", 300ms, one);
    answered = !d.degraded;
    if (answered) CHECK(d.allowed);
  }
  REQUIRE(answered);
  std::int64_t admitted = 0;
  for (int i = 0; i < 60; ++i) admitted += b.apply("k", 1201ms, one).allowed ? 1 : 0;
  CHECK(admitted == 35);
  CHECK(b_store.stats().units_reclaimed == 0);
}

TEST_CASE("A leased limiter decides with the parameters each call carries", "[far][lease][redis]") {
  // One limiter of 100 a minute; every call carries a plan of 5 a minute (a key's plan read at
  // request time): by definition a fixed window of 5 per minute, which admits 5 of 10 requests
  // in one window, as the same limiter in process does.
  LeasedStorage s(lease_options(rltest::unique_prefix("lease")));
  ratelimit::ManualClock clock;
  using Leased = ratelimit::FixedWindow<ratelimit::ManualClock, LeasedStorage>;
  Leased leased(ratelimit::Rate{100, 1min}, s, clock, "api");
  ratelimit::FixedWindow<ratelimit::ManualClock> memory(ratelimit::Rate{100, 1min}, {}, clock,
                                                        "api");
  const auto plan = Leased::params_of(ratelimit::Rate{5, 1min});
  const auto run = [&](auto& limiter) {
    int admitted = 0;
    for (int i = 0; i < 10; ++i) admitted += limiter.try_acquire("k", 1, plan).allowed ? 1 : 0;
    return admitted;
  };
  CHECK(run(memory) == 5);
  CHECK(run(leased) == 5);
  // The limit reported is the plan's; without a plan the limiter's own, 100, of which 5 are
  // spent.
  CHECK(leased.peek("k", plan).limit == 5);
  CHECK(leased.peek("k").remaining == 95);
}
