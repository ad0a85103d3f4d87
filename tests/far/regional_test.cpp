// Regional counters with background exchange (redis/regional/storage.hpp, docs/far.md), on one
// redis-server per region and a proxy per link between regions (regions.hpp). Time is the
// ManualClock's; exchanges are explicit steps at chosen times, so every bound is checked
// exactly: over-admission at most (R - 1) U per window, a one-region client reaching its full
// limit when U >= N (S + 2d) / W, and a partition.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/lua/regional_exchange.hpp>
#include <ratelimit/metrics.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis/regional/exchanger.hpp>
#include <ratelimit/redis/regional/storage.hpp>

#include "far/regions.hpp"
#include "redis/redis_admin.hpp"

namespace {

using namespace std::chrono_literals;
using ratelimit::FixedWindowModel;
using ratelimit::ManualClock;
using ratelimit::RegionalStorage;
using ratelimit::SlidingCounterModel;

constexpr std::chrono::nanoseconds W = 1s;

ratelimit::detail::WindowParams window_params(std::int64_t n) { return {n, W.count()}; }

/// One storage per region, each with the same options but its own region.
std::vector<RegionalStorage> storages(const rltest::Regions& regions,
                                      std::chrono::milliseconds interval = 100ms,
                                      std::chrono::milliseconds delay = 40ms) {
  std::vector<RegionalStorage> out;
  for (std::size_t i = 0; i < regions.size(); ++i)
    out.emplace_back(regions.options(i, interval, delay));
  return out;
}

ratelimit::Operation spend(std::int64_t cost = 1) { return ratelimit::Operation{cost}; }
ratelimit::Operation peek() { return ratelimit::Operation{1, true}; }

/// Polls `done()` every 5 ms (real time: a background thread's work) until it holds; false
/// after `limit`. No assertion is about the time it took.
template <class F>
bool eventually(F done, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

/// Every region exchanges once at `now`.
void exchange_all(const std::vector<RegionalStorage>& s, std::chrono::nanoseconds now) {
  for (const auto& r : s) (void)r.exchange(now);
}

/// As storages(), with links that give up after 150 ms: a round over a cut link lasts that
/// long (the partition tests run several).
std::vector<RegionalStorage> quick_storages(const rltest::Regions& regions) {
  std::vector<RegionalStorage> out;
  for (std::size_t i = 0; i < regions.size(); ++i) {
    auto o = regions.options(i, 100ms, 40ms);
    for (auto& r : o.remotes) r.redis.command_timeout = 150ms;
    out.emplace_back(std::move(o));
  }
  return out;
}

/// Every region exchanges once at `now`; true if each round reached every other region.
bool heal_round(const std::vector<RegionalStorage>& s, std::chrono::nanoseconds now) {
  bool all = true;
  for (const auto& r : s) all = r.exchange(now).failed.empty() && all;
  return all;
}

}  // namespace

TEMPLATE_TEST_CASE(
    "A region counts its own admissions at once and another region's after "
    "that region's exchange",
    "[far][redis]", FixedWindowModel, SlidingCounterModel) {
  rltest::Regions regions(2);
  auto s = storages(regions);
  auto a = s[0].bind<TestType>("api", window_params(10), 10);
  auto b = s[1].bind<TestType>("api", window_params(10), 10);
  const auto t = 5ms;
  for (int i = 0; i < 4; ++i) REQUIRE(a.apply("k", t, spend()).allowed);
  // Region r0 sees its 4; r1 has seen nothing yet: 10 - 4 = 6 left there, 10 here.
  CHECK(a.apply("k", t, peek()).remaining == 6);
  CHECK(b.apply("k", t, peek()).remaining == 10);
  const auto report = s[0].exchange(t);
  CHECK(report.hashes == 1);
  CHECK(report.units_pushed == 4);
  CHECK(report.failed.empty());
  CHECK(b.apply("k", t, peek()).remaining == 6);
  // A second round pushes nothing new: the counts merge by addition, never twice.
  CHECK(s[0].exchange(t).units_pushed == 0);
  CHECK(b.apply("k", t, peek()).remaining == 6);
  REQUIRE(b.apply("k", t, spend(2)).allowed);
  (void)s[1].exchange(t);
  // 4 (r0) + 2 (r1) = 6 counted in both regions: 4 left.
  CHECK(a.apply("k", t, peek()).remaining == 4);
  CHECK(b.apply("k", t, peek()).remaining == 4);
}

TEMPLATE_TEST_CASE("An attack spread over three regions reaches N + (R - 1) U and never more",
                   "[far][redis]", FixedWindowModel, SlidingCounterModel) {
  // N = 20, U = 5, R = 3: the bound is 20 + 2 x 5 = 30 per window. It is reached when every
  // region has seen N - U = 15 and then each admits U = 5 that the others have not seen.
  rltest::Regions regions(3);
  auto s = storages(regions);
  constexpr std::int64_t N = 20, U = 5;
  std::vector<ratelimit::RegionalWindowBinding<TestType>> b;
  for (auto& r : s) b.push_back(r.template bind<TestType>("api", window_params(N), U));
  const auto t = 10ms;  // one window throughout: the sliding counter's previous window is empty
  std::int64_t admitted = 0;
  // r0 admits 15 in three steps of U, exchanging after each (it may not hold more than U unseen).
  for (int step = 0; step < 3; ++step) {
    for (int i = 0; i < 5; ++i) admitted += b[0].apply("k", t, spend()).allowed ? 1 : 0;
    // A sixth is over r0's unseen bound: denied (degraded, retry after S) until the exchange.
    const auto over = b[0].apply("k", t, spend());
    CHECK_FALSE(over.allowed);
    CHECK(over.degraded);
    CHECK(over.retry_after == 100ms);
    // Nothing was spent: remaining is N less what r0 counts, 20 - 5 (step + 1). (It once read
    // as if the denied unit had been spent.)
    CHECK(over.remaining == N - 5 * (step + 1));
    exchange_all(s, t);
  }
  REQUIRE(admitted == 15);
  // Every region now sees 15 of 20: each admits U = 5 more, unseen by the others.
  for (std::size_t r = 0; r < 3; ++r)
    for (int i = 0; i < 10; ++i) admitted += b[r].apply("k", t, spend()).allowed ? 1 : 0;
  CHECK(admitted == N + 2 * U);
  // Once the exchange catches up, every region sees 30 and denies by the limit.
  exchange_all(s, t);
  for (std::size_t r = 0; r < 3; ++r) {
    const auto d = b[r].apply("k", t, spend());
    CHECK_FALSE(d.allowed);
    CHECK_FALSE(d.degraded);
    CHECK(d.remaining == 0);
  }
  CHECK(s[0].stats().unseen_denials >= 3);
}

TEMPLATE_TEST_CASE(
    "Random traffic over three regions with random exchanges never admits more "
    "than N + (R - 1) U",
    "[far][redis]", FixedWindowModel, SlidingCounterModel) {
  rltest::Regions regions(3);
  auto s = storages(regions);
  constexpr std::int64_t N = 30, U = 4, bound = N + 2 * U;  // 38 per window (estimate)
  std::vector<ratelimit::RegionalWindowBinding<TestType>> b;
  for (auto& r : s) b.push_back(r.template bind<TestType>("api", window_params(N), U));
  std::mt19937 rng(7);
  std::map<std::int64_t, std::int64_t> per_window;  // window index -> units admitted there
  std::int64_t t_ms = 0, admitted = 0;
  for (int i = 0; i < 1500; ++i) {
    t_ms += static_cast<std::int64_t>(rng() % 5);  // about 600 requests per 1 s window
    const auto now = std::chrono::nanoseconds{t_ms * 1'000'000};
    if (rng() % 25 == 0) (void)s[rng() % 3].exchange(now);
    const auto d = b[rng() % 3].apply("k", now, spend());
    if (!d.allowed) continue;
    ++admitted;
    const std::int64_t k = t_ms / 1000, e = t_ms - k * 1000;
    ++per_window[k];
    const std::int64_t c = per_window[k], p = per_window.count(k - 1) ? per_window[k - 1] : 0;
    if constexpr (std::is_same_v<TestType, FixedWindowModel>) {
      REQUIRE(c <= bound);
    } else {
      // The estimate on every region's true counts: c + p (W - e) / W <= bound, in ms units.
      REQUIRE(c * 1000 + p * (1000 - e) <= bound * 1000);
    }
  }
  CHECK(admitted > 0);
}

TEST_CASE(
    "A client staying in one region reaches its full limit when U >= N (S + 2d) / W, "
    "and is held back below it",
    "[far][redis]") {
  // N = 100 per W = 1 s, S = 100 ms, d = 40 ms: N (S + 2d) / W = 100 x 180 / 1000 = 18. The
  // client sends one request every 10 ms (N per W) at 5, 15, ..., 995 ms. Rounds claim at
  // 0, 100, 200, ... ms and are acknowledged 2d = 80 ms later. Just before the acknowledgement
  // at 180 ms, r0 has admitted 5..175 = 18 units and the others have acknowledged none (the
  // round at 0 claimed nothing): the 18th, at 175 ms, needs U >= 18.
  const auto run = [](std::int64_t unseen) {
    rltest::Regions regions(2);
    auto s = storages(regions, 100ms, 40ms);
    auto a = s[0].bind<FixedWindowModel>("api", window_params(100), unseen);
    std::int64_t admitted = 0;
    std::optional<ratelimit::ExchangeRound> pending;
    for (std::int64_t t = 0; t < 1000; ++t) {  // ms
      const auto now = std::chrono::nanoseconds{t * 1'000'000};
      if (t % 100 == 0) pending = s[0].begin_exchange(now);
      if (t % 100 == 80 && pending) {
        (void)s[0].finish_exchange(std::move(*pending));
        pending.reset();
      }
      if (t % 10 == 5) admitted += a.apply("k", now, spend()).allowed ? 1 : 0;
    }
    return admitted;
  };
  CHECK(run(18) == 100);
  CHECK(run(17) < 100);
  // The default bound is that formula: ceil(100 x 180 / 1000) = 18.
  rltest::Regions regions(2);
  RegionalStorage st(regions.options(0, 100ms, 40ms));
  CHECK(st.bind<FixedWindowModel>("api", window_params(100)).unseen_limit() == 18);
}

namespace {

/// Records partition events (the listener's breaker and storage error hooks).
struct PartitionLog : ratelimit::Listener {
  std::mutex mutex;
  std::vector<std::pair<std::string, bool>> links;  // (node, open)
  int partition_errors = 0;
  void on_breaker_change(const ratelimit::BreakerEvent& e) override {
    // Only the links between regions (the clients' own breakers, on "host:port", also report).
    if (e.node.rfind("region ", 0) != 0) return;
    const std::lock_guard lock(mutex);
    links.emplace_back(std::string(e.node), e.open);
  }
  void on_storage_error(const ratelimit::StorageErrorEvent& e) override {
    const std::lock_guard lock(mutex);
    if (e.kind == "partition") ++partition_errors;
  }
};

}  // namespace

TEST_CASE(
    "A partitioned region goes on with its own count plus U and says so; the exchange "
    "catches up when it heals",
    "[far][redis]") {
  rltest::Regions regions(3);
  auto s = storages(regions);
  constexpr std::int64_t N = 20, U = 3;
  std::vector<ratelimit::RegionalWindowBinding<FixedWindowModel>> b;
  for (auto& r : s) b.push_back(r.bind<FixedWindowModel>("api", window_params(N), U));
  auto log = std::make_shared<PartitionLog>();
  s[2].attach_listener(log);
  auto metrics = std::make_shared<ratelimit::PrometheusExporter>();
  s[2].attach_listener(metrics);
  const auto t = 1ms;
  for (int i = 0; i < 3; ++i) REQUIRE(b[0].apply("k", t, spend()).allowed);
  exchange_all(s, t);  // every region sees r0's 3
  regions.partition(2, true);
  // r2, cut off: its own count (0) plus what it saw (3), and at most U = 3 unseen.
  for (int i = 0; i < 3; ++i) REQUIRE(b[2].apply("k", t, spend()).allowed);
  const auto held = b[2].apply("k", t, spend());
  CHECK_FALSE(held.allowed);
  CHECK(held.degraded);
  const auto report = s[2].exchange(t);
  CHECK(report.failed.size() == 2);  // r0 and r1
  CHECK(s[2].stats().partitioned == 2);
  CHECK_FALSE(b[2].apply("k", t, spend()).allowed);  // still held: nobody acknowledged
  {
    const std::lock_guard lock(log->mutex);
    CHECK(log->partition_errors == 2);
    REQUIRE(log->links.size() == 2);
    CHECK(log->links[0] == std::make_pair(std::string("region r0"), true));
    CHECK(log->links[1] == std::make_pair(std::string("region r1"), true));
  }
  // The same through the metrics: the link's gauge is open, and the failures are counted.
  const std::string text = metrics->render();
  CHECK_THAT(text, Catch::Contains("breaker_open{node=\"region r0\"} 1"));
  CHECK_THAT(text, Catch::Contains("errors_total{kind=\"partition\"} 2"));
  // r0 and r1 go on too: r0 cannot push to r2, so its unseen units stay unseen (by r2).
  for (int i = 0; i < 5; ++i) (void)b[0].apply("k", t, spend());
  (void)s[0].exchange(t);
  CHECK(s[0].stats().partitioned == 1);
  // r0 admitted 3 more (U) after the 3 everyone saw; r1 acknowledged them but r2 did not.
  CHECK_FALSE(b[0].apply("k", t, spend()).allowed);
  regions.partition(2, false);
  // The regions exchange until a round of each reaches every other region: the round right
  // after a failure may still find that link's circuit breaker open for its back-off (1 ms of
  // real time), as a production exchanger would at its next interval; a region that failed
  // twice in a row meanwhile excluded r2 and fences it until its next round releases that.
  REQUIRE(eventually([&] { return heal_round(s, t); }, 10s));
  CHECK(s[2].stats().partitioned == 0);
  {
    const std::lock_guard lock(log->mutex);
    REQUIRE(log->links.size() == 4);
    CHECK(log->links[2].second == false);
    CHECK(log->links[3].second == false);
  }
  // Healed: every region counts 3 + 3 (r0) + 3 (r2) = 9 of 20, 11 left.
  for (std::size_t r = 0; r < 3; ++r) {
    INFO("region " << r);
    CHECK(b[r].apply("k", t, peek()).remaining == 11);
  }
}

TEMPLATE_TEST_CASE(
    "While a region is cut off, the regions that still talk to each other exclude it and keep "
    "their shares; the cut-off region spends its U",
    "[far][redis][partition]", FixedWindowModel) {
  rltest::Regions regions(3);
  auto s = quick_storages(regions);
  // N = 60, U = 30, R = 3; every request in window 1 at 1 ms past its start. (The sliding
  // counter builds its call the same way: one model is enough for the exclusion.)
  constexpr std::int64_t N = 60, U = 30;
  std::vector<ratelimit::RegionalWindowBinding<TestType>> b;
  for (auto& r : s) b.push_back(r.bind<TestType>("api", window_params(N), U));
  const auto t = W + 1ms;
  regions.partition(2, true);
  exchange_all(s, t);  // the first failed round marks the links cut; nobody excludes yet
  for (const auto& r : s) CHECK(r.stats().excluded == 0);
  exchange_all(s, t);  // the second asks for grants
  // r0 and r1 each hold grants from 2 of the 3 regions (its own Redis and the other's): a
  // majority. r2 reaches only its own Redis: 1 of 3, no exclusion (it gives its grant back).
  CHECK(s[0].stats().excluded == 1);
  CHECK(s[1].stats().excluded == 1);
  CHECK(s[2].stats().excluded == 0);
  // r2 spends its U = 30 unseen units, then is held.
  std::int64_t r2 = 0;
  for (int i = 0; i < 2 * N; ++i) r2 += b[2].apply("k", t, spend()).allowed ? 1 : 0;
  CHECK(r2 == U);
  // r0's honest client gets its whole limit, N = 60 (at least N - U = 30, the goal), where
  // before r2 held it to U = 30: its unseen bound counts r1's acknowledgements only (r1
  // acknowledges at r0's round), and its count misses r2's 30 unseen units.
  std::int64_t r0 = 0;
  for (int i = 0; i < U; ++i) r0 += b[0].apply("k", t, spend()).allowed ? 1 : 0;
  (void)s[0].exchange(t);
  for (int i = 0; i < 2 * U; ++i) r0 += b[0].apply("k", t, spend()).allowed ? 1 : 0;
  CHECK(r0 == N);
  // Over-admission: 60 + 30 = 90 <= N + (R - 1) U = 60 + 2 x 30 = 120.
  CHECK(r0 + r2 <= N + 2 * U);
  // r2 heard again one way only (it reaches r0 and r1, they do not reach it): its pushes are
  // refused (fenced) where an exclusion of it is held, so its acknowledgements stay as they
  // were and it stays held at U.
  regions.link(2, 0).set_partitioned(false);
  regions.link(2, 1).set_partitioned(false);
  const auto fenced = s[2].exchange(t);
  CHECK(fenced.failed.size() == 2);
  CHECK(s[2].stats().units_pushed == 0);
  CHECK_FALSE(b[2].apply("k", t, spend()).allowed);
  // Healed: r0 and r1 stop excluding at their first round that reaches r2, and release the
  // grants (r2's fence) at the next; then r2's units reach them.
  regions.partition(2, false);
  REQUIRE(eventually([&] { return heal_round(s, t); }, 10s));
  for (std::size_t r = 0; r < 3; ++r) {
    INFO("region " << r);
    CHECK(s[r].stats().excluded == 0);
    // Every region counts 60 (r0) + 30 (r2) = 90 >= N: nothing left.
    CHECK(b[r].apply("k", t, peek()).remaining == 0);
    CHECK_FALSE(b[r].apply("k", t, spend()).allowed);
  }
}

TEST_CASE(
    "A Redis grants an exclusion only where no two regions would exclude each other and no "
    "excluded region excludes, and fences the excluded region's pushes",
    "[far][redis][partition]") {
  rltest::Regions regions(1);
  rltest::RedisAdmin admin(regions.endpoint(0));
  const std::string body(ratelimit::lua::regional_exchange);
  const std::string ex = "t:{rg-ex}";
  // Grants and releases by instance "p1" of each region (or another named).
  const auto grant = [&](const std::string& i, const std::string& j,
                         const std::string& instance = "p1") {
    return admin.integer({"EVAL", body, "1", ex, "grant", i, j, "30000", instance});
  };
  const auto release = [&](const std::string& i, const std::string& j,
                           const std::string& instance = "p1") {
    return admin.integer({"EVAL", body, "1", ex, "release", i, j, instance});
  };
  const auto push = [&](const std::string& from) {
    // A window's push of 1 unit (TTL 60 s) into hash t:h, refused while `from` is fenced.
    auto r = admin.run({"EVAL", body, "2", "t:h", ex, "push", "n:" + from, "1", "60000"});
    return r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : std::string("ok");
  };
  REQUIRE(push("b") == "ok");
  CHECK(grant("a", "b") == 1);
  CHECK(grant("a", "b") == 1);  // a renewal
  CHECK(grant("c", "b") == 1);  // two regions may exclude one
  CHECK(grant("b", "a") == 0);  // never each other
  CHECK(grant("b", "c") == 0);  // an excluded region excludes no one
  CHECK(grant("d", "a") == 0);  // nor is an excluding region excluded
  CHECK(grant("a", "c") == 0);  // c excludes b: excluding c would chain
  CHECK_THAT(push("b"), Catch::StartsWith("FENCED region b is excluded by region"));
  CHECK(push("a") == "ok");
  const auto n_b = admin.run({"HGET", "t:h", "n:b"});
  CHECK(std::string(n_b->str, n_b->len) == "1");  // the refused push wrote nothing
  CHECK(grant("a", "b", "p2") == 1);              // another instance of a
  CHECK(release("a", "b") == 1);
  CHECK_THAT(push("b"), Catch::StartsWith("FENCED"));  // c and a's p2 still exclude b
  CHECK(release("a", "b", "p2") == 1);
  CHECK_THAT(push("b"), Catch::StartsWith("FENCED"));  // c still does
  CHECK(release("c", "b") == 1);
  CHECK(push("b") == "ok");
  CHECK(grant("b", "a") == 1);  // released both ways: b may now exclude a
}

TEST_CASE(
    "Regions cut apart but both heard by a third do not exclude each other; two regions never "
    "exclude one another",
    "[far][redis][partition]") {
  constexpr std::int64_t N = 60, U = 20;
  const auto t = W + 1ms;
  SECTION("r0 and r2 cannot reach each other; both reach r1") {
    rltest::Regions regions(3);
    auto s = quick_storages(regions);
    std::vector<ratelimit::RegionalWindowBinding<FixedWindowModel>> b;
    for (auto& r : s) b.push_back(r.bind<FixedWindowModel>("api", window_params(N), U));
    regions.link(0, 2).set_partitioned(true);
    regions.link(2, 0).set_partitioned(true);
    exchange_all(s, t);
    exchange_all(s, t);
    // r0 asked first: granted by r0 and r1 (2 of 3). r2 then asked r2 and r1: r1 refuses (r0
    // excludes r2 there), 1 of 3. Had both excluded the other, each could admit N on its own
    // count: 2N in all.
    CHECK(s[0].stats().excluded == 1);
    CHECK(s[1].stats().excluded == 0);
    CHECK(s[2].stats().excluded == 0);
    // r2 is fenced at r1 (which granted r0's exclusion of it) and cut from r0: U, then held,
    // also after a round (r1 refuses its push).
    std::int64_t r2 = 0;
    for (int i = 0; i < N; ++i) r2 += b[2].apply("k", t, spend()).allowed ? 1 : 0;
    CHECK(s[2].exchange(t).failed.size() == 2);
    for (int i = 0; i < N; ++i) r2 += b[2].apply("k", t, spend()).allowed ? 1 : 0;
    CHECK(r2 == U);
    // r0 counts r1's acknowledgements only: its whole limit (it never sees r2's 20).
    std::int64_t r0 = 0;
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < U; ++i) r0 += b[0].apply("k", t, spend()).allowed ? 1 : 0;
      if (round < 2) (void)s[0].exchange(t);
    }
    CHECK(r0 == N);
    // 60 + 20 = 80 <= N + (R - 1) U = 100.
    CHECK(r0 + r2 <= N + 2 * U);
  }
  SECTION("two regions cut apart") {
    rltest::Regions regions(2);
    auto s = quick_storages(regions);
    std::vector<ratelimit::RegionalWindowBinding<FixedWindowModel>> b;
    for (auto& r : s) b.push_back(r.bind<FixedWindowModel>("api", window_params(N), U));
    regions.partition(1, true);
    exchange_all(s, t);
    exchange_all(s, t);
    // Each holds its own grant only: 1 of 2 is no majority. Both go on at U unseen.
    CHECK(s[0].stats().excluded == 0);
    CHECK(s[1].stats().excluded == 0);
    std::int64_t total = 0;
    for (int i = 0; i < N; ++i)
      for (auto& r : b) total += r.apply("k", t, spend()).allowed ? 1 : 0;
    CHECK(total == 2 * U);  // 40 <= N + (R - 1) U = 80
  }
}

TEST_CASE(
    "A limiter decides on a regional storage, and a background exchanger pushes its "
    "admissions",
    "[far][redis]") {
  rltest::Regions regions(2);
  auto s = storages(regions, 20ms, 0ms);
  ManualClock clock;
  // Default U = ceil(10 x (20 + 0) / 1000) = 1: every admission must be acknowledged before
  // the next, which the exchanger does in the background (real time, polled below).
  ratelimit::FixedWindow<ManualClock, RegionalStorage> a(ratelimit::Rate{10, W}, s[0], clock,
                                                         "api");
  ratelimit::FixedWindow<ManualClock, RegionalStorage> b(ratelimit::Rate{10, W}, s[1], clock,
                                                         "api");
  ratelimit::RegionalExchanger<ManualClock> exchanger(s[0], clock);
  REQUIRE(a.try_acquire("k").allowed);
  REQUIRE(eventually([&] { return b.peek("k").remaining == 9; }, 10s));
  REQUIRE(eventually([&] { return a.try_acquire("k").allowed; }, 10s));
}

TEST_CASE("A regional storage refuses bad options and bounds, naming the field", "[far][redis]") {
  rltest::Regions regions(2);
  auto o = regions.options(0, 100ms, 40ms);
  auto bad = o;
  bad.region = "no spaces";
  CHECK_THROWS_WITH(RegionalStorage(bad), Catch::Contains("region = \"no spaces\""));
  bad = o;
  bad.remotes[0].name = o.region;
  CHECK_THROWS_WITH(RegionalStorage(bad), Catch::Contains("remotes[0].name"));
  bad = o;
  bad.local.time_source = ratelimit::TimeSource::redis;
  CHECK_THROWS_WITH(RegionalStorage(bad), Catch::Contains("TimeSource::client"));
  bad = o;
  bad.exchange_interval = 0ms;
  CHECK_THROWS_WITH(RegionalStorage(bad), Catch::Contains("exchange_interval"));
  RegionalStorage st(o);
  CHECK_THROWS_WITH(st.bind<FixedWindowModel>("api", window_params(10), 11),
                    Catch::Contains("unseen_limit"));
  CHECK_THROWS_WITH(st.bind<FixedWindowModel>("api", window_params(10), 0),
                    Catch::Contains("unseen_limit"));
  auto b = st.bind<FixedWindowModel>("api", window_params(10));
  const ratelimit::RegionalPart parts[2] = {b.part("x", spend()), b.part("y", spend())};
  ratelimit::Decision out[2];
  CHECK_THROWS_WITH(st.decide_all(parts, 0ns, out), Catch::Contains("one key at a time"));
  CHECK_THROWS_AS(b.reset("x"), std::logic_error);
}

TEST_CASE(
    "An admission stamped late in an older window does not shorten the dirty set's TTL below "
    "a newer window's hash",
    "[far][redis]") {
  // Fault pinned: each admission once set the dirty set's TTL to its own window's, so an
  // admission of window 0 arriving after one of window 1 cut the set's TTL to what window 0
  // still needed. Once that lapsed the set was gone while window 1's units were unpushed: the
  // key stayed held by its unseen bound for the rest of the window.
  rltest::Regions regions(2);
  auto s = storages(regions);
  constexpr std::int64_t N = 100, U = 5;
  constexpr std::chrono::nanoseconds W60 = 60s;
  const ratelimit::detail::WindowParams params{N, W60.count()};
  auto a = s[0].bind<FixedWindowModel>("api", params, U);
  auto b = s[1].bind<FixedWindowModel>("api", params, U);
  // "victim" at t = 60.000 s (window 1): its hash matters until 2 x 60 s, 60 000 ms more, so
  // its TTL is 60 000 + 1 + ttl_margin. "other" at 59.999 s (window 0): 1 ms more, TTL
  // 1 + 1 + ttl_margin, 59 999 ms shorter.
  for (int i = 0; i < 5; ++i) REQUIRE(a.apply("victim", 60s, spend()).allowed);
  REQUIRE(a.apply("other", 59999ms, spend()).allowed);
  rltest::RedisAdmin admin(regions.endpoint(0));
  const auto dirty = admin.scan("*{rg-dirty}*");
  REQUIRE(dirty.size() == 1);
  const auto hashes = admin.scan("*victim*");
  REQUIRE(hashes.size() == 1);
  // The set is read first and the hash after: both got the same TTL in the same script and
  // decay alike, so the set's PTTL is at least the hash's (it was 59 999 ms short before).
  const std::int64_t set_ttl = admin.integer({"PTTL", dirty.front()});
  const std::int64_t hash_ttl = admin.integer({"PTTL", hashes.front()});
  CHECK(set_ttl >= hash_ttl);
  // And the exchange still finds victim's 5 (plus other's 1): r1 counts them, 100 - 5 = 95.
  const auto report = s[0].exchange(60s);
  CHECK(report.units_pushed == 6);
  CHECK(b.apply("victim", 60s, peek()).remaining == 95);
}

TEST_CASE("A claim whose reply was lost is claimed again once no round can still hold it",
          "[far][redis]") {
  // Fault pinned: a claim that timed out after Redis ran the script had raised c:<r>, so no
  // later round pushed those units: the other region never counted them and this region held
  // the key by its unseen bound for the rest of the window.
  rltest::Regions regions(2);
  auto s = storages(regions);
  constexpr std::int64_t N = 100, U = 5;
  const ratelimit::detail::WindowParams params{N, std::chrono::nanoseconds{60s}.count()};
  auto a = s[0].bind<FixedWindowModel>("api", params, U);
  auto b = s[1].bind<FixedWindowModel>("api", params, U);
  for (int i = 0; i < 5; ++i) REQUIRE(a.apply("victim", 1ms, spend()).allowed);
  // The claim's effect, its reply lost: c:r1 raised by 5 and stamped at 1 ms.
  rltest::RedisAdmin admin(regions.endpoint(0));
  const auto hashes = admin.scan("*victim*");
  REQUIRE(hashes.size() == 1);
  REQUIRE(admin.integer({"HINCRBY", hashes.front(), "c:r1", "5"}) == 5);
  (void)admin.run({"HSET", hashes.front(), "t:r1", "1"});
  // A round lasts at most the link's connect + command timeouts (2 s + 0.3 s, regions.hpp)
  // and then r0's own (2 s + 5 s): 9.3 s. At 1 s the claim may still be in flight: nothing is
  // claimed again, and r0 stays held (5 unseen of U = 5).
  CHECK(s[0].exchange(1s).units_pushed == 0);
  CHECK_FALSE(a.apply("victim", 1s, spend()).allowed);
  // At 10 s (9.999 s after the stamp, > 9.3 s) the claim is lost: its 5 units are pushed, r1
  // counts them (100 - 5 = 95) and r0 may admit again.
  CHECK(s[0].exchange(10s).units_pushed == 5);
  CHECK(b.apply("victim", 10s, peek()).remaining == 95);
  CHECK(a.apply("victim", 10s, spend()).allowed);
}

TEST_CASE("A regional limiter decides with the parameters each call carries", "[far][redis]") {
  rltest::Regions regions(2);
  auto s = storages(regions);  // S = 100 ms, d = 40 ms
  ManualClock clock;
  // The limiter's own 1000 per second would let a region admit U = ceil(1000 x (100 + 2 x 40)
  // / 1000) = 180 unacknowledged units; a call carrying 10 per second is bound by its own
  // U = ceil(10 x 180 / 1000) = 2 until an exchange acknowledges them.
  using Window = ratelimit::FixedWindow<ManualClock, RegionalStorage>;
  Window a(ratelimit::Rate{1000, W}, s[0], clock, "api");
  const auto plan = Window::params_of(ratelimit::Rate{10, W});
  const auto first = a.try_acquire("k", 1, plan);
  CHECK(first.allowed);
  CHECK(first.limit == 10);
  CHECK(a.try_acquire("k", 1, plan).allowed);
  CHECK_FALSE(a.try_acquire("k", 1, plan).allowed);
  CHECK(a.peek("k").allowed);  // under its own parameters the region may go on
}
