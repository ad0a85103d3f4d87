// Cold start of the far storages: a script's first use on a node goes as EVAL, and `warm_up`
// connects and loads the scripts beforehand, so that a fresh process's first decision is one
// round trip (counted by the listener's round-trip events and
// the script reloads, never by time). On servers of the test's own, whose script caches start
// empty.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include <catch2/catch.hpp>
#include <ratelimit/redis/lease/storage.hpp>
#include <ratelimit/redis/regional/storage.hpp>

#include "far/regions.hpp"
#include "redis/redis_admin.hpp"
#include "support/redis_backend.hpp"

namespace {

using namespace std::chrono_literals;

/// Counts round trips to any node.
struct RoundTrips : ratelimit::Listener {
  std::atomic<int> count{0};
  void on_round_trip(const ratelimit::RoundTripEvent&) override { count.fetch_add(1); }
};

ratelimit::LeaseOptions leases_on(const rltest::RedisEndpoint& e) {
  ratelimit::LeaseOptions o;
  o.redis.host = e.host;
  o.redis.port = e.port;
  o.redis.key_prefix = rltest::unique_prefix("cold");
  return o;
}

}  // namespace

TEST_CASE("A leased storage makes its first decision in one round trip, warmed up or not",
          "[far][lease][redis]") {
  (void)rltest::redis_endpoint();
  rltest::ThrowawayRedis server;
  const ratelimit::detail::WindowParams p{100, 1'000'000'000};
  {
    ratelimit::LeasedStorage cold(leases_on(server.endpoint()));
    auto trips = std::make_shared<RoundTrips>();
    cold.attach_listener(trips);
    REQUIRE(cold.bind<ratelimit::FixedWindowModel>("api", p).apply("k", 1ms, {1}).allowed);
    // The script's first use on the node went as EVAL with its body: no NOSCRIPT, no reload.
    CHECK(trips->count.load() == 1);
    CHECK(cold.redis_stats().script_loads == 0);
  }
  rltest::RedisAdmin(server.endpoint()).run({"SCRIPT", "FLUSH"});
  ratelimit::LeasedStorage warm(leases_on(server.endpoint()));
  REQUIRE(warm.warm_up());
  auto trips = std::make_shared<RoundTrips>();
  warm.attach_listener(trips);
  REQUIRE(warm.bind<ratelimit::FixedWindowModel>("api", p).apply("k", 1ms, {1}).allowed);
  CHECK(trips->count.load() == 1);
  CHECK(warm.redis_stats().script_loads == 0);
}

TEST_CASE("A leased storage's first decision after its Redis restarted is one EVAL",
          "[far][lease][redis]") {
  // Pins a reconnect that sent EVALSHA on the new connection (NOSCRIPT, then EVAL): two round
  // trips after the connect, past the default deadline for a Redis 40 ms away.
  (void)rltest::redis_endpoint();
  rltest::ThrowawayRedis server;
  ratelimit::LeasedStorage s(leases_on(server.endpoint()));
  const ratelimit::detail::WindowParams p{100, 1'000'000'000};
  auto b = s.bind<ratelimit::FixedWindowModel>("api", p, 1);  // L = 1: every decision asks
  REQUIRE(b.apply("k", 1ms, {1}).allowed);
  REQUIRE(b.apply("k", 2ms, {1}).allowed);  // EVALSHA: the node holds the script
  server.kill();
  server.start();
  auto trips = std::make_shared<RoundTrips>();
  s.attach_listener(trips);
  const auto d = b.apply("k", 3ms, {1});
  CHECK(d.allowed);
  CHECK_FALSE(d.degraded);
  CHECK(trips->count.load() == 1);
  CHECK(s.redis_stats().script_loads == 0);  // no NOSCRIPT
}

TEST_CASE("A warmed-up regional storage makes its first decision in one round trip",
          "[far][redis]") {
  rltest::Regions regions(2);
  ratelimit::RegionalStorage s(regions.options(0, 100ms, 40ms));
  REQUIRE(s.warm_up());
  auto trips = std::make_shared<RoundTrips>();
  s.attach_listener(trips);
  auto b = s.bind<ratelimit::FixedWindowModel>("api", {100, 1'000'000'000});
  REQUIRE(b.apply("k", 1ms, {1}).allowed);
  CHECK(trips->count.load() == 1);
  CHECK(s.local_stats().script_loads == 0);
  // The exchange's scripts were loaded on the other region too: its round is one push.
  const int before = trips->count.load();
  CHECK(s.exchange(1ms).units_pushed == 1);
  // claim (local), push (remote), acknowledgement (local): three round trips, no reload.
  CHECK(trips->count.load() - before == 3);
}
