// Sentinel: Redis without Cluster is made highly available by Sentinel, so a
// storage must find the primary through the sentinels and follow a failover without a restart.
// A primary, a replica and three sentinels run on loopback (servers.hpp, SentinelSetup); the
// storage decides exactly through them; then the primary is killed (SIGKILL) while three threads
// decide: decisions are fail_closed's degraded denials for a bounded time (the failover: about
// 2 s here, reported with WARN, bounded generously), then exact again on the promoted replica
// through the same storage, where the state written before the kill (replicated: WAIT) is
// still there. Time is a frozen ManualClock; only the real servers (start, sync, failover) are
// waited for, by polling with limits.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

#include "redis_admin.hpp"
#include "servers.hpp"
#include "support/expect.hpp"
#include "support/redis_backend.hpp"

using namespace std::chrono_literals;

namespace {

using SentinelBucket = ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::RedisStorage>;

/// What one traffic thread saw. Written by its thread only; the counters are read while it runs.
struct TrafficLane {
  std::atomic<std::int64_t> decisions{0};
  std::atomic<std::int64_t> degraded{0};
  /// Non-degraded decisions since the last degraded one.
  std::atomic<std::int64_t> streak{0};
  std::atomic<std::int64_t> degraded_but_allowed{0};
  /// The latest degraded decision (read after join).
  std::chrono::steady_clock::time_point last_degraded{};
};

}  // namespace

TEST_CASE(
    "Through Sentinel a storage follows a failover: degraded for a bounded time, then exact "
    "on the promoted replica without a restart",
    "[redis][sentinel][failover][token_bucket]") {
  rltest::SentinelSetup setup;

  ratelimit::RedisOptions options;
  // The README's form, braces and all: it must build with -Wextra -Werror (the credentials
  // left out have default member initializers).
  options.sentinel = {setup.sentinel_addresses(), rltest::SentinelSetup::master_name};
  // Ignored with sentinels: a port nobody listens on, so only the sentinels can lead to Redis.
  options.host = "127.0.0.1";
  options.port = rltest::free_loopback_port();
  options.key_prefix = rltest::unique_prefix("sentinel");
  options.failure_policy = ratelimit::FailurePolicy::fail_closed;
  options.connect_timeout = 500ms;
  options.command_timeout = 1s;
  options.breaker_backoff = 50ms;
  options.breaker_max_backoff = 500ms;
  options.ttl_margin = std::chrono::minutes{10};
  rltest::FailureLog log;
  options.on_failure = log.callback();
  ratelimit::RedisStorage storage(options);

  ratelimit::ManualClock clock;  // frozen at 0: nothing refills during the test
  // Capacity C = 1,000,000 at 1 token per second: the i-th admission of a key leaves C - i,
  // and the bucket is full again i tokens (i s) later. C is far beyond what the traffic below
  // can spend, so its keys are only ever admitted or degraded.
  constexpr std::int64_t capacity = 1'000'000;
  SentinelBucket bucket({capacity, ratelimit::per_second(1)}, storage, clock);
  for (std::int64_t i = 1; i <= 10; ++i)
    CHECK(bucket.try_acquire("kept") == rltest::admitted(capacity, capacity - i, i * 1s));
  CHECK(log.snapshot().empty());

  // The state is on the primary the sentinels name, and it reaches the replica before the
  // primary dies: replication is asynchronous, so without this the last writes could be lost
  // in the failover (Redis's behaviour, not the library's). WAIT counts this connection's own
  // writes, so the admin writes a marker after the storage's writes and waits for that: the
  // replica applies the stream in order.
  REQUIRE(setup.reported_primary_port() == setup.primary().endpoint().port);
  rltest::RedisAdmin primary(setup.primary().endpoint());
  REQUIRE(primary.scan(options.key_prefix + "*").size() == 1);
  primary.run({"SET", options.key_prefix + "marker", "1"});
  REQUIRE(primary.integer({"WAIT", "1", "5000"}) == 1);
  rltest::RedisAdmin replica(setup.replica().endpoint());
  REQUIRE(replica.scan(options.key_prefix + "{kept}*").size() == 1);

  // Traffic from three threads, each on its own key, until told to stop.
  constexpr int threads = 3;
  std::vector<std::unique_ptr<TrafficLane>> lanes;
  for (int t = 0; t < threads; ++t) lanes.push_back(std::make_unique<TrafficLane>());
  std::atomic<bool> stop{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      TrafficLane& lane = *lanes[static_cast<std::size_t>(t)];
      const std::string key = "traffic-" + std::to_string(t);
      while (!stop.load()) {
        const ratelimit::Decision d = bucket.try_acquire(key);
        if (d.degraded) {
          lane.last_degraded = std::chrono::steady_clock::now();
          ++lane.degraded;
          if (d.allowed) ++lane.degraded_but_allowed;
          lane.streak.store(0);
        } else {
          ++lane.streak;
        }
        ++lane.decisions;
        // Requests arrive; they do not spin (degraded decisions take microseconds, and three
        // threads spinning on them would starve this 2-core machine for the whole failover).
        std::this_thread::sleep_for(std::chrono::milliseconds{1});
      }
    });
  const auto every_lane = [&](auto holds) {
    for (const auto& lane : lanes)
      if (!holds(*lane)) return false;
    return true;
  };

  // Every thread has been decided by Redis before the kill.
  const bool flowing =
      rltest::poll_until([&] { return every_lane([](auto& l) { return l.streak >= 20; }); }, 20s);
  std::int64_t degraded_before_kill = 0;
  for (const auto& lane : lanes) degraded_before_kill += lane->degraded.load();

  const auto killed_at = std::chrono::steady_clock::now();
  setup.primary().kill();

  // Recovered: every thread has been degraded (the primary is gone for at least the 500 ms the
  // sentinels wait before calling it down, and no thread waits longer than the 1 s command
  // timeout) and has since had 20 decisions in a row made by Redis again.
  const bool recovered =
      flowing &&
      rltest::poll_until(
          [&] { return every_lane([](auto& l) { return l.degraded > 0 && l.streak >= 20; }); },
          60s);
  stop.store(true);
  for (auto& th : pool) th.join();
  REQUIRE(flowing);
  CHECK(degraded_before_kill == 0);
  REQUIRE(recovered);

  auto last_degraded = killed_at;
  std::int64_t decisions = 0, degraded = 0, degraded_but_allowed = 0;
  for (const auto& lane : lanes) {
    last_degraded = std::max(last_degraded, lane->last_degraded);
    decisions += lane->decisions.load();
    degraded += lane->degraded.load();
    degraded_but_allowed += lane->degraded_but_allowed.load();
  }
  const auto degraded_for =
      std::chrono::duration_cast<std::chrono::milliseconds>(last_degraded - killed_at);
  WARN("failover: decisions degraded for " << degraded_for.count() << " ms after the kill ("
                                           << degraded << " of " << decisions
                                           << " decisions of 3 threads)");
  // fail_closed: no degraded decision let a request through.
  CHECK(degraded_but_allowed == 0);
  // Bounded: the sentinels need 0.5 s to call the primary down and about 1.5 s to promote
  // the replica (2 s failover timeout); 30 s leaves room for a slow machine, not for a storage
  // that never looks for the new primary.
  CHECK(degraded_for < 30s);

  // The same storage now decides on the promoted replica, which has the state written before
  // the kill: 10 admitted there, so the 11th leaves C - 11 and the bucket is full 11 s later.
  REQUIRE(rltest::poll_until(
      [&] { return setup.reported_primary_port() == setup.replica().endpoint().port; }, 30s));
  CHECK(bucket.try_acquire("kept") == rltest::admitted(capacity, capacity - 11, 11s));
  CHECK(bucket.try_acquire("kept") == rltest::admitted(capacity, capacity - 12, 12s));
  // And a key never seen before starts fresh there: one admission leaves C - 1, full in 1 s.
  CHECK(bucket.try_acquire("new") == rltest::admitted(capacity, capacity - 1, 1s));
  // A new admin connection: the sentinels close every client of the replica they promote.
  rltest::RedisAdmin promoted(setup.replica().endpoint());
  CHECK(promoted.scan(options.key_prefix + "{new}*").size() == 1);
}

TEST_CASE("Sentinels and the primary each get their own credentials", "[redis][sentinel][acl]") {
  // One primary and one sentinel (no failover here: a sentinel answers GET-MASTER-ADDR-BY-NAME
  // for the primary it is configured with at once). Each has an ACL user of its own beside its
  // open default user; a wrong password for either is refused by that server (WRONGPASS), so a
  // storage that decides only with both right has sent each its own credentials.
  rltest::TempDir dir;
  rltest::ThrowawayRedis primary;
  rltest::RedisAdmin(primary.endpoint())
      .run({"ACL", "SETUSER", "limiter", "on", ">data-secret", "~*", "+@all"});
  rltest::SentinelProcess sentinel(dir.path(), "m", primary.endpoint().port,
                                   {"user watcher on >sentinel-secret +@all"});
  const auto options_with = [&](std::string sentinel_password, std::string data_password) {
    ratelimit::RedisOptions o;
    o.sentinel.sentinels = {sentinel.address()};
    o.sentinel.master_name = "m";
    o.sentinel.username = "watcher";
    o.sentinel.password = std::move(sentinel_password);
    o.username = "limiter";
    o.password = std::move(data_password);
    o.key_prefix = rltest::unique_prefix("sentinel-acl");
    o.failure_policy = ratelimit::FailurePolicy::fail_closed;
    o.connect_timeout = 2s;
    o.command_timeout = 5s;
    return o;
  };
  ratelimit::ManualClock clock;
  const auto first_decision = [&](const ratelimit::RedisOptions& o, rltest::FailureLog& log) {
    auto with_log = o;
    with_log.on_failure = log.callback();
    ratelimit::RedisStorage storage(with_log);
    // Capacity 3 at 1 per second: a fresh key's first request leaves 2, full again in 1 s.
    SentinelBucket bucket({3, ratelimit::per_second(1)}, storage, clock);
    return bucket.try_acquire("k");
  };
  SECTION("both right: Redis decides") {
    rltest::FailureLog log;
    CHECK(first_decision(options_with("sentinel-secret", "data-secret"), log) ==
          rltest::admitted(3, 2, 1s));
    CHECK(log.count(ratelimit::RedisFailureKind::connect) == 0);
  }
  SECTION("the sentinel's password wrong: refused by the sentinel, degraded") {
    rltest::FailureLog log;
    const auto d = first_decision(options_with("wrong", "data-secret"), log);
    CHECK(d.degraded);
    CHECK_FALSE(d.allowed);  // fail_closed
    CHECK(log.count(ratelimit::RedisFailureKind::connect) >= 1);
    bool named = false;
    for (const auto& f : log.snapshot()) {
      UNSCOPED_INFO("on_failure: " << f.message);
      named = named || f.message.find("WRONGPASS") != std::string::npos;
    }
    CHECK(named);
  }
  SECTION("the primary's password wrong: refused by the primary, degraded") {
    rltest::FailureLog log;
    const auto d = first_decision(options_with("sentinel-secret", "wrong"), log);
    CHECK(d.degraded);
    CHECK(log.count(ratelimit::RedisFailureKind::connect) >= 1);
    bool named = false;
    for (const auto& f : log.snapshot())
      named = named || f.message.find("WRONGPASS") != std::string::npos;
    CHECK(named);
  }
}
