// The calendar quota (docs/quota.md) on every storage of `Backends`: its periods and retry_after,
// and beside a rate in one all-or-nothing decision (`try_acquire_all`), each denying in turn
// while the other spends nothing. Times are Unix times in whole seconds (every storage decides
// them exactly), dates in the past; each expected value is derived beside it.

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>

#include <date/date.h>
#include <ratelimit/calendar.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/testing/manual_clock.hpp>

#include "support/backends.hpp"

using namespace std::chrono_literals;
using ratelimit::CalendarQuota;
using ratelimit::CalendarUnit;
using ratelimit::Decision;
using ratelimit::ManualClock;

namespace {

/// ns since the Unix epoch of y-m-d at hh:mm:ss UTC.
std::chrono::nanoseconds at_utc(int y, unsigned m, unsigned d, int hh = 0, int mm = 0, int ss = 0) {
  const date::sys_days day{date::year{y} / date::month{m} / date::day{d}};
  return std::chrono::nanoseconds{
      (day + std::chrono::hours{hh} + std::chrono::minutes{mm} + std::chrono::seconds{ss})
          .time_since_epoch()};
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("A spent daily quota retries exactly at the next local midnight",
                        "[calendar][quota]", Backends) {
  // 3 per day in Madrid, from 2023-03-26 12:00 UTC (14:00 CEST). That day ends at 00:00 CEST
  // of the 27th = 2023-03-26 22:00 UTC (the day lost an hour at 02:00 CET): 10 h away.
  ManualClock clock;
  clock.set(at_utc(2023, 3, 26, 12));
  CalendarQuota<ManualClock, typename TestType::Storage> quota(
      {.limit = 3, .unit = CalendarUnit::day, .time_zone = "Europe/Madrid"}, TestType::make(),
      clock, "daily");
  Decision d = quota.try_acquire("k");
  CHECK(d.allowed);
  CHECK(d.limit == 3);
  CHECK(d.remaining == 2);
  CHECK(d.reset_after == 10h);
  CHECK(quota.try_acquire("k", 2).remaining == 0);
  // Spent: denied until 22:00 UTC, 10 h away; the denial changes nothing.
  d = quota.try_acquire("k");
  CHECK_FALSE(d.allowed);
  CHECK(d.retry_after == 10h);
  CHECK(quota.peek("k").remaining == 0);
  // A cost above the limit never passes.
  CHECK(quota.try_acquire("k", 4).retry_after == Decision::never);
  // 1 ms before the reset: still denied, retry_after 1 ms.
  clock.set(at_utc(2023, 3, 26, 22) - 1ms);
  CHECK(quota.try_acquire("k").retry_after == 1ms);
  // At 22:00 UTC = 00:00 CEST of the 27th, a fresh day of 24 h (no change on the 27th).
  clock.set(at_utc(2023, 3, 26, 22));
  d = quota.try_acquire("k");
  CHECK(d.allowed);
  CHECK(d.remaining == 2);
  CHECK(d.reset_after == 24h);
  // Other keys are untouched; reset frees this one.
  CHECK(quota.try_acquire("other").remaining == 2);
  quota.reset("k");
  CHECK(quota.peek("k").remaining == 3);
}

TEMPLATE_LIST_TEST_CASE("A monthly quota resets on the first, after 29 days in a leap February",
                        "[calendar][quota]", Backends) {
  // 2 per month in UTC. 2024-02-10 00:00 UTC: February 2024 has 29 days (2024 is a leap
  // year), so the month ends at 2024-03-01 00:00 UTC, 20 days away (29 - 9 days elapsed).
  ManualClock clock;
  clock.set(at_utc(2024, 2, 10));
  CalendarQuota<ManualClock, typename TestType::Storage> quota(
      {.limit = 2, .unit = CalendarUnit::month}, TestType::make(), clock, "monthly");
  CHECK(quota.try_acquire("k", 2).reset_after == 20 * 24h);
  // On the 29th at 23:59:59 the month has 1 s left.
  clock.set(at_utc(2024, 2, 29, 23, 59, 59));
  const Decision d = quota.try_acquire("k");
  CHECK_FALSE(d.allowed);
  CHECK(d.retry_after == 1s);
  // March 1st: a new month of 31 days.
  clock.set(at_utc(2024, 3, 1));
  CHECK(quota.try_acquire("k").reset_after == 31 * 24h);
}

TEMPLATE_LIST_TEST_CASE("A weekly quota from Sunday in New York lasts 7 days and an hour",
                        "[calendar][quota]", Backends) {
  // 1 per week from Sunday in New York, on Wednesday 2023-11-01 12:00 UTC (08:00 EDT). The
  // week started Sunday 2023-10-29 00:00 EDT and ends Sunday 2023-11-05 00:00 EDT = 04:00 UTC
  // (the clocks go back at 02:00 that day, after the week ends): 3 days 16 h away.
  ManualClock clock;
  clock.set(at_utc(2023, 11, 1, 12));
  CalendarQuota<ManualClock, typename TestType::Storage> quota({.limit = 1,
                                                                .unit = CalendarUnit::week,
                                                                .time_zone = "America/New_York",
                                                                .first_day = std::chrono::Sunday},
                                                               TestType::make(), clock, "weekly");
  CHECK(quota.try_acquire("k").reset_after == 3 * 24h + 16h);
  CHECK(quota.try_acquire("k").retry_after == 3 * 24h + 16h);
  // The next week runs from 2023-11-05 04:00 UTC to Sunday 2023-11-12 00:00 EST = 05:00 UTC:
  // 7 days and 1 h (the day of the 5th has 25 h).
  clock.set(at_utc(2023, 11, 5, 4));
  CHECK(quota.try_acquire("k").reset_after == 7 * 24h + 1h);
}

TEMPLATE_LIST_TEST_CASE(
    "A quota and a rate decided together: each denial spends nothing of the "
    "other",
    "[calendar][quota][all_of]", Backends) {
  // A quota of 5 per day in Madrid beside a token bucket of 2 refilled at 1 per second, on one
  // storage, from 2023-10-29 12:00 UTC (13:00 CET, the day of 25 h that ends at 23:00 UTC).
  ManualClock clock;
  clock.set(at_utc(2023, 10, 29, 12));
  auto storage = TestType::make();
  using Storage = typename TestType::Storage;
  CalendarQuota<ManualClock, Storage> quota(
      {.limit = 5, .unit = CalendarUnit::day, .time_zone = "Europe/Madrid"}, storage, clock,
      "quota");
  ratelimit::TokenBucket<ManualClock, Storage> rate(
      {.capacity = 2, .refill = ratelimit::per_second(1)}, storage, clock, "rate");
  const std::string key = "api-key-7";
  // Two requests pass both: the quota has 5 - 2 = 3 left, the bucket 2 - 2 = 0.
  REQUIRE(ratelimit::try_acquire_all(key, 1, quota, rate));
  auto both = ratelimit::try_acquire_all(key, 1, quota, rate);
  REQUIRE(both.allowed);
  CHECK(both.decisions[0].remaining == 3);
  CHECK(both.decisions[1].remaining == 0);
  // The third is denied by the rate (a token in 1 s); the quota spends nothing: still 3.
  both = ratelimit::try_acquire_all(key, 1, quota, rate);
  CHECK_FALSE(both.allowed);
  CHECK(both.decisions[0].allowed);  // the quota's dry run would have admitted it
  CHECK(both.decisions[0].remaining == 3);
  CHECK_FALSE(both.decisions[1].allowed);
  CHECK(both.decisions[1].retry_after == 1s);
  CHECK(both.decision().retry_after == 1s);  // the rate speaks for the request
  CHECK_FALSE(both.decision().allowed);
  CHECK(quota.peek(key).remaining == 3);
  // 1 s later one token: admitted (quota 2 left); 2 s later two tokens: two more (quota 0).
  clock.advance(1s);
  REQUIRE(ratelimit::try_acquire_all(key, 1, quota, rate));
  clock.advance(2s);
  REQUIRE(ratelimit::try_acquire_all(key, 2, quota, rate));
  CHECK(quota.peek(key).remaining == 0);
  // 2 s later the bucket is full again (2 tokens), but the quota is spent: denied by the
  // quota until 23:00 UTC, from 12:00:05 that is 10 h 59 min 55 s; the bucket spends nothing.
  clock.advance(2s);
  both = ratelimit::try_acquire_all(key, 1, quota, rate);
  CHECK_FALSE(both.allowed);
  CHECK_FALSE(both.decisions[0].allowed);
  CHECK(both.decisions[0].retry_after == 10h + 59min + 55s);
  CHECK(both.decisions[1].allowed);
  CHECK(both.decision().retry_after == 10h + 59min + 55s);  // the quota speaks
  CHECK(rate.peek(key).remaining == 2);
  // At the next local midnight (23:00 UTC) both admit again: the quota has 5 - 1 = 4 left.
  clock.set(at_utc(2023, 10, 29, 23));
  both = ratelimit::try_acquire_all(key, 1, quota, rate);
  CHECK(both.allowed);
  CHECK(both.decisions[0].remaining == 4);
  CHECK(both.decisions[0].reset_after == 24h);  // Monday the 30th: 24 h
  // Admitted: the rate (1 token left of 2) speaks, having fewer remaining than the quota (4).
  CHECK(both.decision().allowed);
  CHECK(both.decision().remaining == 1);
}

TEMPLATE_LIST_TEST_CASE("A quota decides at both ends of the clock range", "[calendar][quota]",
                        Backends) {
  ManualClock clock;  // at 0: 1970-01-01 00:00 UTC = 1969-12-31 19:00 EST in New York
  CalendarQuota<ManualClock, typename TestType::Storage> quota(
      {.limit = 1, .unit = CalendarUnit::day, .time_zone = "America/New_York"}, TestType::make(),
      clock, "range");
  // The New York day began before the epoch and ends at 1970-01-01 00:00 EST = 05:00 UTC.
  CHECK(quota.try_acquire("k").reset_after == 5h);
  CHECK(quota.try_acquire("k").retry_after == 5h);
  // At the clock's last reading, 2^62 ns = 2116-02-20 23:53:38.427387904 UTC, a month in UTC
  // ends at 2116-03-01 00:00 UTC (2116 is a leap year: February has 29 days), past the range.
  // Regression: the Redis reply's period end was read as a clock time, so past 2^62 ns it was
  // refused as a protocol error and the decision degraded.
  CalendarQuota<ManualClock, typename TestType::Storage> monthly(
      {.limit = 1, .unit = CalendarUnit::month}, TestType::make(), clock, "range-month");
  clock.set(ratelimit::max_clock_time);
  const auto to_march = at_utc(2116, 3, 1) - ratelimit::max_clock_time;
  CHECK(to_march > 8 * 24h);  // 8 days 0 h 6 min 21.57... s
  // Redis decides at whole microseconds: 2^62 ns rounded down to a us is 904 ns earlier.
  const auto expected = to_march + (ratelimit::max_clock_time % TestType::resolution);
  const Decision d = monthly.try_acquire("k");
  CHECK(d.allowed);
  CHECK(d.reset_after == expected);
  CHECK_FALSE(d.degraded);
  CHECK(monthly.try_acquire("k").retry_after == expected);
}

TEMPLATE_LIST_TEST_CASE("A daily quota in UTC decides as a fixed window of 24 h, every field",
                        "[calendar][quota][differential]", Backends) {
  // UTC days are the 24-h windows of the Unix epoch, so from the epoch on a quota of N per UTC
  // day and FixedWindow(per_day(N)) are the same limit: 2,000 random steps (waits of 0 to 4 h
  // in whole ms, costs 1 to N + 1, peeks and resets) must give equal Decisions.
  constexpr std::int64_t n = 5;
  ManualClock clock;
  auto storage = TestType::make();
  using Storage = typename TestType::Storage;
  CalendarQuota<ManualClock, Storage> quota({.limit = n, .unit = CalendarUnit::day}, storage, clock,
                                            "utc-quota");
  ratelimit::FixedWindow<ManualClock, Storage> window(ratelimit::per_day(n), storage, clock,
                                                      "utc-window");
  std::mt19937_64 rng(20261201);
  for (int step = 0; step < 2000; ++step) {
    clock.advance(std::chrono::milliseconds{
        std::uniform_int_distribution<std::int64_t>(0, 4 * 3'600'000)(rng)});
    const auto key = "k" + std::to_string(rng() % 3);
    const int what = static_cast<int>(rng() % 10);
    INFO("step " << step << ", key " << key << ", t = " << clock.now().count() << " ns");
    if (what == 0) {
      CHECK(quota.peek(key) == window.peek(key));
    } else if (what == 1) {
      quota.reset(key);
      window.reset(key);
    } else {
      const auto cost = std::uniform_int_distribution<std::int64_t>(1, n + 1)(rng);
      REQUIRE(quota.try_acquire(key, cost) == window.try_acquire(key, cost));
    }
  }
}

TEMPLATE_LIST_TEST_CASE("A quota and a rate decided without blocking, all or nothing",
                        "[calendar][quota][all_of][async]", Backends) {
  // 1 per month in Kolkata (UTC+5:30) beside a bucket of 5 refilled at 5 per second, from
  // 2023-06-15 00:00 UTC (05:30 IST); June ends at 2023-06-30 18:30 UTC: 15 days 18.5 h away.
  ManualClock clock;
  clock.set(at_utc(2023, 6, 15));
  auto storage = TestType::make();
  using Storage = typename TestType::Storage;
  auto quota = std::make_unique<CalendarQuota<ManualClock, Storage>>(
      ratelimit::CalendarQuotaOptions{
          .limit = 1, .unit = CalendarUnit::month, .time_zone = "Asia/Kolkata"},
      storage, clock, "async-quota");
  ratelimit::TokenBucket<ManualClock, Storage> rate(
      {.capacity = 5, .refill = ratelimit::per_second(5)}, storage, clock, "async-rate");
  const auto decide = [&] {
    std::promise<ratelimit::AllOfDecision<2>> promise;
    auto future = promise.get_future();
    ratelimit::try_acquire_all_async(
        "k", 1, [&promise](ratelimit::AllOfDecision<2> d) { promise.set_value(d); }, *quota, rate);
    return future.get();
  };
  auto d = decide();
  REQUIRE(d.allowed);
  CHECK(d.decisions[0].reset_after == 15 * 24h + 18h + 30min);
  CHECK(d.decisions[1].remaining == 4);
  // Denied by the quota until the month's end; the bucket spends nothing (still 4).
  d = decide();
  CHECK_FALSE(d.allowed);
  CHECK(d.decision().retry_after == 15 * 24h + 18h + 30min);
  CHECK(rate.peek("k").remaining == 4);
  // The call copies the bindings: a limiter destroyed once the call returns is not needed.
  std::promise<ratelimit::AllOfDecision<2>> promise;
  auto future = promise.get_future();
  ratelimit::try_acquire_all_async(
      "k", 1, [&promise](ratelimit::AllOfDecision<2> r) { promise.set_value(r); }, *quota, rate);
  quota.reset();
  CHECK_FALSE(future.get().allowed);
  // A bad cost throws before anything is sent.
  CHECK_THROWS_AS(ratelimit::try_acquire_all_async(
                      "k", 0, [](ratelimit::AllOfDecision<2>) {}, rate, rate),
                  std::invalid_argument);
}

TEST_CASE("A calendar quota refuses a bad limit or zone naming the field", "[calendar][errors]") {
  CHECK_THROWS_WITH(CalendarQuota<ManualClock>({.limit = 0, .unit = CalendarUnit::day}),
                    "limit = 0: must be in [1, 1000000000]");
  CHECK_THROWS_AS(CalendarQuota<ManualClock>({.limit = 1, .time_zone = "Mars/Olympus_Mons"}),
                  std::invalid_argument);
  CHECK_THROWS_WITH(ratelimit::CalendarQuotaModel::from_rate(ratelimit::per_hour(5)),
                    Catch::StartsWith("rate.period (ns) = 3600000000000: a calendar quota's "
                                      "period is a day or a week"));
}

#if defined(RATELIMIT_TEST_WITH_REDIS) || defined(RATELIMIT_TEST_WITH_CLUSTER)
TEST_CASE("On Redis a quota refuses TimeSource::redis: the client computes its periods",
          "[calendar][quota][redis]") {
  // Redis has no time-zone data, so the period's end comes from the client's time; a storage
  // deciding on Redis's clock could put the decision in another period than the one sent.
#if defined(RATELIMIT_TEST_WITH_CLUSTER)
  ratelimit::RedisClusterOptions options = rltest::test_cluster_options("quota");
  options.redis.time_source = ratelimit::TimeSource::redis;
  ratelimit::RedisClusterStorage cluster(options);
  ratelimit::RedisStorage redis = cluster;
#else
  ratelimit::RedisOptions options = rltest::test_redis_options("quota");
  options.time_source = ratelimit::TimeSource::redis;
  ratelimit::RedisStorage redis(options);
#endif
  CHECK_THROWS_WITH(
      (CalendarQuota<ManualClock, ratelimit::RedisStorage>({.limit = 1}, redis)),
      "options.time_source = redis: algorithm calendar_quota needs the client's time (its "
      "periods are computed by the client, Redis has no time-zone data); use "
      "TimeSource::client with SystemClock");
  // The rates on the same storage keep Redis's time.
  ratelimit::TokenBucket<ManualClock, ratelimit::RedisStorage> rate(
      {.capacity = 1, .refill = ratelimit::per_second(1)}, redis);
  CHECK(rate.try_acquire("k").allowed);
}
#endif

TEMPLATE_LIST_TEST_CASE("A quota lowered below a key's count denies with 0 remaining, not degraded",
                        "[calendar][quota][regression]", Backends) {
  // Fault: a count above the quota (spent under a higher one: a reload that lowered it, or a
  // rolling deploy) failed the client's check of Redis's reply (c <= N), so each decision of
  // that key was degraded (admitted under fail_open); in process remaining was 2 - 5 = -3.
  // 10 a day, then 2 a day under the same name, from 2023-03-26 12:00 UTC: 12 h to midnight.
  ManualClock clock;
  clock.set(at_utc(2023, 3, 26, 12));
  auto storage = TestType::make();
  CalendarQuota<ManualClock, typename TestType::Storage> high({.limit = 10}, storage, clock,
                                                              "lowered");
  CalendarQuota<ManualClock, typename TestType::Storage> low({.limit = 2}, storage, clock,
                                                             "lowered");
  CHECK(high.try_acquire("k", 5).remaining == 5);  // 10 - 5
  const Decision d = low.try_acquire("k");
  CHECK_FALSE(d.allowed);
  CHECK_FALSE(d.degraded);
  CHECK(d.limit == 2);
  CHECK(d.remaining == 0);  // max(0, 2 - 5)
  CHECK(d.retry_after == 12h);
  CHECK(high.peek("k").remaining == 5);  // the denial spent nothing
}
