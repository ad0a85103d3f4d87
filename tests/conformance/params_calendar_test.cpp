// Conformance, parameters (docs/algorithms.md, "Semantics shared by all"), for the calendar
// quota (it needs the time-zone database, so it is built only where date-tz is): a key counted
// under another limit or calendar is decided under the new one, never degraded, never with more
// than a fresh key. The scenario of params_test.cpp, for the one algorithm outside its table.
#include <chrono>
#include <cstdint>

#include <date/date.h>
#include <catch2/catch.hpp>
#include <ratelimit/calendar.hpp>
#include <ratelimit/ratelimit.hpp>

#include "support/backends.hpp"
#include "support/expect.hpp"

using namespace std::chrono_literals;
using ratelimit::CalendarQuota;
using ratelimit::CalendarUnit;
using ratelimit::Decision;
using ratelimit::ManualClock;
using rltest::admitted;
using rltest::denied;

TEMPLATE_LIST_TEST_CASE(
    "A calendar quota counted under other parameters is decided under the "
    "new ones",
    "[conformance][any_storage][params][calendar]", Backends) {
  using Quota = CalendarQuota<ManualClock, typename TestType::Storage>;
  INFO(TestType::name);
  // 2024-03-10 12:00 UTC: that UTC day ends in 12 h.
  const date::sys_days day{date::year{2024} / date::month{3} / date::day{10}};
  const std::chrono::nanoseconds noon{(day + 12h).time_since_epoch()};
  ManualClock clock;
  clock.set(noon);
  auto storage = TestType::make();
  Quota five({.limit = 5, .unit = CalendarUnit::day, .time_zone = "UTC"}, storage, clock, "q");
  // Three keys spend 4 of 5: remaining 1, the day ends in 12 h.
  for (const char* key : {"up", "down", "week"})
    CHECK(five.try_acquire(key, 4) == admitted(5, 1, 12h));

  clock.set(noon + 6h);  // 18:00, the day ends in 6 h
  // N = 10: c = 4 of 10, remaining 6; cost 6 brings c to 10.
  Quota ten({.limit = 10, .unit = CalendarUnit::day, .time_zone = "UTC"}, storage, clock, "q");
  const Decision up = ten.peek("up");
  CHECK_FALSE(up.degraded);
  CHECK(up == admitted(10, 6, 6h));
  CHECK(ten.try_acquire("up", 6) == admitted(10, 0, 6h));
  // N = 2: c = 4 > 2 (remaining 0): every cost waits for the day's end, 6 h.
  Quota two({.limit = 2, .unit = CalendarUnit::day, .time_zone = "UTC"}, storage, clock, "q");
  const Decision down = two.peek("down");
  CHECK_FALSE(down.degraded);
  CHECK(down == denied(2, 0, 6h, 6h));
  CHECK(two.try_acquire("down") == denied(2, 0, 6h, 6h));
  // Another calendar, a week of 5: the count stays with the period it was counted in until that
  // period ends (the day, in 6 h): c = 4, remaining 1; cost 1 brings c to 5.
  Quota weekly({.limit = 5, .unit = CalendarUnit::week, .time_zone = "UTC"}, storage, clock, "q");
  const Decision week = weekly.peek("week");
  CHECK_FALSE(week.degraded);
  CHECK(week == admitted(5, 1, 6h));
  CHECK(weekly.try_acquire("week") == admitted(5, 0, 6h));
  CHECK(weekly.try_acquire("week") == denied(5, 0, 6h, 6h));
}
