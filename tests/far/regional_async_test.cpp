// Non-blocking decisions on a regional storage (RegionalWindowBinding::apply_async and
// RegionalBucketBinding::apply_async, reached through Limiter::try_acquire_async), on one
// redis-server per region (regions.hpp). Pins the fault where try_acquire_async on a
// RegionalStorage limiter made the blocking round trip on the caller's thread (an event loop
// stalled for a Redis round trip, and for the whole deadline when Redis was down): the
// completion must run on the region's I/O thread, after the call returned, exactly once, with
// the decision the blocking call gives. Time is a ManualClock's; real time only bounds the
// waits for completions (a hang guard, never an assertion about how long anything took).

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis/lease/storage.hpp>
#include <ratelimit/redis/regional/storage.hpp>

#include "far/regions.hpp"
#include "support/delay_proxy.hpp"

namespace {

using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::FixedWindowModel;
using ratelimit::LeakyBucketModel;
using ratelimit::ManualClock;
using ratelimit::Operation;
using ratelimit::RegionalStorage;
using ratelimit::SlidingCounterModel;
using ratelimit::TokenBucketModel;

/// A generous bound on any wait for a completion: only a hang fails it.
constexpr auto hang_guard = 20s;

/// Every model's parameters with limit 10: windows of 10 per second, buckets of capacity 10
/// refilled at 5 per second.
template <class M>
typename M::Params params_of() {
  if constexpr (ratelimit::RegionalBucketModel<M>)
    return ratelimit::detail::make_gcra_params(10, 5, std::chrono::nanoseconds{1s});
  else
    return ratelimit::detail::WindowParams{10, std::chrono::nanoseconds{1s}.count()};
}

/// What one asynchronous decision did: its decision, how often its completion ran, on which
/// thread, and whether the call had returned before it ran.
struct Outcome {
  std::promise<Decision> promise;
  std::future<Decision> future = promise.get_future();
  std::atomic<int> calls{0};
  std::atomic<bool> returned{false};
  std::atomic<bool> returned_first{false};
  std::thread::id thread;
};

/// A completion that records into `o` (which must outlive it).
ratelimit::Completion<Decision> recorder(const std::shared_ptr<Outcome>& o) {
  return [o](Decision d) {
    o->returned_first = o->returned.load();
    o->thread = std::this_thread::get_id();
    if (o->calls.fetch_add(1) == 0) o->promise.set_value(d);
  };
}

/// `binding.apply_async` and a wait for its decision.
template <class B>
Decision decide_async(const B& binding, const std::string& key, std::chrono::nanoseconds now,
                      const Operation& op) {
  auto o = std::make_shared<Outcome>();
  binding.apply_async(key, now, op, recorder(o));
  o->returned = true;
  REQUIRE(o->future.wait_for(hang_guard) == std::future_status::ready);
  return o->future.get();
}

std::vector<RegionalStorage> storages(const rltest::Regions& regions) {
  std::vector<RegionalStorage> out;
  for (std::size_t i = 0; i < regions.size(); ++i)
    out.emplace_back(regions.options(i, 100ms, 40ms));
  return out;
}

/// Region 0's options, its own Redis reached through `proxy` (which may black-hole it), with
/// `policy` and a short command timeout so that a black-holed decision ends soon.
ratelimit::RegionalOptions behind(const rltest::Regions& regions, const rltest::DelayProxy& proxy,
                                  ratelimit::FailurePolicy policy) {
  auto o = regions.options(0, 100ms, 40ms);
  o.local.port = proxy.port();
  o.local.command_timeout = 300ms;
  o.local.failure_policy = policy;
  return o;
}

}  // namespace

TEMPLATE_TEST_CASE(
    "An asynchronous regional decision equals the blocking one in every field over a random "
    "sequence",
    "[far][redis][async]", FixedWindowModel, SlidingCounterModel, TokenBucketModel,
    LeakyBucketModel) {
  rltest::Regions regions(2);
  auto s = storages(regions);
  // U = 3: a region admits at most 3 units per key the other has not acknowledged, so unseen
  // denials come up between the (random) exchanges.
  const auto a = s[0].template bind<TestType>("api", params_of<TestType>(), 3);
  const auto b = s[1].template bind<TestType>("api", params_of<TestType>(), 3);
  // Two keys with one history: "sync" decided by apply, "async" by apply_async. Their states
  // stay equal step by step, so every decision must be equal too.
  std::mt19937 rng(20261203);
  std::chrono::nanoseconds t{0};
  int allowed = 0, denied = 0, unseen = 0;
  for (int step = 0; step < 300; ++step) {
    t += std::chrono::milliseconds{std::uniform_int_distribution<int>(0, 150)(rng)};
    const int action = std::uniform_int_distribution<int>(0, 9)(rng);
    if (action == 0) {  // both regions exchange: each key's units are pushed alike
      (void)s[0].exchange(t);
      (void)s[1].exchange(t);
      continue;
    }
    // A cost of 1 to 4, now and then 11 (over the limit of 10: never admitted), now and then
    // a peek.
    std::int64_t cost = std::uniform_int_distribution<std::int64_t>(1, 4)(rng);
    if (std::uniform_int_distribution<int>(0, 19)(rng) == 0) cost = 11;
    const Operation op{cost, std::uniform_int_distribution<int>(0, 4)(rng) == 0};
    if (action == 1) {  // the other region spends on both keys alike
      CHECK(b.apply("sync", t, op) == b.apply("async", t, op));
      continue;
    }
    const Decision sync = a.apply("sync", t, op);
    const Decision async = decide_async(a, "async", t, op);
    INFO("step " << step << " at " << t.count() << " ns, cost " << cost << ", peek " << op.peek);
    REQUIRE(async.allowed == sync.allowed);
    REQUIRE(async.limit == sync.limit);
    REQUIRE(async.remaining == sync.remaining);
    REQUIRE(async.retry_after == sync.retry_after);
    REQUIRE(async.reset_after == sync.reset_after);
    REQUIRE(async.delay == sync.delay);
    REQUIRE(async.degraded == sync.degraded);
    REQUIRE(async == sync);
    allowed += sync.allowed ? 1 : 0;
    denied += sync.allowed ? 0 : 1;
    unseen += !sync.allowed && sync.degraded ? 1 : 0;
  }
  // The sequence went through every kind of answer: admitted, denied, and denied by the
  // unseen bound (degraded, retry after the exchange interval).
  CHECK(allowed > 0);
  CHECK(denied > 0);
  CHECK(unseen > 0);
  // Nothing failed: every degraded answer above was an unseen denial, not the failure policy.
  CHECK(s[0].stats().degraded == 0);
}

TEMPLATE_TEST_CASE(
    "try_acquire_async on a regional limiter completes once on the I/O thread, not the "
    "caller's",
    "[far][redis][async]", FixedWindowModel, TokenBucketModel) {
  // One region: no other region to be unseen by, so only the limit decides.
  rltest::Regions regions(1);
  auto s = storages(regions);
  ManualClock clock;
  clock.set(5ms);
  using Limiter = std::conditional_t<std::is_same_v<TestType, FixedWindowModel>,
                                     ratelimit::FixedWindow<ManualClock, RegionalStorage>,
                                     ratelimit::TokenBucket<ManualClock, RegionalStorage>>;
  auto limiter = [&] {
    if constexpr (std::is_same_v<TestType, FixedWindowModel>)
      return Limiter(ratelimit::Rate{10, 1s}, s[0], clock, "api");
    else
      return Limiter(ratelimit::TokenBucketConfig{10, ratelimit::Rate{5, 1s}}, s[0], clock, "api");
  }();
  for (int i = 0; i < 3; ++i) {
    auto o = std::make_shared<Outcome>();
    limiter.try_acquire_async("k", 2, recorder(o));
    o->returned = true;
    REQUIRE(o->future.wait_for(hang_guard) == std::future_status::ready);
    const Decision d = o->future.get();
    // Request i spends 2 of 10 at one instant: 10 - 2 (i + 1) left.
    CHECK(d.allowed);
    CHECK_FALSE(d.degraded);
    CHECK(d.remaining == 10 - 2 * (i + 1));
    // (Whether the call had returned first is a race here: a quick reply may beat it. The
    // thread is what tells a blocking call from a non-blocking one.)
    CHECK(o->thread != std::this_thread::get_id());
    // A blocking decision on the same client after it: the I/O thread has finished with the
    // first one's reply, so a second run of its completion would have shown by now.
    (void)limiter.peek("k");
    CHECK(o->calls == 1);
  }
}

TEMPLATE_TEST_CASE(
    "With its Redis unreachable, an asynchronous regional decision returns at once and "
    "completes by the deadline with the failure policy's decision",
    "[far][redis][async]", FixedWindowModel, SlidingCounterModel, TokenBucketModel,
    LeakyBucketModel) {
  rltest::Regions regions(2);
  rltest::DelayProxy proxy("127.0.0.1", regions.endpoint(0).port);
  proxy.set_partitioned(true);  // a black hole: the request is sent and never answered
  const auto policy =
      GENERATE(ratelimit::FailurePolicy::fail_closed, ratelimit::FailurePolicy::fail_open,
               ratelimit::FailurePolicy::local_fallback);
  RegionalStorage storage(behind(regions, proxy, policy));
  const auto binding = storage.template bind<TestType>("api", params_of<TestType>());
  const auto t = 5ms;
  auto o = std::make_shared<Outcome>();
  binding.apply_async("k", t, Operation{1}, recorder(o));
  o->returned = true;
  // The call returned before its completion ran (it had to wait for the deadline), and the
  // completion came from the I/O thread's timer, not from this thread.
  REQUIRE(o->future.wait_for(hang_guard) == std::future_status::ready);
  const Decision d = o->future.get();
  CHECK(o->returned_first);
  CHECK(o->thread != std::this_thread::get_id());
  CHECK(o->calls == 1);
  CHECK(d.degraded);
  CHECK(d.limit == 10);
  switch (policy) {
    case ratelimit::FailurePolicy::fail_closed:  // denied, try again in 1 ms
      CHECK_FALSE(d.allowed);
      CHECK(d.retry_after == 1ms);
      break;
    case ratelimit::FailurePolicy::fail_open:  // admitted, the whole limit left
      CHECK(d.allowed);
      CHECK(d.remaining == 10);
      break;
    default: {  // this instance's local share (divisor 1: the whole limit), on a fresh key
      // The same policy through the blocking call on another fresh key: the same decision.
      const Decision sync = binding.apply("other", t, Operation{1});
      CHECK(d == sync);
      CHECK(d.allowed);
      // 10 - 1 = 9 left.
      CHECK(d.remaining == 9);
    }
  }
  CHECK(storage.stats().degraded >= 1);
}

TEST_CASE(
    "Regional decisions in flight complete exactly once after their limiter and storage are "
    "destroyed",
    "[far][redis][async]") {
  rltest::Regions regions(2);
  rltest::DelayProxy proxy("127.0.0.1", regions.endpoint(0).port);
  // Answered: Redis is reachable; unanswered: black-holed, so every decision is surely still
  // in flight when the storage goes, and ends by its deadline with the failure policy.
  const bool answered = GENERATE(true, false);
  proxy.set_partitioned(!answered);
  constexpr int n = 40;
  std::vector<std::shared_ptr<Outcome>> outcomes;
  for (int i = 0; i < n; ++i) outcomes.push_back(std::make_shared<Outcome>());
  {
    ManualClock clock;
    auto storage = std::make_optional<RegionalStorage>(
        behind(regions, proxy, ratelimit::FailurePolicy::fail_closed));
    auto window = std::make_optional<ratelimit::FixedWindow<ManualClock, RegionalStorage>>(
        ratelimit::Rate{100, 1s}, *storage, clock, "api");
    auto bucket = std::make_optional<ratelimit::LeakyBucket<ManualClock, RegionalStorage>>(
        ratelimit::LeakyBucketConfig{100, ratelimit::Rate{5, 1s}}, *storage, clock, "api");
    for (int i = 0; i < n; ++i) {
      const std::string key = "k" + std::to_string(i % 4);  // gone when this iteration ends
      if (i % 2 == 0)
        window->try_acquire_async(key, 1, recorder(outcomes[i]));
      else
        bucket->try_acquire_async(key, 1, recorder(outcomes[i]));
    }
    window.reset();
    bucket.reset();
    storage.reset();
  }
  for (int i = 0; i < n; ++i) {
    INFO("decision " << i);
    REQUIRE(outcomes[i]->future.wait_for(hang_guard) == std::future_status::ready);
    const Decision d = outcomes[i]->future.get();
    // Answered: 20 requests over 4 keys on a limit of 100 (either model): all admitted.
    // Unanswered: fail_closed denies each.
    CHECK(d.allowed == answered);
    CHECK(d.degraded == !answered);
  }
  // Every completion ran exactly once (and none twice, by the time all have run once).
  for (int i = 0; i < n; ++i) CHECK(outcomes[i]->calls == 1);
}

TEST_CASE(
    "try_acquire_all_async on a regional limiter completes on the I/O thread with the blocking "
    "call's decision",
    "[far][redis][async]") {
  // A regional decision spans one key, so an all-of on a RegionalStorage holds one limiter;
  // before decide_all_async it, too, made the blocking round trip on the caller's thread.
  rltest::Regions regions(1);
  auto s = storages(regions);
  ManualClock clock;
  clock.set(5ms);
  ratelimit::SlidingCounter<ManualClock, RegionalStorage> limiter(ratelimit::Rate{10, 1s}, s[0],
                                                                  clock, "api");
  for (int i = 0; i < 3; ++i) {
    const auto sync = ratelimit::try_acquire_all("sync", 3, limiter);
    std::promise<ratelimit::AllOfDecision<1>> promise;
    auto future = promise.get_future();
    std::atomic<int> calls{0};
    std::thread::id thread;
    ratelimit::try_acquire_all_async(
        "async", 3,
        [&](ratelimit::AllOfDecision<1> d) {
          thread = std::this_thread::get_id();
          if (calls.fetch_add(1) == 0) promise.set_value(d);
        },
        limiter);
    REQUIRE(future.wait_for(hang_guard) == std::future_status::ready);
    const auto async = future.get();
    CHECK(thread != std::this_thread::get_id());
    // Request i spends 3 of 10: admitted while 3 (i + 1) <= 10, 10 - 3 (i + 1) left.
    CHECK(async.allowed);
    CHECK(async.decisions[0].remaining == 10 - 3 * (i + 1));
    CHECK(async.allowed == sync.allowed);
    CHECK(async.decisions[0] == sync.decisions[0]);
    (void)limiter.peek("async");  // the I/O thread is past the first reply (see above)
    CHECK(calls == 1);
  }
}

TEST_CASE(
    "A regional decide_all_async refuses more than one part before it asks Redis, and "
    "completes an empty list at once",
    "[far][redis][async]") {
  rltest::Regions regions(1);
  auto s = storages(regions);
  const auto a = s[0].bind<FixedWindowModel>("api", params_of<FixedWindowModel>());
  const std::array<RegionalStorage::Part, 2> two{a.part("k", Operation{1}),
                                                 a.part("j", Operation{1})};
  int calls = 0;
  const auto count = [&](std::vector<Decision>&&, bool) { ++calls; };
  CHECK_THROWS_WITH(s[0].decide_all_async(two, 0ns, count),
                    Catch::Contains("parts (count)") && Catch::Contains("one key at a time"));
  CHECK(calls == 0);
  bool all = false;
  s[0].decide_all_async({}, 0ns, [&](std::vector<Decision>&& ds, bool a_) {
    ++calls;
    all = a_ && ds.empty();
  });
  CHECK(calls == 1);  // no part: done before the call returned, on this thread
  CHECK(all);
  // Nothing was spent by the refused call: the whole limit of 10 is left.
  CHECK(a.apply("k", 0ns, Operation{1, true}).remaining == 10);
}

TEMPLATE_TEST_CASE(
    "A leased miss never blocks the caller; the lease and remembered denials answer before the "
    "call returns",
    "[far][lease][redis][async]", FixedWindowModel, TokenBucketModel) {
  // The shared test Redis behind a proxy 150 ms away each way (a 300 ms round trip). N = 10
  // per second (a bucket: C = 10 refilled at 5 per second), L = 5, all at 1 ms (ManualClock
  // time; refill plays no part). Decisions 1 and 6 miss and lease 5 each (asynchronous: completed
  // on the client's I/O thread after apply_async returned); 2-5 and 7-10 spend the leases
  // (completed before it returned, on the caller's thread); 11 misses, Redis has nothing left,
  // denied (its denial remembered for min(retry_after, H)); 12-1000 are denied before the call
  // returns, with no round trip. 3 round trips for 1000 decisions, none blocking the caller.
  const auto& e = rltest::redis_endpoint();
  rltest::DelayProxy proxy(e.host, e.port);
  proxy.set_delay(150ms);
  ratelimit::LeaseOptions o;
  o.redis.host = "127.0.0.1";
  o.redis.port = proxy.port();
  o.redis.key_prefix = rltest::unique_prefix("lasync");
  o.redis.ttl_margin = 10min;
  o.redis.connect_timeout = 5s;
  o.redis.command_timeout = 5s;
  o.lease_duration = 1s;
  ratelimit::LeasedStorage s(o);
  const auto b = s.template bind<TestType>("api", params_of<TestType>(), 5);
  const Operation one{1};
  int admitted = 0, sync_completions = 0, async_completions = 0;
  for (int i = 1; i <= 1000; ++i) {
    auto out = std::make_shared<Outcome>();
    b.apply_async("k", 1ms, one, recorder(out));
    const bool done_in_call = out->calls.load() == 1;
    out->returned = true;
    REQUIRE(out->future.wait_for(hang_guard) == std::future_status::ready);
    const Decision d = out->future.get();
    CHECK(out->calls.load() == 1);
    admitted += d.allowed ? 1 : 0;
    const bool miss = i == 1 || i == 6 || i == 11;
    if (miss) {
      INFO("decision " << i);
      CHECK_FALSE(done_in_call);
      CHECK(out->returned_first.load());
      CHECK(out->thread != std::this_thread::get_id());
      ++async_completions;
    } else {
      if (!done_in_call) FAIL("decision " << i << " waited for Redis");
      ++sync_completions;
    }
  }
  CHECK(admitted == 10);
  CHECK(async_completions == 3);
  CHECK(sync_completions == 997);
  const auto st = s.stats();
  CHECK(st.round_trips == 3);
  CHECK(st.local == 8);
  CHECK(st.denied_locally == 989);
}
