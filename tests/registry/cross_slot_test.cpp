// On Redis Cluster a multi-key decision runs as one script on one node, so its keys must share a
// slot. What a decision spanning slots does (docs/cluster.md): the cluster refuses it
// (CROSSSLOT) and the failure policy decides every part, degraded; nothing is spent.

#include <catch2/catch.hpp>

#include <chrono>

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>
#include <ratelimit/rules.hpp>
#include <ratelimit/testing/manual_clock.hpp>

#include "support/cluster_backend.hpp"

using namespace std::chrono_literals;

TEST_CASE("On a cluster a rule-set request spanning slots is degraded and spends nothing",
          "[cluster][rules]") {
  // api_key is per client (tag "1:K"); path=/report is shared (its own tag): two slots.
  const auto rules = ratelimit::Rules::from_string(R"(domain: cross
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: token_bucket}
  - key: path
    value: /report
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
)");
  ratelimit::ManualClock clock;
  clock.set(100s);
  auto options = rltest::test_cluster_options("cross");
  options.redis.failure_policy = ratelimit::FailurePolicy::fail_closed;
  ratelimit::RedisClusterStorage cluster(options);
  ratelimit::RuleSet<ratelimit::RedisClusterStorage, ratelimit::ManualClock> set(rules, cluster,
                                                                                 clock);
  const auto both = set.decide({{"api_key", "K"}, {"path", "/report"}});
  CHECK_FALSE(both.allowed);
  REQUIRE(both.outcomes.size() == 2);
  CHECK(both.outcomes[0].decision.degraded);
  CHECK(both.outcomes[1].decision.degraded);
  // One slot: exact, and the refused request above spent nothing (10 - 1 = 9 left).
  const auto one = set.decide({{"api_key", "K"}});
  CHECK(one.allowed);
  CHECK_FALSE(one.outcomes[0].decision.degraded);
  CHECK(one.outcomes[0].decision.remaining == 9);
}
