// Leased token buckets (redis/lease/bucket.hpp, docs/far.md): a lease debits g = min(L,
// tokens held) from the shared bucket at once, is spent locally for at most H, and gives back
// its u unused tokens decayed: min(u, (g - r x age)+), the refill since it was taken off. Over any
// interval of length D the instances spend at most C + r (D + H). Time is passed to each decision
// (ManualClock time: no sleeps); Redis is the shared test server, or one of the test's own where
// the test counts its commands or stops it.
//
// Most tests use C = 100 tokens refilled at 100 per second: a token every 10 ms, period
// 10^7 ns with count 1, so a deficit in the script's unit (1/count ns) is plain ns and the
// bucket holds 100 - D / 10^7 tokens; with H = 500 ms, r H = 50 tokens.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis/lease/storage.hpp>

#include "redis/redis_admin.hpp"
#include "support/redis_backend.hpp"

namespace {

using namespace std::chrono_literals;
using ratelimit::LeasedStorage;
using ratelimit::Operation;
using ratelimit::TokenBucketModel;

ratelimit::LeaseOptions bucket_options(const std::string& prefix, std::chrono::milliseconds h) {
  ratelimit::LeaseOptions o;
  o.redis = rltest::test_redis_options("lease");
  o.redis.key_prefix = prefix;
  o.redis.ttl_margin = 10min;  // ManualClock time: keys must outlive real time
  o.lease_duration = h;
  return o;
}

ratelimit::LeaseOptions options_on(const rltest::RedisEndpoint& e, std::chrono::milliseconds h) {
  ratelimit::LeaseOptions o;
  o.redis.host = e.host;
  o.redis.port = e.port;
  o.redis.key_prefix = rltest::unique_prefix("lbucket");
  o.redis.ttl_margin = 10min;
  o.redis.connect_timeout = 1s;
  o.redis.command_timeout = 1s;
  o.lease_duration = h;
  return o;
}

/// A bucket of `capacity` tokens refilled at `count` per second.
ratelimit::detail::GcraParams bucket(std::int64_t capacity, std::int64_t count) {
  return TokenBucketModel::make_params({capacity, ratelimit::per_second(count)});
}

std::chrono::nanoseconds at(std::chrono::nanoseconds t) { return t; }

/// Calls of the scripts (EVAL and EVALSHA) Redis ran, from INFO commandstats.
std::int64_t script_calls(rltest::RedisAdmin& admin) {
  auto reply = admin.run({"INFO", "commandstats"});
  REQUIRE(reply->type == REDIS_REPLY_STRING);
  const std::string text(reply->str, reply->len);
  std::int64_t calls = 0;
  for (const std::string name : {"cmdstat_eval:", "cmdstat_evalsha:"}) {
    const auto p = text.find(name);
    if (p == std::string::npos) continue;
    const auto c = text.find("calls=", p);
    calls += std::stoll(text.substr(c + 6));
  }
  return calls;
}

}  // namespace

TEST_CASE("A leased bucket's miss costs one round trip, counted by Redis",
          "[far][lease][bucket][redis]") {
  rltest::ThrowawayRedis server;
  rltest::RedisAdmin admin(server.endpoint());
  LeasedStorage s(options_on(server.endpoint(), 100ms));
  auto b = s.bind<TokenBucketModel>("api", bucket(100, 100), 10);
  const auto before = script_calls(admin);
  for (int i = 0; i < 25; ++i) REQUIRE(b.apply("k", 1ms, Operation{1}).allowed);
  // Decisions 1, 11 and 21 find no token left and lease 10 each (the bucket holds 100, then
  // 90, then 80): three script calls; the other 22 spend locally.
  CHECK(script_calls(admin) - before == 3);
  CHECK(s.stats().round_trips == 3);
  CHECK(s.stats().local == 22);
  CHECK(s.stats().units_leased == 30);
  // At 101 ms the lease (taken at 1 ms) is H = 100 ms old: one call gives back its 5 unused
  // tokens and takes the next lease.
  REQUIRE(b.apply("k", 101ms, Operation{1}).allowed);
  CHECK(script_calls(admin) - before == 4);
  CHECK(s.stats().units_returned == 5);
}

TEST_CASE("A leased bucket over-admits r H, reached to within the unit a lease spends first",
          "[far][lease][bucket][redis]") {
  const auto prefix = rltest::unique_prefix("lbucket");
  LeasedStorage a_store(bucket_options(prefix, 500ms)), b_store(bucket_options(prefix, 500ms));
  auto a = a_store.bind<TokenBucketModel>("api", bucket(100, 100), 100);
  auto b = b_store.bind<TokenBucketModel>("api", bucket(100, 100), 100);
  // t = 0: a leases all 100 (the bucket is full) and spends 1. The bucket holds 0.
  REQUIRE(a.apply("k", 0ms, Operation{1}).allowed);
  // t1 = H - 1 ns: the lease is still younger than H; a spends its 99 at once.
  const auto t1 = at(500ms - 1ns);
  REQUIRE(a.apply("k", t1, Operation{99}).allowed);
  // t2 = 1 s: the bucket refilled 100 x 1 s = 100 tokens since 0 (capped at C = 100): b
  // leases and spends all 100.
  const auto t2 = at(1s);
  const auto d = b.apply("k", t2, Operation{100});
  REQUIRE(d.allowed);
  CHECK(d.remaining == 0);
  // In [t1, t2], D = 500 ms + 1 ns: 99 + 100 = 199 spent. The bound C + r (D + H) =
  // 100 + 100 x 1.000000001 s = 200.0000001: reached to within the one unit a spent at 0. One
  // exact bucket admits at most C + r D = 150.0000001 in such an interval: 49 = r H - 1 more.
  // Nothing more at t2: the bucket holds 0 and b's lease is spent.
  CHECK_FALSE(b.apply("k", t2, Operation{1}).allowed);
  CHECK_FALSE(a.apply("k", t2, Operation{1}).allowed);
}

TEST_CASE("A give-back credits only what the bucket did not refill while the lease held it",
          "[far][lease][bucket][redis]") {
  // Fault pinned: a give-back credited all unused tokens, capped at C only. The bucket had
  // refilled through the debited tokens while they were held and another lease took that
  // refill; credited again, the same tokens were spent twice. The schedule below then spent
  // 195 at one instant, past C + r H = 150 (derivation of that figure at each step, "capped
  // only"). Decayed, the credit keeps it at 146.
  const auto prefix = rltest::unique_prefix("lbucket");
  std::vector<LeasedStorage> stores;
  for (int i = 0; i < 3; ++i) stores.emplace_back(bucket_options(prefix, 500ms));
  auto a = stores[0].bind<TokenBucketModel>("api", bucket(100, 100), 100);
  auto b = stores[1].bind<TokenBucketModel>("api", bucket(100, 100), 100);
  auto e = stores[2].bind<TokenBucketModel>("api", bucket(100, 100), 100);
  // t = 0: a leases 100, spends 1, holds 99. Deficit 100 tokens.
  REQUIRE(a.apply("k", 0ms, Operation{1}).allowed);
  // t = 490 ms: refilled 49; b leases min(100, 49) = 49, spends 1, holds 48. Deficit 100.
  REQUIRE(b.apply("k", 490ms, Operation{1}).allowed);
  CHECK(stores[1].stats().units_leased == 49);
  // t = 500 ms: a's lease is H old. Its 99 unused go back decayed: min(99, 100 - r x 500 ms =
  // 50) = 50. Deficit 100 - 1 (refill since 490) - 50 = 49, so a leases min(100, 51) = 51,
  // spends 1, holds 50. (Capped only: deficit max(0, 99 - 99) = 0, a leases 100, holds 99.)
  const auto d = a.apply("k", 500ms, Operation{1});
  REQUIRE(d.allowed);
  CHECK(stores[0].stats().units_leased == 100 + 51);
  CHECK(d.remaining == 50);  // its 50 held, the bucket's 0
  // t = 989 ms: refilled 48.9 since 500 (deficit 100 - 48.9 = 51.1), so the bucket holds 48:
  // e leases 48 and spends 1.
  REQUIRE(e.apply("k", 989ms, Operation{1}).allowed);
  CHECK(stores[2].stats().units_leased == 48);
  // Every instance spends what it holds: b's lease is 499 ms old, a's 489 ms.
  REQUIRE(b.apply("k", 989ms, Operation{48}).allowed);
  REQUIRE(a.apply("k", 989ms, Operation{50}).allowed);
  REQUIRE(e.apply("k", 989ms, Operation{47}).allowed);
  // 48 + 50 + 48 = 146 at one instant (D = 0): at most C + r H = 150. (Capped only: 48 + 99 +
  // 48 = 195.) The bucket holds 0 now (deficit 51.1 + 48 = 99.1).
  CHECK_FALSE(e.apply("k", 989ms, Operation{1}).allowed);
}

TEST_CASE("Random traffic over three leasing instances never spends more than C + r (D + H)",
          "[far][lease][bucket][redis]") {
  // C = 20, r = 100 per second (a token every 10^7 ns), H = 300 ms (r H = 30), L = 10: the
  // bound in ns and tokens is spent x 10^7 <= 20 x 10^7 + (D + H), D in ns. Bursts and pauses
  // (the bucket refills in 200 ms), so that leases sit idle while it refills, then are spent.
  const auto prefix = rltest::unique_prefix("lbucket");
  std::vector<LeasedStorage> stores;
  std::vector<ratelimit::LeasedBinding<TokenBucketModel>> b;
  for (int i = 0; i < 3; ++i) stores.emplace_back(bucket_options(prefix, 300ms));
  for (auto& s : stores) b.push_back(s.bind<TokenBucketModel>("api", bucket(20, 100), 10));
  std::mt19937 rng(5);
  std::vector<std::pair<std::int64_t, std::int64_t>> spent;  // (t ns, tokens)
  std::int64_t t_ms = 0;
  for (int i = 0; i < 2000; ++i) {
    t_ms += static_cast<std::int64_t>(rng() % 4 == 0 ? rng() % 300 : rng() % 4);
    const auto now = std::chrono::nanoseconds{t_ms * 1'000'000};
    if (rng() % 40 == 0) (void)b[rng() % 3].flush(now);
    const auto cost = static_cast<std::int64_t>(1 + rng() % 3);
    if (b[rng() % 3].apply("k", now, Operation{cost}).allowed)
      spent.emplace_back(now.count(), cost);
  }
  REQUIRE(spent.size() > 100);
  constexpr std::int64_t period = 10'000'000, H = 300'000'000, C = 20;
  std::int64_t worst = 0;  // the most spent beyond one exact bucket's C + r D, x period
  for (std::size_t i = 0; i < spent.size(); ++i) {
    std::int64_t sum = 0;
    for (std::size_t j = i; j < spent.size(); ++j) {
      sum += spent[j].second;
      const std::int64_t d = spent[j].first - spent[i].first;
      REQUIRE(sum * period <= C * period + d + H);
      worst = std::max(worst, sum * period - C * period - d);
    }
  }
  // Some interval went past one exact bucket (the leases' over-admission was exercised), by
  // at most r H = 30 tokens (checked above, interval by interval).
  CAPTURE(worst, spent.size());
  CHECK(worst > 0);
}

TEST_CASE("A leased bucket's give-back never fills it past C", "[far][lease][bucket][redis]") {
  // C = 20, r = 10 per second (a token every 10^8 ns), H = 100 ms, L = 10.
  const auto prefix = rltest::unique_prefix("lbucket");
  LeasedStorage a_store(bucket_options(prefix, 100ms)), b_store(bucket_options(prefix, 100ms));
  auto a = a_store.bind<TokenBucketModel>("api", bucket(20, 10), 10);
  auto b = b_store.bind<TokenBucketModel>("api", bucket(20, 10), 10);
  REQUIRE(a.apply("k", 0ms, Operation{1}).allowed);  // a holds 9 of the 10 leased
  // The shared bucket's state is lost (a restart without persistence): it reads full again.
  rltest::RedisAdmin admin(rltest::redis_endpoint());
  for (const auto& key : admin.scan(prefix + "*")) admin.run({"DEL", key});
  // At H a's 9 unused go back decayed: min(9, 10 - r H = 9) = 9, onto a bucket already full.
  CHECK(a.flush(100ms) == 9);
  // The bucket holds C = 20, not 29: b spends 20, then nothing.
  const auto d = b.apply("k", 100ms, Operation{20});
  REQUIRE(d.allowed);
  const auto no = b.apply("k", 100ms, Operation{1});
  CHECK_FALSE(no.allowed);
  CHECK(no.retry_after == 100ms);  // one token, refilled in 10^8 ns
}

TEST_CASE("A flush gives back unused tokens less the refill since the lease",
          "[far][lease][bucket][redis]") {
  const auto prefix = rltest::unique_prefix("lbucket");
  LeasedStorage a_store(bucket_options(prefix, 100ms)), b_store(bucket_options(prefix, 100ms));
  // C = 100, L = 10, H = 100 ms, refilled at 10, 50 and 100 per second (a token every 10^8,
  // 2 x 10^7 and 10^7 ns: r H = 1, 5 and 10). Each lease takes 10 at 0 and spends 1.
  auto slow = a_store.bind<TokenBucketModel>("slow", bucket(100, 10), 10);
  auto mid = a_store.bind<TokenBucketModel>("mid", bucket(100, 50), 10);
  auto fast = a_store.bind<TokenBucketModel>("fast", bucket(100, 100), 10);
  for (auto* b : {&slow, &mid, &fast}) REQUIRE(b->apply("k", 0ms, Operation{1}).allowed);
  CHECK(slow.flush(50ms) == 0);  // younger than H: kept
  // At 100 ms, 9 unused, credit min(9, 10 - r H): 9, 5, and 0 (no round trip).
  CHECK(slow.flush(100ms) == 9);
  CHECK(mid.flush(100ms) == 5);
  const auto trips = a_store.stats().round_trips;
  CHECK(fast.flush(100ms) == 0);
  CHECK(a_store.stats().round_trips == trips);
  // The slow bucket: deficit 10 - 1 (refilled) - 9 (credited) = 0, full as one exact bucket
  // that spent 1 at 0 would be: another instance spends all 100.
  auto other = b_store.bind<TokenBucketModel>("slow", bucket(100, 10), 10);
  CHECK(other.apply("k", 100ms, Operation{100}).allowed);
  const auto no = other.apply("k", 100ms, Operation{1});
  CHECK_FALSE(no.allowed);
  CHECK(no.retry_after == 100ms);  // one token, 10^8 ns
}

TEST_CASE(
    "A leased bucket spends held tokens while Redis is down, and misses follow the "
    "failure policy",
    "[far][lease][bucket][redis]") {
  rltest::ThrowawayRedis server;
  auto closed_options = options_on(server.endpoint(), 100ms);
  closed_options.redis.failure_policy = ratelimit::FailurePolicy::fail_closed;
  auto open_options = options_on(server.endpoint(), 100ms);
  open_options.redis.failure_policy = ratelimit::FailurePolicy::fail_open;
  LeasedStorage closed(closed_options), open(open_options);
  auto c = closed.bind<TokenBucketModel>("api", bucket(100, 100), 10);
  auto o = open.bind<TokenBucketModel>("api", bucket(100, 100), 10);
  REQUIRE(c.apply("k", 0ms, Operation{1}).allowed);  // c holds 9
  server.kill();
  // The 9 were debited before Redis went away: spent locally, not degraded.
  const auto held = c.apply("k", 1ms, Operation{9});
  CHECK(held.allowed);
  CHECK_FALSE(held.degraded);
  // A miss needs Redis: fail_closed denies (retry after 1 ms), fail_open admits; both say so.
  const auto denied = c.apply("k", 1ms, Operation{1});
  CHECK_FALSE(denied.allowed);
  CHECK(denied.degraded);
  CHECK(denied.retry_after == 1ms);
  const auto admitted = o.apply("k", 1ms, Operation{1});
  CHECK(admitted.allowed);
  CHECK(admitted.degraded);
  // More than C never fits, whatever the policy.
  const auto never = o.apply("k", 1ms, Operation{101});
  CHECK_FALSE(never.allowed);
  CHECK(never.retry_after == ratelimit::Decision::never);
  CHECK(closed.stats().degraded == 1);
  CHECK(open.stats().degraded == 2);
}

TEST_CASE("A token bucket limiter runs on a LeasedStorage with a ManualClock",
          "[far][lease][bucket][redis]") {
  LeasedStorage s(bucket_options(rltest::unique_prefix("lbucket"), 500ms));
  ratelimit::ManualClock clock;
  // C = 10 refilled at 10 per second, leases of 10 / lease_divisor (10) = 1 token.
  ratelimit::TokenBucket<ratelimit::ManualClock, LeasedStorage> limiter(
      {10, ratelimit::per_second(10)}, s, clock, "api");
  int admitted = 0;
  for (int i = 0; i < 15; ++i) admitted += limiter.try_acquire("k").allowed ? 1 : 0;
  CHECK(admitted == 10);  // the bucket's 10, one lease each
  clock.advance(100ms);   // one token refilled
  CHECK(limiter.try_acquire("k").allowed);
  CHECK_FALSE(limiter.try_acquire("k").allowed);
}

TEST_CASE("A leased bucket refuses parameters its script cannot hold exactly",
          "[far][lease][bucket][redis]") {
  LeasedStorage s(bucket_options(rltest::unique_prefix("lbucket"), 500ms));
  // 10^9 tokens at 1 per second: limit x period = 10^9 x 10^9 = 10^18 > 2^52.
  CHECK_THROWS_WITH(s.bind<TokenBucketModel>("api", bucket(1'000'000'000, 1)),
                    Catch::Contains("params.limit") && Catch::Contains("2^52"));
  CHECK_THROWS_WITH(s.bind<TokenBucketModel>("api", bucket(100, 100), 0),
                    Catch::Contains("lease_units"));
  CHECK_THROWS_AS(s.bind<TokenBucketModel>("api", bucket(100, 100), 101), std::invalid_argument);
}
