// Non-blocking decisions. Thousands in flight from several threads each complete
// exactly once and spend exactly what blocking decisions would; backpressure (max_in_flight) is
// reached while Redis is stopped and released when it answers again; futures, batches and rule
// sets go through the same machinery. Runs under ThreadSanitizer too (label `concurrent`).
// Time is a frozen ManualClock; only the real server is waited for, by polling with a limit.
#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>
#include <ratelimit/rules.hpp>

#include "redis_admin.hpp"
#include "support/redis_backend.hpp"

using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::ManualClock;
using ratelimit::RedisStorage;

namespace {

using Bucket = ratelimit::TokenBucket<ManualClock, RedisStorage>;

/// Polls `done()` until it holds; false after `limit` (a server that never answers).
template <class F>
bool eventually(F done, std::chrono::seconds limit = 20s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

}  // namespace

TEST_CASE("Thousands of non-blocking decisions from 4 threads complete exactly once, exactly",
          "[redis][async][concurrent]") {
  auto o = rltest::test_redis_options("async");
  o.max_in_flight = 100'000;  // not the subject here
  RedisStorage storage(o);
  ManualClock clock;  // frozen: no refill
  // Capacity 5,000, refill 1 per hour: of 10,000 requests on one key, exactly 5,000 admitted.
  Bucket tb({5'000, ratelimit::per_hour(1)}, storage, clock);
  constexpr int threads = 4, per_thread = 2'500;
  std::vector<std::atomic<int>> calls(threads * per_thread);
  std::atomic<int> admitted{0}, degraded{0}, completed{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        const auto slot = static_cast<std::size_t>(t * per_thread + i);
        tb.try_acquire_async("shared", 1, [&, slot](Decision d) {
          calls[slot].fetch_add(1);
          admitted += d.allowed ? 1 : 0;
          degraded += d.degraded ? 1 : 0;
          completed.fetch_add(1);
        });
      }
    });
  for (auto& th : pool) th.join();
  REQUIRE(eventually([&] { return completed.load() == threads * per_thread; }));
  CHECK(std::all_of(calls.begin(), calls.end(), [](const auto& c) { return c.load() == 1; }));
  CHECK(degraded.load() == 0);
  CHECK(admitted.load() == 5'000);
  CHECK(storage.stats().in_flight == 0);
}

TEST_CASE("Blocking and non-blocking decisions from 8 threads share one counter exactly",
          "[redis][async][concurrent]") {
  RedisStorage storage(rltest::test_redis_options("mixed"));
  ManualClock clock;
  // 300 per hour, frozen: of 8 x 100 requests, half of them non-blocking, exactly 300 admitted.
  ratelimit::FixedWindow<ManualClock, RedisStorage> fw({300, 1h}, storage, clock);
  std::atomic<int> admitted{0}, completed{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < 8; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        if (t % 2 == 0) {
          admitted += fw.try_acquire("mixed").allowed ? 1 : 0;
          completed.fetch_add(1);
        } else {
          fw.try_acquire_async("mixed", 1, [&](Decision d) {
            admitted += d.allowed ? 1 : 0;
            completed.fetch_add(1);
          });
        }
      }
    });
  for (auto& th : pool) th.join();
  REQUIRE(eventually([&] { return completed.load() == 800; }));
  CHECK(admitted.load() == 300);
}

TEST_CASE("Backpressure: past max_in_flight a decision is degraded at once, and room comes back",
          "[redis][async][concurrent][backpressure]") {
  rltest::ThrowawayRedis server;
  auto o = rltest::test_redis_options("pressure");
  o.port = server.endpoint().port;
  o.max_in_flight = 16;
  o.command_timeout = 10s;  // the stalled decisions wait for the server, not for a timeout
  o.failure_policy = ratelimit::FailurePolicy::fail_closed;
  RedisStorage storage(o);
  ManualClock clock;
  Bucket tb({1'000, ratelimit::per_hour(1)}, storage, clock);
  REQUIRE_FALSE(tb.try_acquire("warm").degraded);  // connected while it ran
  server.pause();
  std::atomic<int> completed{0}, degraded{0};
  std::atomic<int> inline_overloaded{0};
  for (int i = 0; i < 100; ++i) {
    std::atomic<bool> returned{false};
    tb.try_acquire_async("p", 1, [&](Decision d) {
      // Degraded before try_acquire_async returned: decided at once, on this thread.
      if (d.degraded && !returned.load()) inline_overloaded.fetch_add(1);
      degraded += d.degraded ? 1 : 0;
      completed.fetch_add(1);
    });
    returned = true;
  }
  // 16 wait on the stopped server; the other 100 - 16 = 84 were decided at once, fail closed.
  CHECK(inline_overloaded.load() == 84);
  CHECK(completed.load() == 84);
  CHECK(storage.stats().in_flight == 16u);
  CHECK(storage.stats().overloaded == 84u);
  CHECK_FALSE(storage.stats().circuit_open);  // backpressure is not the node's failure
  server.resume();
  REQUIRE(eventually([&] { return completed.load() == 100; }));
  // The 16 were decided by Redis: 1,000 - 1 (warm-up on another key) leaves room for all.
  CHECK(degraded.load() == 84);
  CHECK(storage.stats().in_flight == 0u);
  CHECK_FALSE(tb.try_acquire("p").degraded);  // released
}

TEST_CASE("A blocking decision inside a completion is degraded at once instead of deadlocking",
          "[redis][async][concurrent]") {
  auto o = rltest::test_redis_options("reenter");
  o.failure_policy = ratelimit::FailurePolicy::fail_open;
  std::atomic<int> io_failures{0};
  o.on_failure = [&](const ratelimit::RedisFailure& f) {
    if (f.kind == ratelimit::RedisFailureKind::io) io_failures.fetch_add(1);
  };
  RedisStorage storage(o);
  ManualClock clock;
  Bucket tb({10, ratelimit::per_hour(1)}, storage, clock);
  std::promise<Decision> inner;
  tb.try_acquire_async("outer", 1, [&](Decision) { inner.set_value(tb.try_acquire("inner")); });
  auto f = inner.get_future();
  REQUIRE(f.wait_for(20s) == std::future_status::ready);
  const Decision d = f.get();
  CHECK(d.degraded);
  CHECK(d.allowed);  // fail_open
  CHECK(io_failures.load() == 1);
}

TEST_CASE("Futures, RedisBatch::run_async and RuleSet::decide_async decide as their blocking twins",
          "[redis][async][concurrent]") {
  RedisStorage storage(rltest::test_redis_options("twins"));
  ManualClock clock;
  Bucket tb({3, ratelimit::per_hour(1)}, storage, clock);
  // Capacity 3, frozen: 2 left after one, then 1 (future), then 0 (batch), then denied.
  CHECK(tb.try_acquire("k").remaining == 2);
  auto f = tb.try_acquire_async("k", 1);
  REQUIRE(f.wait_for(20s) == std::future_status::ready);
  CHECK(f.get().remaining == 1);

  ratelimit::RedisBatch batch(storage);
  batch.add(tb, "k");
  batch.add(tb, "k");
  std::promise<std::vector<Decision>> got;
  batch.run_async([&](std::vector<Decision> d) { got.set_value(std::move(d)); });
  CHECK(batch.size() == 0u);
  auto bf = got.get_future();
  REQUIRE(bf.wait_for(20s) == std::future_status::ready);
  const auto d = bf.get();
  REQUIRE(d.size() == 2u);
  CHECK(d[0].allowed);
  CHECK(d[0].remaining == 0);
  CHECK_FALSE(d[1].allowed);

  const auto rules = ratelimit::Rules::from_string(R"(
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
)");
  ratelimit::RuleSet<RedisStorage, ManualClock> set(rules, storage, clock);
  // 2 per minute (fixed window): the first two admitted (1 then 0 left), the third denied.
  const std::array<ratelimit::DescriptorEntry, 1> request{{{"user", "u1"}}};
  CHECK(set.decide(request).decision().remaining == 1);
  auto rf = set.decide_async(request);
  REQUIRE(rf.wait_for(20s) == std::future_status::ready);
  const auto r2 = rf.get();
  CHECK(r2.allowed);
  CHECK(r2.decision().remaining == 0);
  std::promise<ratelimit::RuleSetDecision> third;
  set.decide_async(request, 1,
                   [&](ratelimit::RuleSetDecision r) { third.set_value(std::move(r)); });
  auto tf = third.get_future();
  REQUIRE(tf.wait_for(20s) == std::future_status::ready);
  CHECK_FALSE(tf.get().allowed);
}

TEST_CASE("A one-key flood costs Redis one script per admission and per retry window",
          "[redis][hot_keys][concurrent]") {
  // The over-limit cache under a flood: 4 threads flood one key (limit 100 per second) at 50,000
  // requests per simulated second for 5 s; the clock steps 1 ms between rounds of 50 requests (12 +
  // 12 + 13 + 13).
  const bool async = GENERATE(false, true);
  INFO((async ? "non-blocking" : "blocking") << " decisions");
  ratelimit::RedisOptions o = rltest::test_redis_options("flood");
  o.over_limit_cache.enabled = true;
  RedisStorage storage(o);
  ManualClock clock;
  Bucket tb(ratelimit::TokenBucketConfig{100, ratelimit::per_second(100)}, storage, clock);
  constexpr int threads = 4, rounds = 5'000, per_round = 50;
  std::atomic<std::int64_t> admitted{0};
  std::barrier step(threads, [&]() noexcept { clock.advance(1ms); });
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const int share = per_round / threads + (t >= threads - per_round % threads ? 1 : 0);
      for (int r = 0; r < rounds; ++r) {
        for (int i = 0; i < share; ++i) {
          const Decision d = async ? tb.try_acquire_async("k", 1).get() : tb.try_acquire("k");
          if (d.allowed) admitted.fetch_add(1, std::memory_order_relaxed);
        }
        step.arrive_and_wait();
      }
    });
  for (auto& th : pool) th.join();
  const auto st = storage.stats();
  CHECK(st.degraded_decisions == 0);
  // Round r runs at r ms (r = 0..4999) with demand to spare: the bucket has admitted, by the
  // last round, its capacity plus one token per 10 ms: floor(100 + 4999 / 10) = 599.
  CHECK(admitted.load() == 599);
  // Every request was answered once, by Redis or by the cache: 5,000 x 50 = 250,000.
  CHECK(st.decisions + st.cache_hits == 250'000u);
  // Redis ran at most one script per admission plus one per retry window (a token per 10 ms:
  // 5,000 ms / 10 ms = 500 windows) for this one instance: 599 + 500 = 1,099.
  INFO("scripts Redis ran: " << st.decisions);
  CHECK(st.decisions <= 1'099u);
  CHECK(st.cache_entries == 1);
}
