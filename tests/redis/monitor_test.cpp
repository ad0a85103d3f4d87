// Monitoring on Redis: a storage's listeners hear its round trips, its over-limit cache hits, its
// errors and its breaker opening and closing; the exporter renders them.

#include <chrono>
#include <memory>
#include <string>

#include <catch2/catch.hpp>
#include <ratelimit/metrics/prometheus.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

#include "support/counting_listener.hpp"
#include "support/redis_backend.hpp"

namespace redis_monitor {

using ratelimit::ManualClock;
using ratelimit::RedisStorage;

}  // namespace redis_monitor

TEST_CASE("A Redis storage's listeners hear round trips and over-limit cache hits",
          "[redis][monitor]") {
  using namespace redis_monitor;
  auto o = rltest::test_redis_options("monitor");
  o.over_limit_cache.enabled = true;
  RedisStorage storage(o);
  auto counts = std::make_shared<rltest::CountingListener>();
  auto exporter = std::make_shared<ratelimit::PrometheusExporter>();
  storage.attach_listener(counts);
  storage.attach_listener(exporter);
  ManualClock clock;
  ratelimit::TokenBucket<ManualClock, RedisStorage> limiter({1, ratelimit::per_second(1)}, storage,
                                                            clock, "hot");
  // 1 token: the 1st admitted by Redis, whose reply says the bucket is now empty (it denies
  // even one unit, so the cache keeps that state); the 2nd to 4th are denied by the cache:
  // 1 round trip, 3 hits.
  CHECK(limiter.try_acquire("k").allowed);
  CHECK_FALSE(limiter.try_acquire("k").allowed);
  CHECK_FALSE(limiter.try_acquire("k").allowed);
  CHECK_FALSE(limiter.try_acquire("k").allowed);
  CHECK(counts->round_trips_ok() == 1);
  CHECK(counts->round_trips_failed() == 0);
  CHECK(counts->cache_hits() == 3);
  CHECK(storage.stats().cache_hits == 3);
  const std::string text = exporter->render();
  CHECK(text.find("\nratelimit_redis_over_limit_cache_hits_total 3\n") != std::string::npos);
  CHECK(text.find("\nratelimit_redis_round_trip_seconds_count 1\n") != std::string::npos);

  REQUIRE(storage.detach_listener(*counts));
  (void)limiter.try_acquire("other");
  CHECK(counts->round_trips_ok() == 1);
}

TEST_CASE(
    "A Redis storage's listeners hear errors and the breaker opening; a throwing one "
    "changes nothing",
    "[redis][monitor]") {
  using namespace redis_monitor;
  auto o = rltest::test_redis_options("monitor-down");
  o.port = 1;  // nothing listens there: every connect is refused
  o.failure_policy = ratelimit::FailurePolicy::fail_open;
  o.breaker_backoff = std::chrono::hours{1};  // stays open for the whole test
  o.breaker_max_backoff = std::chrono::hours{1};
  RedisStorage storage(o);
  auto counts = std::make_shared<rltest::CountingListener>();
  auto exporter = std::make_shared<ratelimit::PrometheusExporter>();
  storage.attach_listener(std::make_shared<rltest::ThrowingListener>());
  storage.attach_listener(counts);
  storage.attach_listener(exporter);
  ManualClock clock;
  ratelimit::TokenBucket<ManualClock, RedisStorage> limiter({1, ratelimit::per_second(1)}, storage,
                                                            clock, "down");
  // The 1st decision tries Redis and fails (connect): the breaker opens. The 2nd is not tried
  // (a short circuit: counted in stats, not an error event). Both are degraded, admitted by
  // fail_open.
  const auto d1 = limiter.try_acquire("k");
  const auto d2 = limiter.try_acquire("k");
  CHECK((d1.allowed && d1.degraded && d2.allowed && d2.degraded));
  CHECK(counts->errors("connect") == 1);
  CHECK(counts->errors("circuit_open") == 0);
  CHECK(storage.stats().short_circuits == 1);
  CHECK(counts->opened() == 1);
  CHECK(counts->round_trips_failed() == 1);
  const std::string text = exporter->render();
  CHECK(text.find("\nratelimit_redis_errors_total{kind=\"connect\"} 1\n") != std::string::npos);
  CHECK(text.find("\nratelimit_redis_breaker_open{node=\"" + o.host + ":1\"} 1\n") !=
        std::string::npos);
}
