// The calendar quota in rules files (the `calendar_quota` extension): a monthly quota
// and a per-second rate on one request, all or nothing, on every storage of `Backends`; and the
// extension's errors, which name the line, the field and the value.

#include <catch2/catch.hpp>

#include <chrono>
#include <stdexcept>
#include <string>

#include <date/date.h>
#include <ratelimit/calendar.hpp>
#include <ratelimit/rules.hpp>
#include <ratelimit/testing/manual_clock.hpp>

#include "support/backends.hpp"

using namespace std::chrono_literals;
using ratelimit::ManualClock;
using ratelimit::QuotaAlgorithms;

namespace {

/// ns since the Unix epoch of y-m-d at hh:mm UTC.
std::chrono::nanoseconds rules_utc(int y, unsigned m, unsigned d, int hh = 0, int mm = 0) {
  const date::sys_days day{date::year{y} / date::month{m} / date::day{d}};
  return std::chrono::nanoseconds{
      (day + std::chrono::hours{hh} + std::chrono::minutes{mm}).time_since_epoch()};
}

// Both limits are per client (the api_key catch-all), so a request's counters share the
// client's tag: one Redis Cluster slot.
constexpr const char* quota_rules = R"(domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket}
  - key: plan
    value: free
    descriptors:
      - key: api_key
        rate_limit:
          unit: month
          requests_per_unit: 3
          algorithm: calendar_quota
          time_zone: Europe/Madrid
          name: free-monthly
)";

std::string quota_rules_error(const std::string& rate_limit) {
  try {
    (void)ratelimit::Rules::from_string<QuotaAlgorithms>(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: " + rate_limit + "\n", "rules.yaml");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("A rules file's monthly quota and rate decide all or nothing",
                        "[calendar][quota][rules]", Backends) {
  // 2023-03-31 21:00 UTC = 23:00 CEST: March in Madrid ends at 00:00 CEST of April 1 =
  // 2023-03-31 22:00 UTC, 1 h away.
  ManualClock clock;
  clock.set(rules_utc(2023, 3, 31, 21));
  ratelimit::RuleSet<typename TestType::Storage, ManualClock, QuotaAlgorithms> set(
      ratelimit::Rules::from_string<QuotaAlgorithms>(quota_rules), TestType::make(), clock);
  const auto request = [&](std::int64_t cost = 1) {
    return set.decide({{"plan", "free"}, {"api_key", "K"}}, cost);
  };
  // outcomes[0]: the rate (token bucket of 2, 2 per s); outcomes[1]: the quota (3 per month).
  REQUIRE(request(2));  // bucket 2 - 2 = 0, quota 3 - 2 = 1
  // Denied by the rate: the quota spends nothing (1 left), a token comes in 0.5 s.
  auto d = request();
  CHECK_FALSE(d.allowed);
  REQUIRE(d.outcomes.size() == 2);
  CHECK(d.outcomes[0].decision.retry_after == 500ms);
  CHECK(d.outcomes[1].decision.remaining == 1);
  // 1 s later (bucket full again): one passes and spends the quota's last.
  clock.advance(1s);
  d = request();
  REQUIRE(d.allowed);
  CHECK(d.outcomes[1].decision.remaining == 0);
  // Another second: denied by the quota until 22:00 UTC (from 21:00:02, 59 min 58 s); the
  // bucket spends nothing (its dry run: 2 - 1 tokens + 2 refilled, capped at 2).
  clock.advance(1s);
  d = request();
  CHECK_FALSE(d.allowed);
  CHECK(d.outcomes[1].decision.retry_after == 59min + 58s);
  CHECK(d.outcomes[0].decision.allowed);
  CHECK(d.decision().retry_after == 59min + 58s);  // the quota speaks for the request
  // 00:00 CEST of April 1: a month of 30 days with no DST change, and the bucket still full.
  clock.set(rules_utc(2023, 3, 31, 22));
  d = request();
  REQUIRE(d.allowed);
  CHECK(d.outcomes[1].decision.remaining == 2);
  CHECK(d.outcomes[1].decision.reset_after == 30 * 24h);
  CHECK(d.outcomes[0].decision.remaining == 1);
}

TEMPLATE_LIST_TEST_CASE("A rules file's yearly quota runs on the calendar year of its time zone",
                        "[calendar][quota][rules][year]", Backends) {
  // Both limits are per client (api_key), so they share the client's Redis Cluster slot.
  const auto rules = ratelimit::Rules::from_string<QuotaAlgorithms>(R"(domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: year, requests_per_unit: 2, algorithm: calendar_quota}
  - key: zone
    value: madrid
    descriptors:
      - key: api_key
        rate_limit:
          unit: Year
          requests_per_unit: 2
          algorithm: calendar_quota
          time_zone: Europe/Madrid
)");
  // 2024-12-31 23:30 UTC is 2025-01-01 00:30 CET (UTC+1 in winter): the year of UTC ends at
  // 2025-01-01 00:00 UTC, 30 min away; that of Madrid at 2026-01-01 00:00 CET = 2025-12-31
  // 23:00 UTC, 365 days (2025 is not a leap year) minus 30 min away.
  ManualClock clock;
  clock.set(rules_utc(2024, 12, 31, 23, 30));
  ratelimit::RuleSet<typename TestType::Storage, ManualClock, QuotaAlgorithms> set(
      rules, TestType::make(), clock);
  const auto utc = [&](std::int64_t cost = 1) { return set.decide({{"api_key", "K"}}, cost); };
  auto d = utc(2);
  REQUIRE(d.allowed);
  CHECK(d.decision().remaining == 0);
  CHECK(d.decision().reset_after == 30min);
  d = utc();
  CHECK_FALSE(d.allowed);
  CHECK(d.decision().retry_after == 30min);
  // A request of the Madrid zone matches both limits (outcomes in file order: UTC, Madrid); on
  // another client, whose UTC year is fresh, Madrid's year has 365 days - 30 min to go.
  const auto madrid = [&](std::int64_t cost = 1) {
    return set.decide({{"zone", "madrid"}, {"api_key", "M"}}, cost);
  };
  d = madrid(2);
  REQUIRE(d.allowed);
  REQUIRE(d.outcomes.size() == 2);
  CHECK(d.outcomes[1].decision.reset_after == 365 * 24h - 30min);
  d = madrid();
  CHECK_FALSE(d.allowed);
  CHECK(d.outcomes[1].decision.retry_after == 365 * 24h - 30min);
  // At 2025-12-31 23:00 UTC, Madrid's 2026 begins (and M's UTC year 2024 is long over): one
  // admitted, with 2026's 365 days to go (2026-12-31 23:00 UTC).
  clock.set(rules_utc(2025, 12, 31, 23));
  d = madrid();
  REQUIRE(d.allowed);
  CHECK(d.outcomes[1].decision.remaining == 1);
  CHECK(d.outcomes[1].decision.reset_after == 365 * 24h);
}

TEST_CASE("The calendar extension of rules files refuses what it cannot mean",
          "[calendar][quota][rules][errors]") {
  CHECK_THAT(quota_rules_error("{unit: day, requests_per_unit: 1, algorithm: calendar_quota, "
                               "time_zone: Europe/Madird}"),
             Catch::StartsWith("rules.yaml:3: rate_limit.time_zone = \"Europe/Madird\": not an "
                               "IANA time zone of this system's tzdata"));
  CHECK(quota_rules_error("{unit: minute, requests_per_unit: 1, algorithm: calendar_quota}") ==
        "rules.yaml:3: rate_limit.unit = \"minute\": a calendar_quota's unit is day, week, "
        "month or year");
  CHECK(quota_rules_error("{unit: week, requests_per_unit: 1, algorithm: calendar_quota, "
                          "first_day: funday}") ==
        "rules.yaml:3: rate_limit.first_day = \"funday\": not a day of the week (monday .. "
        "sunday)");
  CHECK(quota_rules_error("{unit: day, requests_per_unit: 1, algorithm: calendar_quota, "
                          "first_day: sunday}") ==
        "rules.yaml:3: rate_limit.first_day = \"sunday\": only a week has a first day");
  CHECK(quota_rules_error("{unit: month, requests_per_unit: 1}") ==
        "rules.yaml:3: rate_limit.algorithm = \"sliding_counter\": takes no week or month unit, "
        "time_zone or first_day (extensions of calendar algorithms such as calendar_quota)");
  CHECK(quota_rules_error("{unit: day, requests_per_unit: 1, algorithm: fixed_window, "
                          "time_zone: UTC}") ==
        "rules.yaml:3: rate_limit.algorithm = \"fixed_window\": takes no week or month unit, "
        "time_zone or first_day (extensions of calendar algorithms such as calendar_quota)");
  // Without the quota's registry the algorithm is unknown.
  CHECK_THROWS_WITH(ratelimit::Rules::from_string(
                        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, "
                        "requests_per_unit: 1, algorithm: calendar_quota}\n",
                        "rules.yaml"),
                    Catch::Contains("unknown algorithm"));
  // A week from Sunday in UTC parses; the rule keeps what the file said.
  const auto rules = ratelimit::Rules::from_string<QuotaAlgorithms>(
      "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: Week, requests_per_unit: 9, "
      "algorithm: calendar_quota, first_day: Sunday}\n");
  REQUIRE(rules.rules().size() == 1);
  CHECK(rules.rules()[0].unit == "week");
  CHECK(rules.rules()[0].first_day == "Sunday");
  const auto params =
      ratelimit::params_from_limit<ratelimit::CalendarQuotaModel>(rules.rules()[0].limit_spec());
  CHECK(params.limit == 9);
  CHECK(params.calendar.unit() == ratelimit::CalendarUnit::week);
  CHECK(params.calendar.first_day() == std::chrono::Sunday);
  CHECK(params.calendar.time_zone() == "UTC");
}

#if defined(RATELIMIT_TEST_WITH_REDIS) && !defined(RATELIMIT_TEST_WITH_CLUSTER)
TEST_CASE("A rule set with a quota rule refuses a Redis storage on Redis's clock",
          "[calendar][quota][rules][redis]") {
  ratelimit::RedisOptions options = rltest::test_redis_options("quota-rules");
  options.time_source = ratelimit::TimeSource::redis;
  CHECK_THROWS_WITH((ratelimit::RuleSet<ratelimit::RedisStorage, ManualClock, QuotaAlgorithms>(
                        ratelimit::Rules::from_string<QuotaAlgorithms>(quota_rules),
                        ratelimit::RedisStorage(options))),
                    Catch::StartsWith("options.time_source = redis: algorithm calendar_quota"));
}
#endif
