// Envoy-compatible rules on Redis: the reference service's documented configurations
// (envoy_table.hpp) decided by RuleSet<RedisStorage> exactly as in process, one all-or-nothing
// script per round, shadow mode and replaces included. Needs RATELIMIT_TEST_REDIS (see
// support/redis_backend.hpp; without a server the test fails, and always under CI=true). Time only
// from ManualClock.

#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>
#include <ratelimit/rules.hpp>

#include "envoy_table.hpp"
#include "support/redis_backend.hpp"

using ratelimit::ManualClock;
using ratelimit::Rules;
using EnvoyRedisSet = ratelimit::RuleSet<ratelimit::RedisStorage, ManualClock>;

TEST_CASE("The reference service's documented configurations match as it documents, on Redis",
          "[rules][envoy][redis]") {
  std::vector<ratelimit::RedisStorage> storages;  // handles, to read their stats afterwards
  envoy_table::run_all([&](Rules rules) {
    // A fresh key prefix per configuration: no counter is shared between scenarios.
    storages.emplace_back(rltest::test_redis_options("envoy"));
    return std::make_unique<EnvoyRedisSet>(std::move(rules), storages.back(), ManualClock{});
  });
  REQUIRE_FALSE(storages.empty());
  // Every decision came from Redis (fail-closed options: a degraded one would be a denial).
  for (auto& s : storages) CHECK(s.stats().degraded_decisions == 0);
}

TEST_CASE("On Redis the non-blocking descriptor-list call decides the same table",
          "[rules][envoy][redis][async]") {
  std::vector<ratelimit::RedisStorage> storages;
  envoy_table::run_all([&](Rules rules) {
    storages.emplace_back(rltest::test_redis_options("envoy-async"));
    return std::make_unique<envoy_table::AsyncSet<EnvoyRedisSet>>(
        envoy_table::AsyncSet<EnvoyRedisSet>{
            std::make_unique<EnvoyRedisSet>(std::move(rules), storages.back(), ManualClock{})});
  });
  for (auto& s : storages) CHECK(s.stats().degraded_decisions == 0);
}

TEST_CASE("On Redis a shadow denial drops only that limit, and the others spend",
          "[rules][envoy][redis]") {
  ManualClock clock;
  EnvoyRedisSet set(Rules::from_string(R"(domain: shadow
descriptors:
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: e
    rate_limit: {unit: minute, requests_per_unit: 3}
)"),
                    ratelimit::RedisStorage(rltest::test_redis_options("envoy-shadow")), clock);
  const ratelimit::RateLimitRequest both{
      "shadow", {envoy_table::d({{"s", "x"}}), envoy_table::d({{"e", "x"}})}, 0};
  // 1st: both admit (s 1 - 1 = 0, e 3 - 1 = 2). 2nd and 3rd: s would deny, e spends: 1, 0.
  REQUIRE(set.decide(both).allowed);
  for (std::int64_t left : {1, 0}) {
    const auto r = set.decide(both);
    CHECK(r.allowed);
    CHECK(r.shadow_denials == std::vector<std::size_t>{0});
    CHECK(r.statuses[1].decision.remaining == left);
  }
  // 4th: e denies: the request is denied and nothing is spent.
  const auto r = set.decide(both);
  CHECK_FALSE(r.allowed);
  CHECK(r.statuses[1].code == ratelimit::DescriptorStatus::Code::over_limit);
  CHECK(set.storage().stats().degraded_decisions == 0);
}
