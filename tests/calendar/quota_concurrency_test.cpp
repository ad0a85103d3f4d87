// The calendar quota beside a rate from many threads: with the clock frozen, K
// threads deciding one key with `try_acquire_all` admit exactly the smaller of the two limits,
// and the other limiter spends exactly what was admitted, never a unit for a denied request.
// Label `concurrent`: the test command also runs it under ThreadSanitizer.

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <latch>
#include <thread>
#include <vector>

#include <date/date.h>
#include <ratelimit/calendar.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/testing/manual_clock.hpp>

#include "support/backends.hpp"

using ratelimit::CalendarQuota;
using ratelimit::CalendarUnit;
using ratelimit::ManualClock;

namespace {

constexpr int quota_threads = 8;
constexpr int quota_attempts = 100;  // 8 x 100 = 800 attempts

/// Decides `key` under both limiters from `quota_threads` threads released together; returns
/// how many were admitted.
template <class Q, class R>
std::int64_t hammer(Q& quota, R& rate, const std::string& key) {
  std::latch start(quota_threads);
  std::atomic<std::int64_t> admitted{0};
  std::vector<std::thread> pool;
  for (int i = 0; i < quota_threads; ++i)
    pool.emplace_back([&] {
      start.arrive_and_wait();
      for (int a = 0; a < quota_attempts; ++a)
        if (ratelimit::try_acquire_all(key, 1, quota, rate)) admitted.fetch_add(1);
    });
  for (auto& t : pool) t.join();
  return admitted.load();
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("Eight threads under a quota and a rate admit exactly the smaller limit",
                        "[calendar][quota][concurrent]", Backends) {
  // Frozen at 2023-06-15 12:00 UTC (a Thursday); a bucket refilled at 1 per hour gains nothing.
  ManualClock clock;
  clock.set(std::chrono::nanoseconds{
      (date::sys_days{date::year{2023} / 6 / 15} + std::chrono::hours{12}).time_since_epoch()});
  auto storage = TestType::make();
  using Storage = typename TestType::Storage;
  SECTION("the quota (300 per week) is the smaller: the bucket (500) spends 300") {
    CalendarQuota<ManualClock, Storage> quota(
        {.limit = 300, .unit = CalendarUnit::week, .time_zone = "Asia/Kolkata"}, storage, clock,
        "q");
    ratelimit::TokenBucket<ManualClock, Storage> rate(
        {.capacity = 500, .refill = ratelimit::per_hour(1)}, storage, clock, "r");
    CHECK(hammer(quota, rate, "k") == 300);
    CHECK(quota.peek("k").remaining == 0);
    CHECK(rate.peek("k").remaining == 500 - 300);
  }
  SECTION("the rate (200) is the smaller: the quota (300 per month) spends 200") {
    CalendarQuota<ManualClock, Storage> quota(
        {.limit = 300, .unit = CalendarUnit::month, .time_zone = "America/New_York"}, storage,
        clock, "q");
    ratelimit::TokenBucket<ManualClock, Storage> rate(
        {.capacity = 200, .refill = ratelimit::per_hour(1)}, storage, clock, "r");
    CHECK(hammer(quota, rate, "k") == 200);
    CHECK(quota.peek("k").remaining == 300 - 200);
    CHECK(rate.peek("k").remaining == 0);
  }
}
