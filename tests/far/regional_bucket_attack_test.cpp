// Attacks on the regional token and leaky buckets (redis/regional/bucket.hpp, docs/far.md): the
// claimed bound is that over any interval of length D all R regions together admit at most
// C + r D + (R - 1) U. Each case is a schedule that once broke it (or a hostile input), on one
// redis-server per region (regions.hpp). Time is the ManualClock's (nanoseconds passed to
// apply); exchanges are explicit steps, their two halves split where the attack needs it.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis/regional/exchanger.hpp>
#include <ratelimit/redis/regional/storage.hpp>

#include "far/regional_buckets.hpp"
#include "far/regions.hpp"

namespace {

using namespace std::chrono_literals;
using ratelimit::LeakyBucketModel;
using ratelimit::RegionalStorage;
using ratelimit::TokenBucketModel;

using rltest::bucket;
using rltest::spend;
using rltest::storages;

// regions.hpp's timeouts: a link's connect 2 s + command 0.3 s, the local connect 2 s +
// command 5 s, so a claim older than 9 300 ms (of the callers' clock) counts as lost and is
// claimed again.
constexpr auto claim_expiry = 9300ms;

}  // namespace

TEMPLATE_TEST_CASE(
    "A claim taken again while its first round is still under way is acknowledged once, not "
    "credited twice",
    "[far][redis][bucket][attack]", TokenBucketModel, LeakyBucketModel) {
  // Fault pinned: a round whose claim is older than the claim expiry (another instance of the
  // region, a clock ahead, a process paused between claim and push) has its units claimed
  // again by a second round. Both rounds push (r1 counts the 5 units twice: it only denies
  // more, as documented) but both also acknowledged them, so r0's s:r1 said 10 of its 5 units
  // were seen. Those 5 phantom acknowledgements let r0 later admit U + 5 units r1 never
  // debits. With C = 10, r = 10 per s (100 ms a unit), U = 5, R = 2, the bound at one instant
  // (D = 0) is C + (R - 1) U = 15.
  rltest::Regions regions(2);
  auto s = storages(regions);
  constexpr std::int64_t C = 10, U = 5;
  auto a = s[0].bind<TestType>("api", bucket(C, 10), U);
  auto b = s[1].bind<TestType>("api", bucket(C, 10), U);
  REQUIRE(a.apply("k", 0ms, spend(5)).allowed);           // r0: 5 unseen (= U)
  auto first = s[0].begin_exchange(0ms);                  // claims the 5, stamped 0 ms
  auto second = s[0].begin_exchange(claim_expiry + 1ms);  // 9 301 > 9 300: claimed again
  REQUIRE(first.hashes() == 1);
  REQUIRE(second.hashes() == 1);
  CHECK(s[0].finish_exchange(std::move(first)).units_pushed == 5);
  CHECK(s[0].finish_exchange(std::move(second)).units_pushed == 5);
  // r1 debited each push at its claim's time: 5 at 0 ms (refilled by 500 ms) and 5 at
  // 9 301 ms, so at 9 301 ms it holds C - 5 = 5 (a peek spends nothing).
  CHECK(b.apply("k", claim_expiry + 1ms, ratelimit::Operation{1, true}).remaining == C - 5);
  // At 100 s every bucket is full again. r0 admits one unit at a time before any exchange:
  // its 5 units were acknowledged once, so it may admit U = 5 unseen, then the unseen bound
  // denies (faulty: 10, up to its bucket, on 5 phantom acknowledgements).
  const auto t = 100s;
  std::int64_t r0 = 0, r1 = 0;
  for (int i = 0; i < 12; ++i) r0 += a.apply("k", t, spend()).allowed ? 1 : 0;
  CHECK(r0 == U);
  // r1 admits its U unseen, exchanges (r0 debits them later, not now), and U more: its bucket
  // of 10, having debited nothing new from r0 (r0 has not pushed its units of 100 s).
  for (int i = 0; i < 7; ++i) r1 += b.apply("k", t, spend()).allowed ? 1 : 0;
  REQUIRE(s[1].exchange(t).units_pushed == 5);
  for (int i = 0; i < 7; ++i) r1 += b.apply("k", t, spend()).allowed ? 1 : 0;
  CHECK(r1 == C);
  // All regions at the instant 100 s: at most C + (R - 1) U = 10 + 5 = 15.
  CHECK(r0 + r1 <= C + U);
}

TEMPLATE_TEST_CASE(
    "A claim lost with its round is claimed again after the claim expiry even while newer "
    "claims keep coming",
    "[far][redis][bucket][attack]", TokenBucketModel, LeakyBucketModel) {
  // Fault pinned: every round that claimed new units restamped the region's claim, so a claim
  // lost with its round (its reply timed out after the script ran) never looked older than
  // the expiry while the key had traffic: its units stayed unseen for good, and a client in
  // one region was held to U minus them. C = 10, r = 10 per s (100 ms a unit), S = 100 ms,
  // d = 50 ms: the default U = C + ceil(r (S + 2d)) = 10 + 2 = 12.
  rltest::Regions regions(2);
  auto s = storages(regions, 100ms, 50ms);
  auto a = s[0].bind<TestType>("api", bucket(10, 10));
  REQUIRE(a.unseen_limit() == 12);
  REQUIRE(a.apply("k", 0ms, spend(10)).allowed);  // full again at 1 s
  {
    auto lost = s[0].begin_exchange(0ms);  // claims the 10; never finished: its reply was lost
    REQUIRE(lost.hashes() == 1);
  }
  // One unit every 200 ms up to 20 s (the refill is 2 per 200 ms: from 1.8 s on the bucket is
  // full before each one), each followed by a round: unseen is at most 10 + 1 = 11 <= 12, so
  // every one is admitted. A round after 9 300 ms (the expiry) claims the lost 10 again.
  for (std::int64_t t = 200; t <= 20000; t += 200) {  // ms
    const auto now = std::chrono::nanoseconds{t * 1'000'000};
    REQUIRE(a.apply("k", now, spend()).allowed);
    (void)s[0].exchange(now);
  }
  // At 21 s the bucket is full (the last unit, at 20 s, refilled at 20.1 s) and nothing is
  // unseen: the client gets its whole bucket, 10 (faulty: 12 - 10 lost = 2, then unseen
  // denials).
  std::int64_t admitted = 0;
  for (int i = 0; i < 12; ++i) admitted += a.apply("k", 21s, spend()).allowed ? 1 : 0;
  CHECK(admitted == 10);
  CHECK(s[0].stats().unseen_denials == 0);
}

TEMPLATE_TEST_CASE(
    "Random costs, peeks, rounds split, finished late, out of order or lost, jumps past the "
    "claim expiry and clocks apart or stepping back never admit more than C + r D + (R - 1) U "
    "in any interval",
    "[far][redis][bucket][attack]", TokenBucketModel, LeakyBucketModel) {
  // C = 10, r = 10 per s (100 ms a unit), U = 4, R = 3: in any [a, b] of length D (ms) the
  // admitted units are at most 10 + D / 100 + 2 x 4, i.e. units x 100 <= 1800 + D. Rounds are
  // begun and left pending, finished in any order, or dropped (a lost claim), and time now and
  // then jumps 9.4 s (past the 9 300 ms claim expiry) so that lost and pending claims are
  // claimed again while older rounds are still to finish. Each region reads its own clock:
  // r1 `skew` ms ahead, r2 `skew` ms behind, and r2's steps back 2 s halfway; the bound is
  // checked on the true time line. A push dates the units it debits at its claim, on the
  // pushing region's clock: r2, behind, sees the others' units ahead of its own time and
  // denies more (dating late never gives more tokens), which is why fewer are admitted with
  // the skew; a clock behind dates its own pushes early, by at most the skew (r x skew more
  // tokens elsewhere, docs/far.md), which the random schedule does not reach here.
  rltest::Regions regions(3);
  auto s = storages(regions);
  constexpr std::int64_t C = 10, U = 4;
  std::vector<ratelimit::RegionalBucketBinding<TestType>> b;
  for (auto& r : s) b.push_back(r.template bind<TestType>("api", bucket(C, 10), U));
  std::vector<std::vector<ratelimit::ExchangeRound>> pending(3);
  const std::int64_t skew = GENERATE(0, 300);
  std::mt19937 rng(GENERATE(1u, 2u, 3u));
  std::vector<std::int64_t> offset{0, skew, -skew};             // ms each region's clock is ahead
  std::vector<std::pair<std::int64_t, std::int64_t>> admitted;  // (true ms, units), in order
  std::int64_t t_ms = 5000;
  for (int i = 0; i < 1200; ++i) {
    t_ms += static_cast<std::int64_t>(rng() % 30);
    if (rng() % 150 == 0) t_ms += 9400;
    if (i == 600) offset[2] -= 2000;
    const std::size_t r = rng() % 3;
    const auto now = std::chrono::nanoseconds{(t_ms + offset[r]) * 1'000'000};
    const unsigned what = rng() % 100;
    if (what < 60) {
      const std::int64_t cost = 1 + static_cast<std::int64_t>(rng() % 3);
      if (b[r].apply("k", now, spend(cost)).allowed) admitted.emplace_back(t_ms, cost);
    } else if (what < 68) {
      ratelimit::Operation look{1 + static_cast<std::int64_t>(rng() % 3), true};
      (void)b[r].apply("k", now, look);
    } else if (what < 80) {
      pending[r].push_back(s[r].begin_exchange(now));
    } else if (what < 92) {
      if (!pending[r].empty()) {
        const std::size_t k = rng() % pending[r].size();
        (void)s[r].finish_exchange(std::move(pending[r][k]));
        pending[r].erase(pending[r].begin() + static_cast<std::ptrdiff_t>(k));
      }
    } else if (what < 95) {
      if (!pending[r].empty()) pending[r].erase(pending[r].begin());  // lost with its reply
    } else {
      (void)s[r].exchange(now);
    }
  }
  REQUIRE(admitted.size() > 80);
  std::int64_t worst = 0;  // the most units of an interval above its C + r D, per 100 ms
  for (std::size_t i = 0; i < admitted.size(); ++i) {
    std::int64_t units = 0;
    for (std::size_t j = i; j < admitted.size(); ++j) {
      units += admitted[j].second;
      const std::int64_t d = admitted[j].first - admitted[i].first;
      worst = std::max(worst, units * 100 - (C * 100 + d));
      REQUIRE(units * 100 <= (C + 2 * U) * 100 + d);
    }
  }
  WARN("worst excess over C + r D: " << worst / 100.0 << " units (bound (R - 1) U = " << 2 * U
                                     << ")");
}

TEST_CASE(
    "Threads deciding in two regions while several exchangers per region race, one of them "
    "with a clock 10 s ahead, stay within C + (R - 1) U at one instant",
    "[far][redis][bucket][attack]") {
  // C = 50, r = 10 per s, U = 10, R = 2, every decision at t = 1 s (no refill): at most
  // C + (R - 1) U = 60 admitted. Three threads per region spend 1 or 2 units until their
  // bucket denies 200 times; two exchanger threads per region (two instances) run rounds,
  // one dated 10 s ahead (past the 9 300 ms claim expiry: it claims again what the other has
  // under way, and both acknowledge).
  rltest::Regions regions(2);
  auto s = storages(regions);
  constexpr std::int64_t C = 50, U = 10;
  std::vector<ratelimit::RegionalBucketBinding<TokenBucketModel>> b;
  for (auto& r : s) b.push_back(r.bind<TokenBucketModel>("api", bucket(C, 10), U));
  const auto t = 1s;
  std::atomic<std::int64_t> admitted{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> exchangers;
  for (std::size_t r = 0; r < 2; ++r)
    for (auto at : {t, t + 10s})
      exchangers.emplace_back([&, r, at] {
        while (!stop.load()) (void)s[r].exchange(at);
      });
  std::vector<std::thread> deciders;
  for (std::size_t r = 0; r < 2; ++r)
    for (unsigned k = 0; k < 3; ++k)
      deciders.emplace_back([&, r, k] {
        int denied = 0;
        for (std::int64_t i = 0; denied < 200; ++i) {
          const std::int64_t cost = 1 + (i + k) % 2;
          if (b[r].apply("k", t, spend(cost)).allowed)
            admitted += cost;
          else
            ++denied;
        }
      });
  for (auto& d : deciders) d.join();
  stop = true;
  for (auto& e : exchangers) e.join();
  CHECK(admitted.load() <= C + U);
  WARN("admitted " << admitted.load() << " of the bound C + U = " << C + U);
}

TEMPLATE_TEST_CASE(
    "A request costing more than U is told it can never pass, not to retry after the next "
    "exchange",
    "[far][redis][bucket][attack]", TokenBucketModel, LeakyBucketModel) {
  // Fault pinned: an unseen denial says retry after S (the next exchange), but a cost above U
  // fails the unseen bound (unseen + cost <= U) whatever the exchange does: a client that
  // obeys retry_after retried forever. C = 10, U = 3, cost 5 <= C: the bucket alone would
  // admit it; the answer is `never`, as for a cost above the limit. A cost of 3 = U passes.
  rltest::Regions regions(2);
  auto s = storages(regions);
  auto a = s[0].bind<TestType>("api", bucket(10, 10), 3);
  const auto d = a.apply("k", 0ms, spend(5));
  CHECK_FALSE(d.allowed);
  CHECK(d.degraded);
  CHECK(d.retry_after == ratelimit::Decision::never);
  CHECK(d.remaining == 10);  // nothing spent
  CHECK(a.apply("k", 0ms, spend(3)).allowed);
  // A cost that fits U but not the unseen units left waits for the exchange, as before.
  const auto later = a.apply("k", 0ms, spend(1));
  CHECK_FALSE(later.allowed);
  CHECK(later.retry_after == 100ms);  // S
}

TEST_CASE("Hostile input on a regional bucket: a huge key, a huge cost, more keys than a round",
          "[far][redis][bucket][attack]") {
  rltest::Regions regions(2);
  auto o0 = regions.options(0, 100ms, 40ms), o1 = regions.options(1, 100ms, 40ms);
  o0.exchange_batch = 5;  // a round pushes at most 5 hashes of the limiter
  RegionalStorage s0(o0), s1(o1);
  auto a = s0.bind<TokenBucketModel>("api", bucket(10, 10), 10);
  auto b = s1.bind<TokenBucketModel>("api", bucket(10, 10), 10);
  // A 10 000-byte key (named by its digest in Redis) is one hash in both regions: r1 debits
  // r0's 4 units: 10 - 4 = 6.
  const std::string huge(10000, 'x');
  REQUIRE(a.apply(huge, 0ms, spend(4)).allowed);
  REQUIRE(s0.exchange(0ms).units_pushed == 4);
  CHECK(b.apply(huge, 0ms, ratelimit::Operation{1, true}).remaining == 6);
  // The largest cost: denied by the bucket (more than C = 10), never to pass, nothing spent.
  const auto big = a.apply("c", 0ms, spend(std::numeric_limits<std::int64_t>::max()));
  CHECK_FALSE(big.allowed);
  CHECK(big.retry_after == ratelimit::Decision::never);
  CHECK(a.apply("c", 0ms, ratelimit::Operation{1, true}).remaining == 10);
  // 40 keys with a unit each: every round claims at most 5 hashes, and rounds push all 40
  // in the end (a random sample each round; 400 rounds leave none behind but with a
  // probability far below 10^-9).
  for (int k = 0; k < 40; ++k) REQUIRE(a.apply("f" + std::to_string(k), 0ms, spend()).allowed);
  std::uint64_t pushed = 0;
  for (int round = 0; round < 400 && pushed < 40; ++round) {
    auto claimed = s0.begin_exchange(0ms);
    CHECK(claimed.hashes() <= 5);
    pushed += s0.finish_exchange(std::move(claimed)).units_pushed;
  }
  CHECK(pushed == 40);
  for (int k = 0; k < 40; ++k)
    CHECK(b.apply("f" + std::to_string(k), 0ms, ratelimit::Operation{1, true}).remaining == 9);
}

TEST_CASE(
    "A region whose Redis is gone decides by its failure policy, and its exchange neither "
    "throws nor pushes",
    "[far][redis][bucket][attack]") {
  rltest::Regions regions(2);
  std::vector<RegionalStorage> s;
  for (auto policy : {ratelimit::FailurePolicy::fail_closed, ratelimit::FailurePolicy::fail_open,
                      ratelimit::FailurePolicy::local_fallback}) {
    auto o = regions.options(0, 100ms, 40ms);
    o.local.failure_policy = policy;
    o.local.fallback_divisor = 2;
    o.local.command_timeout = 300ms;
    o.local.connect_timeout = 300ms;
    s.emplace_back(o);
  }
  RegionalStorage r1(regions.options(1, 100ms, 40ms));
  std::vector<ratelimit::RegionalBucketBinding<TokenBucketModel>> b;
  for (auto& st : s) b.push_back(st.bind<TokenBucketModel>("api", bucket(10, 10), 10));
  auto other = r1.bind<TokenBucketModel>("api", bucket(10, 10), 10);
  REQUIRE(b[0].apply("k", 0ms, spend(2)).allowed);
  rltest::RedisAdmin admin0(regions.endpoint(0));
  try {
    (void)admin0.run({"SHUTDOWN", "NOSAVE"});  // r0's Redis is gone
  } catch (const std::exception&) {            // it exits without a reply
  }
  // fail_closed denies (retry in 1 ms), fail_open admits, local_fallback decides on its share
  // of the bucket: C / 2 = 5 at once, then none (r = 5 per s: 200 ms a unit).
  const auto closed = b[0].apply("k", 0ms, spend());
  CHECK_FALSE(closed.allowed);
  CHECK(closed.degraded);
  CHECK(b[1].apply("k", 0ms, spend()).allowed);
  std::int64_t fallback = 0;
  for (int i = 0; i < 8; ++i) fallback += b[2].apply("k", 0ms, spend()).allowed ? 1 : 0;
  CHECK(fallback == 5);
  CHECK(s[0].stats().degraded == 1);
  // The exchange cannot claim: it pushes nothing and throws nothing; r1 saw nothing of r0.
  CHECK(s[0].exchange(0ms).units_pushed == 0);
  CHECK(other.apply("k", 0ms, ratelimit::Operation{1, true}).remaining == 10);
}

TEST_CASE(
    "A background exchanger destroyed while its round waits on a black-holed link stops; the "
    "units are pushed once when the link heals",
    "[far][redis][bucket][attack]") {
  rltest::Regions regions(2);
  auto s = storages(regions, 20ms, 0ms);
  auto a = s[0].bind<TokenBucketModel>("api", bucket(10, 10), 10);
  auto b = s[1].bind<TokenBucketModel>("api", bucket(10, 10), 10);
  REQUIRE(a.apply("k", 0ms, spend(3)).allowed);
  regions.partition(0, true);
  {
    ratelimit::ManualClock clock;
    ratelimit::RegionalExchanger<ratelimit::ManualClock> exchanger(s[0], clock);
    // Wait (real time, no assertion on it) until a round has failed, then end the exchanger
    // while the next one is likely under way.
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (s[0].stats().push_failures == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(5ms);
    REQUIRE(s[0].stats().push_failures > 0);
  }
  regions.partition(0, false);
  // The black hole dropped every push; healed, a round pushes the 3 units once: 10 - 3 = 7.
  std::uint64_t pushed = 0;
  for (int i = 0; i < 200 && pushed < 3; ++i) pushed += s[0].exchange(0ms).units_pushed;
  CHECK(pushed == 3);
  CHECK(b.apply("k", 0ms, ratelimit::Operation{1, true}).remaining == 7);
}
