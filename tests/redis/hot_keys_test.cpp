// The over-limit cache and the local pre-limit in front of Redis (one thread; the
// flood and the two-instance tests are in async_test.cpp and contention_test.cpp).
// Time comes from ManualClock (whole ms) unless a test is about Redis's own clock.
#include <chrono>
#include <cstdint>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

#include "redis_admin.hpp"
#include "servers.hpp"
#include "support/algorithms.hpp"
#include "support/expect.hpp"
#include "support/redis_backend.hpp"

using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::ManualClock;
using ratelimit::Operation;
using ratelimit::RedisOptions;
using ratelimit::RedisStorage;
using rltest::Shape;

namespace {

RedisOptions cache_options(std::string_view tag) {
  RedisOptions o = rltest::test_redis_options(tag);
  o.over_limit_cache.enabled = true;
  return o;
}

/// One random step of the comparison: a cost from 1 to limit + 1 (half of them 1, so that the
/// sliding log, cached for one cost, repeats it), one in eight a peek.
struct Step {
  std::int64_t cost;
  bool peek;
};
Step random_step(std::mt19937_64& rng, std::int64_t limit) {
  const bool one = rng() % 2 == 0;
  const auto cost = one ? 1 : static_cast<std::int64_t>(1 + rng() % (limit + 1));
  return {cost, rng() % 8 == 0};
}

template <class L>
Decision decide(L& limiter, std::chrono::nanoseconds now, const Step& s) {
  return limiter.binding().apply("k", now, Operation{s.cost, s.peek, Decision::never});
}

}  // namespace

TEST_CASE("The over-limit cache decides exactly as Redis for one instance, every algorithm",
          "[redis][hot_keys]") {
  rltest::for_each_algorithm([]<class Algo>() {
    INFO("algorithm: " << Algo::name);
    // 5 per second (buckets: capacity 5 refilled at 5/s; windows: 5 per 1 s window).
    const Shape shape{5, ratelimit::per_second(5)};
    ManualClock clock;
    RedisStorage plain(rltest::test_redis_options("nocache")), cached(cache_options("cache"));
    auto a = Algo::make(shape, plain, clock), b = Algo::make(shape, cached, clock);
    std::mt19937_64 rng(14);
    constexpr int steps = 600;
    for (int i = 0; i < steps; ++i) {
      clock.advance(std::chrono::milliseconds(rng() % 120));  // 0..119 ms: 0..0.6 refills
      if (rng() % 10 == 0)  // one step in ten, the clock steps back up to 199 ms
        clock.set(std::max(std::chrono::nanoseconds{0},
                           clock.now() - std::chrono::milliseconds(rng() % 200)));
      const Step s = random_step(rng, shape.limit);
      INFO("step " << i << " at " << clock.now().count() << " ns, cost " << s.cost
                   << (s.peek ? " (peek)" : ""));
      const Decision without = decide(a, clock.now(), s), with = decide(b, clock.now(), s);
      REQUIRE(with == without);
    }
    const auto st = cached.stats();
    CHECK(st.degraded_decisions == 0);
    // Every request was answered once, by Redis or by the cache.
    CHECK(st.decisions + st.cache_hits == static_cast<std::uint64_t>(steps));
    if constexpr (ratelimit::StateWire<typename Algo::Model>)
      CHECK(st.cache_hits > 0);  // the comparison did exercise the cache
    else
      CHECK(st.cache_hits == 0);  // a model without WireState::state is never cached
  });
}

TEST_CASE("With Redis's clock the cache denies exactly what Redis denies", "[redis][hot_keys]") {
  rltest::for_each_algorithm([]<class Algo>() {
    INFO("algorithm: " << Algo::name);
    // 5 per 366 days: no refill or window end can fall inside the few ms this runs, so every
    // decision's outcome and counts depend on the requests only, whatever Redis's clock reads.
    // (A fixed window ends at multiples of 366 days since 1970: the next is in February 2027;
    // a run straddling that instant would see both storages' windows end, at different steps.)
    const Shape shape{5, ratelimit::Rate{5, std::chrono::hours{24 * 366}}};
    RedisOptions po = rltest::test_redis_options("rtnocache"), co = cache_options("rtcache");
    po.time_source = co.time_source = ratelimit::TimeSource::redis;
    ManualClock clock;
    RedisStorage plain(po), cached(co);
    auto a = Algo::make(shape, plain, clock), b = Algo::make(shape, cached, clock);
    std::mt19937_64 rng(15);
    constexpr int steps = 200;
    for (int i = 0; i < steps; ++i) {
      const Step s = random_step(rng, shape.limit);
      INFO("step " << i << ", cost " << s.cost << (s.peek ? " (peek)" : ""));
      const Decision without = decide(a, clock.now(), s), with = decide(b, clock.now(), s);
      // The times in a decision are read on Redis's clock a few us apart: not compared.
      REQUIRE(with.allowed == without.allowed);
      REQUIRE(with.limit == without.limit);
      REQUIRE(with.remaining == without.remaining);
      REQUIRE((with.retry_after == Decision::never) == (without.retry_after == Decision::never));
    }
    if constexpr (ratelimit::StateWire<typename Algo::Model>) CHECK(cached.stats().cache_hits > 0);
  });
}

TEST_CASE("A reset, a cleared cache or other parameters send the next request to Redis",
          "[redis][hot_keys]") {
  ManualClock clock;
  RedisStorage cached(cache_options("clear")), other(rltest::test_redis_options("unused"));
  RedisOptions same_prefix = rltest::test_redis_options("unused");
  same_prefix.key_prefix = cached.options().key_prefix;
  RedisStorage elsewhere(same_prefix);  // another instance: same Redis keys, no cache
  // Capacity 2, refilled at 1 per hour.
  const ratelimit::TokenBucketConfig config{2, ratelimit::Rate{1, std::chrono::hours{1}}};
  ratelimit::TokenBucket<ManualClock, RedisStorage> tb(config, cached, clock);
  ratelimit::TokenBucket<ManualClock, RedisStorage> tb_elsewhere(config, elsewhere, clock);
  CHECK(tb.try_acquire("k"));
  CHECK(tb.try_acquire("k"));  // empty now: this admission's state is remembered
  CHECK(cached.stats().cache_entries == 1);
  CHECK_FALSE(tb.try_acquire("k"));
  CHECK(cached.stats().cache_hits == 1);
  CHECK(cached.stats().decisions == 2);

  // Another instance resets the key: this one's entry lasts until its retry_after (1 hour)...
  tb_elsewhere.reset("k");
  CHECK_FALSE(tb.try_acquire("k"));
  CHECK(cached.stats().cache_hits == 2);
  // ...or until the cache is cleared: the next request then asks Redis, which admits.
  cached.clear_over_limit_cache();
  CHECK(cached.stats().cache_entries == 0);
  CHECK(tb.try_acquire("k"));
  CHECK(tb.try_acquire("k"));
  CHECK_FALSE(tb.try_acquire("k"));  // from the cache again (the second admission emptied it)
  CHECK(cached.stats().cache_hits == 3);

  // A reset through this instance forgets the key at once.
  tb.reset("k");
  CHECK(cached.stats().cache_entries == 0);
  CHECK(tb.try_acquire("k"));
  CHECK(tb.try_acquire("k"));
  // The binding's own call does the same for one key.
  tb_elsewhere.reset("k");
  tb.binding().clear_over_limit_cache("k");
  CHECK(tb.try_acquire("k"));

  // Other parameters on the same key (a raised limit) are decided by Redis, not by the entry
  // cached with the old ones.
  CHECK(tb.try_acquire("k"));
  CHECK_FALSE(tb.try_acquire("k"));  // both tokens spent since the reset: from the cache
  const auto hits = cached.stats().cache_hits;
  const auto raised = tb.binding().with_params(
      ratelimit::TokenBucketModel::make_params({4, ratelimit::Rate{1, std::chrono::hours{1}}}));
  // Spent 2 of capacity 4 at the same instant: 2 left, so a cost-2 request is admitted.
  CHECK(raised.apply("k", clock.now(), Operation{2, false, Decision::never}).allowed);
  CHECK(cached.stats().cache_hits == hits);
}

TEST_CASE("The over-limit cache's memory is bounded: a capacity, and no long keys",
          "[redis][hot_keys]") {
  ManualClock clock;
  for (const std::size_t capacity : {1, 5, 17}) {
    // 40 keys each denied once: never more than the capacity held, whatever the shards.
    RedisOptions small = cache_options("small");
    small.over_limit_cache.capacity = capacity;
    RedisStorage s(small);
    ratelimit::FixedWindow<ManualClock, RedisStorage> f(ratelimit::per_minute(1), s, clock);
    for (int i = 0; i < 40; ++i) {
      CHECK(f.try_acquire("c" + std::to_string(i)));
      CHECK_FALSE(f.try_acquire("c" + std::to_string(i)));
    }
    CHECK(s.stats().cache_entries <= capacity);
  }
  RedisOptions o = cache_options("capacity");
  o.over_limit_cache.capacity = 16;
  RedisStorage cached(o);
  ratelimit::FixedWindow<ManualClock, RedisStorage> fw(ratelimit::per_minute(1), cached, clock);
  // 200 keys each denied once (1 per minute: the second request is denied): at most 16 kept.
  for (int i = 0; i < 200; ++i) {
    const std::string key = "client-" + std::to_string(i);
    CHECK(fw.try_acquire(key));
    CHECK_FALSE(fw.try_acquire(key));
  }
  CHECK(cached.stats().cache_entries <= 16);
  CHECK(cached.stats().cache_entries > 0);
  // A key over 256 bytes is never held: its denials keep asking Redis.
  RedisStorage fresh(cache_options("longkey"));
  ratelimit::FixedWindow<ManualClock, RedisStorage> fw2(ratelimit::per_minute(1), fresh, clock);
  const std::string long_key(257, 'x');
  CHECK(fw2.try_acquire(long_key));
  CHECK_FALSE(fw2.try_acquire(long_key));
  CHECK_FALSE(fw2.try_acquire(long_key));
  CHECK(fresh.stats().cache_entries == 0);
  CHECK(fresh.stats().cache_hits == 0);
  CHECK(fresh.stats().decisions == 3);

  RedisOptions bad = cache_options("bad");
  bad.over_limit_cache.capacity = 0;
  CHECK_THROWS_WITH(RedisStorage(bad), Catch::Contains("over_limit_cache.capacity"));
}

TEST_CASE("The pre-limit denies locally, and spends only what Redis admitted",
          "[redis][hot_keys][pre_limit]") {
  ManualClock clock;
  RedisOptions o = rltest::test_redis_options("prelimit");
  o.pre_limit = true;
  o.fallback_divisor = 2;
  RedisStorage local(o);
  RedisOptions same = rltest::test_redis_options("unused");
  same.key_prefix = o.key_prefix;
  RedisStorage elsewhere(same);  // another instance, no pre-limit
  // Shared: 10 per minute; per instance: 10 / 2 = 5 per minute.
  ratelimit::FixedWindow<ManualClock, RedisStorage> fw(ratelimit::per_minute(10), local, clock);
  ratelimit::FixedWindow<ManualClock, RedisStorage> fw_elsewhere(ratelimit::per_minute(10),
                                                                 elsewhere, clock);
  for (int i = 0; i < 5; ++i) CHECK(fw.try_acquire("k"));
  const Decision sixth = fw.try_acquire("k");
  CHECK_FALSE(sixth.allowed);
  CHECK(sixth.limit == 5);  // the per-instance limit's denial
  CHECK(sixth.remaining == 0);
  CHECK(sixth.retry_after == 60s);  // the window started at 0 and ends at 60 s
  CHECK(local.stats().pre_limited == 1);
  CHECK(local.stats().decisions == 5);           // the sixth never reached Redis
  CHECK(fw_elsewhere.peek("k").remaining == 5);  // 10 - 5 spent in Redis

  // The next window: the other instance spends all 10 first; Redis then denies this one's
  // request, which must not spend the per-instance limit.
  clock.advance(60s);
  for (int i = 0; i < 10; ++i) CHECK(fw_elsewhere.try_acquire("k"));
  CHECK_FALSE(fw.try_acquire("k"));                        // Redis's denial
  CHECK(local.stats().decisions == 6);                     // it did ask Redis
  CHECK(local.stats().pre_limited == 1);                   // not the pre-limit
  fw_elsewhere.reset("k");                                 // the shared count is 0 again
  for (int i = 0; i < 5; ++i) CHECK(fw.try_acquire("k"));  // the local 5 are whole
  CHECK_FALSE(fw.try_acquire("k"));
  CHECK(local.stats().pre_limited == 2);
}

TEST_CASE("A reservation and its cancel go past the over-limit cache and the pre-limit to Redis",
          "[redis][hot_keys][pre_limit][reserve]") {
  using rltest::admitted;
  using rltest::denied;
  ManualClock clock;
  // Token bucket B = 5 refilled at 5/s: a token is worth 200 ms.
  RedisStorage cached(cache_options("reservecache"));
  ratelimit::TokenBucket<ManualClock, RedisStorage> tb({5, ratelimit::per_second(5)}, cached,
                                                       clock);
  CHECK(tb.try_acquire("k", 5));
  CHECK_FALSE(tb.try_acquire("k"));  // Redis's denial: the key is cached over its limit
  const auto before = cached.stats().decisions;
  // D = 5 tokens: 2 more are due (5 + 2 - 5) x 200 ms = 400 ms on; D = 7: full in 1.4 s.
  const auto r = tb.reserve("k", 2);
  CHECK(r.decision == admitted(5, 0, 1400ms, 400ms));
  CHECK(cached.stats().decisions == before + 1);  // Redis decided it, not the cache
  // A unit now waits for D + 1 - B = 3 tokens: 600 ms (Redis asked again: the cache forgot).
  CHECK(tb.try_acquire("k") == denied(5, 0, 600ms, 1400ms));
  CHECK(tb.cancel("k", r) == denied(5, 0, 200ms, 1s));  // D = 5 again: 1 token, full in 1 s

  // The pre-limit: each of two instances decides 5 / 2 = 2 tokens locally first.
  RedisOptions o = rltest::test_redis_options("reserveprelimit");
  o.pre_limit = true;
  o.fallback_divisor = 2;
  RedisStorage local(o);
  ratelimit::TokenBucket<ManualClock, RedisStorage> pre({5, ratelimit::per_second(5)}, local,
                                                        clock);
  CHECK(pre.try_acquire("k", 2));
  CHECK_FALSE(pre.try_acquire("k"));  // the per-instance limit's denial
  CHECK(local.stats().pre_limited == 1);
  // Redis holds 3 of 5: 1 more is granted at once, leaving T = 2, full in 3 x 200 ms.
  CHECK(pre.reserve("k", 1).decision == admitted(5, 2, 600ms));
  CHECK(local.stats().pre_limited == 1);
}

TEST_CASE("The pre-limit decides a rule set's parts all or nothing",
          "[redis][hot_keys][pre_limit]") {
  RedisOptions o = rltest::test_redis_options("prelimitall");
  o.pre_limit = true;
  RedisStorage storage(o);
  using ratelimit::FixedWindowModel;
  const auto shared = FixedWindowModel::from_rate(ratelimit::per_minute(10));
  // Explicit per-instance limits: 2 for "a", 5 for "b" (shared: 10 each).
  auto a = storage.bind<FixedWindowModel>("a", shared,
                                          FixedWindowModel::from_rate(ratelimit::per_minute(2)));
  auto b = storage.bind<FixedWindowModel>("b", shared,
                                          FixedWindowModel::from_rate(ratelimit::per_minute(5)));
  const Operation one{1, false, Decision::never};
  const std::vector<RedisStorage::Part> parts{a.part("k", one), b.part("k", one)};
  std::vector<Decision> out(2);
  CHECK(storage.decide_all(parts, 0ns, out));
  CHECK(storage.decide_all(parts, 0ns, out));
  CHECK_FALSE(storage.decide_all(parts, 0ns, out));  // "a" has spent its local 2
  CHECK(storage.stats().pre_limited == 1);
  CHECK(storage.stats().decisions == 4);  // 2 requests x 2 parts; the third never sent
  CHECK(out[0].limit == 2);               // the per-instance decisions
  CHECK(out[0].remaining == 0);
  CHECK(out[1].limit == 5);
  CHECK(out[1].remaining == 3);  // 5 - 2: "b" spent nothing for the denied request
  // Redis holds 2 per part: 10 - 2 = 8 left in each (seen without a pre-limit: through this
  // storage a peek would get the per-instance answer).
  RedisOptions same = rltest::test_redis_options("unused");
  same.key_prefix = o.key_prefix;
  RedisStorage elsewhere(same);
  const Operation peek{1, true, Decision::never};
  CHECK(elsewhere.bind<FixedWindowModel>("a", shared).apply("k", 0ns, peek).remaining == 8);
  CHECK(elsewhere.bind<FixedWindowModel>("b", shared).apply("k", 0ns, peek).remaining == 8);
}

TEST_CASE("A dry run never waits on the cache, and its answer refreshes the key's entry",
          "[redis][hot_keys]") {
  ManualClock clock;
  RedisStorage cached(cache_options("peek"));
  // Capacity 2 at 2 per second: both tokens back 1 s after they were spent.
  ratelimit::TokenBucket<ManualClock, RedisStorage> tb({2, ratelimit::per_second(2)}, cached,
                                                       clock);
  CHECK(tb.try_acquire("k"));
  CHECK(tb.try_acquire("k"));
  CHECK(cached.stats().cache_entries == 1);  // empty: remembered
  clock.advance(10s);                        // long refilled: the entry would admit
  // A peek asks Redis (no waiting for a probe), and its answer, full, ends the entry.
  CHECK(tb.peek("k").remaining == 2);
  CHECK(cached.stats().cache_entries == 0);
  CHECK(cached.stats().cache_hits == 0);
}

TEST_CASE("A request that waited for its key's probe completes on the I/O thread",
          "[redis][hot_keys]") {
  // A blocking caller's request is the key's probe while Redis is paused; a non-blocking
  // request for the key waits for it. Its completion must run on the storage's I/O thread,
  // never inside the blocking caller's call.
  rltest::ThrowawayRedis server;
  RedisOptions o = cache_options("thread");
  o.host = server.endpoint().host;
  o.port = server.endpoint().port;
  RedisStorage cached(o);
  ManualClock clock;
  // Capacity 1 at 1 per second: spent at 0, back at 1 s.
  ratelimit::TokenBucket<ManualClock, RedisStorage> tb({1, ratelimit::per_second(1)}, cached,
                                                       clock);
  CHECK(tb.try_acquire("k"));
  CHECK(cached.stats().cache_entries == 1);
  clock.advance(2s);  // the entry would admit: the next request is the probe
  server.pause();
  // (Assertions only on this thread: Catch2 is not thread-safe.)
  std::thread::id blocking_thread;
  bool probe_admitted = false;
  std::thread blocking([&] {
    blocking_thread = std::this_thread::get_id();
    probe_admitted = tb.try_acquire("k").allowed;  // the probe: Redis answers once resumed
  });
  const bool sent = rltest::poll_until([&] { return cached.stats().in_flight == 1; }, 10s);
  std::promise<std::pair<std::thread::id, bool>> ran;
  tb.try_acquire_async("k", 1, [&](Decision d) {
    ran.set_value({std::this_thread::get_id(), d.allowed});
  });
  server.resume();
  blocking.join();
  REQUIRE(sent);
  const auto [id, waiter_admitted] = ran.get_future().get();
  CHECK(probe_admitted);
  CHECK_FALSE(waiter_admitted);  // the probe spent the token: denied, from the probe's answer
  CHECK(id != blocking_thread);
  CHECK(id != std::this_thread::get_id());
}

TEST_CASE("The pre-limit never decides for a failed Redis, and skips parts it cannot tell apart",
          "[redis][hot_keys][pre_limit]") {
  using ratelimit::FixedWindowModel;
  const auto three = FixedWindowModel::from_rate(ratelimit::per_minute(3));
  const Operation one{1, false, Decision::never};
  SECTION("fail_open, Redis down: degraded admissions, none spent or denied locally") {
    RedisOptions o = rltest::test_redis_options("prefail");
    o.port = rltest::free_loopback_port();  // nobody listens
    o.pre_limit = true;
    o.failure_policy = ratelimit::FailurePolicy::fail_open;
    o.command_timeout = 50ms;
    o.connect_timeout = 50ms;
    RedisStorage down(o);
    auto b = down.bind<FixedWindowModel>("a", three);
    const std::vector<RedisStorage::Part> parts{b.part("k", one)};
    std::vector<Decision> out(1);
    for (int i = 0; i < 5; ++i) {  // 5 > the local 3: every one still fail_open's admission
      CHECK(down.decide_all(parts, 0ns, out));
      CHECK(out[0].degraded);
    }
    CHECK(down.stats().pre_limited == 0);
  }
  SECTION("one limiter and key under two tags: two Redis counters, one local one") {
    RedisOptions o = rltest::test_redis_options("pretags");
    o.pre_limit = true;
    RedisStorage storage(o);
    auto b = storage.bind<FixedWindowModel>("a", three);
    const auto copy = b;
    const std::vector<RedisStorage::Part> parts{b.part("k", one, "t1"), copy.part("k", one, "t2")};
    std::vector<Decision> out(2);
    CHECK(storage.decide_all(parts, 0ns, out));  // decided by Redis, pre-limit skipped
    CHECK(storage.stats().decisions == 2);
  }
}

namespace hot_keys_priority_test {

/// A random priority, each a third of the time.
ratelimit::Priority random_priority(std::mt19937_64& rng) {
  return static_cast<ratelimit::Priority>(rng() % 3);
}

}  // namespace hot_keys_priority_test

TEST_CASE("With priorities the over-limit cache decides exactly as Redis, every algorithm",
          "[redis][hot_keys][priority]") {
  rltest::for_each_algorithm([]<class Algo>() {
    if constexpr (ratelimit::Algorithms::contains<typename Algo::Model>) {
      INFO("algorithm: " << Algo::name);
      // 10 per second; reserves normal 0.1 (1 unit), sheddable 0.4 (4 units).
      const Shape shape{10, ratelimit::per_second(10)};
      ManualClock clock;
      RedisStorage plain(rltest::test_redis_options("prionocache")),
          cached(cache_options("priocache"));
      auto a = Algo::make(shape, plain, clock), b = Algo::make(shape, cached, clock);
      a.set_reserves({0.1, 0.4});
      b.set_reserves({0.1, 0.4});
      std::mt19937_64 rng(18);
      constexpr int steps = 600;
      for (int i = 0; i < steps; ++i) {
        clock.advance(std::chrono::milliseconds(rng() % 60));  // 0..59 ms: 0..0.6 refills
        const auto p = hot_keys_priority_test::random_priority(rng);
        const Step s = random_step(rng, shape.limit);
        INFO("step " << i << " at " << clock.now().count() << " ns, priority "
                     << static_cast<int>(p) << ", cost " << s.cost << (s.peek ? " (peek)" : ""));
        const Decision without = s.peek ? a.peek("k", p) : a.try_acquire("k", s.cost, p);
        const Decision with = s.peek ? b.peek("k", p) : b.try_acquire("k", s.cost, p);
        REQUIRE(with == without);
      }
      const auto st = cached.stats();
      CHECK(st.degraded_decisions == 0);
      if constexpr (ratelimit::StateWire<typename Algo::Model>) CHECK(st.cache_hits > 0);
    }
  });
}

TEST_CASE("A cached denial of a sheddable request never denies a critical one",
          "[redis][hot_keys][priority]") {
  ManualClock clock;
  RedisStorage cached(cache_options("shedcache"));
  // Capacity 10, refilled at 1 per hour: nothing refills while this runs. Sheddable keeps
  // R = ceil(10 x 0.4) = 4 tokens back, so it gets 10 - 4 = 6.
  ratelimit::TokenBucket<ManualClock, RedisStorage> tb(
      {10, ratelimit::Rate{1, std::chrono::hours{1}}}, cached, clock);
  tb.set_reserves({0.1, 0.4});
  for (int i = 0; i < 6; ++i) CHECK(tb.try_acquire("k", 1, ratelimit::Priority::sheddable));
  // 4 left: the sixth admission's state denies the next sheddable request, so it is cached.
  CHECK(cached.stats().cache_entries == 1);
  CHECK_FALSE(tb.try_acquire("k", 1, ratelimit::Priority::sheddable));
  CHECK(cached.stats().cache_hits == 1);  // answered here
  // The critical requests are decided with their own limit (10) on the cached state: 4 left,
  // so all four are admitted (by Redis), and only then is the critical one denied.
  for (int i = 0; i < 4; ++i) CHECK(tb.try_acquire("k", 1, ratelimit::Priority::critical));
  CHECK_FALSE(tb.try_acquire("k", 1, ratelimit::Priority::critical));
  CHECK(cached.stats().decisions == 6 + 4);  // the critical denial came from the cache too
  CHECK(cached.stats().cache_hits == 2);
}
