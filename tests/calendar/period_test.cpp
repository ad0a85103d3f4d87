// Calendar periods: where a day, week or month of an IANA time zone begins and ends,
// as instants. Every expected instant is derived from the zone's rules, stated beside it, and
// every date is in the past (the installed tzdata may predate this year's rules). The instants
// are written in UTC with the date library's calendar types.

#include <catch2/catch.hpp>

#include <chrono>
#include <stdexcept>
#include <string>

#include <date/date.h>
#include <ratelimit/calendar/calendar.hpp>

using namespace std::chrono_literals;
using ratelimit::Calendar;
using ratelimit::CalendarPeriod;
using ratelimit::CalendarUnit;

namespace {

/// ns since the Unix epoch of y-m-d at hh:mm UTC.
std::chrono::nanoseconds utc(int y, unsigned m, unsigned d, int hh = 0, int mm = 0) {
  const date::sys_days day{date::year{y} / date::month{m} / date::day{d}};
  return std::chrono::nanoseconds{
      (day + std::chrono::hours{hh} + std::chrono::minutes{mm}).time_since_epoch()};
}

/// The period of `t`, checked to hold `t`.
CalendarPeriod period(const Calendar& c, std::chrono::nanoseconds t) {
  const CalendarPeriod p = c.period_of(t);
  REQUIRE(p.start <= t);
  REQUIRE(t < p.end);
  return p;
}

}  // namespace

TEST_CASE("A Madrid day is 23 hours on the last Sunday of March and 25 on that of October",
          "[calendar][period]") {
  const Calendar day(CalendarUnit::day, "Europe/Madrid");
  // 2023-03-26 (the last Sunday of March): 02:00 CET (UTC+1) -> 03:00 CEST (UTC+2). The day
  // starts at 00:00 CET = 2023-03-25 23:00 UTC and ends at 00:00 CEST of the 27th = 2023-03-26
  // 22:00 UTC: 23 h = 82,800 s.
  const CalendarPeriod march = period(day, utc(2023, 3, 26, 12));
  CHECK(march.start == utc(2023, 3, 25, 23));
  CHECK(march.end == utc(2023, 3, 26, 22));
  CHECK(march.end - march.start == 82'800s);
  // An instant just before the jump (00:59:59 UTC = 01:59:59 CET) is the same day.
  CHECK(day.period_of(utc(2023, 3, 26, 0, 59)) == march);
  // The day before is 24 h: 2023-03-24 23:00 UTC to 2023-03-25 23:00 UTC.
  const CalendarPeriod before = period(day, utc(2023, 3, 25, 10));
  CHECK(before.end == march.start);
  CHECK(before.end - before.start == 24h);
  // 2023-10-29 (the last Sunday of October): 03:00 CEST -> 02:00 CET. 00:00 CEST = 2023-10-28
  // 22:00 UTC to 00:00 CET of the 30th = 2023-10-29 23:00 UTC: 25 h = 90,000 s.
  const CalendarPeriod october = period(day, utc(2023, 10, 29, 12));
  CHECK(october.start == utc(2023, 10, 28, 22));
  CHECK(october.end == utc(2023, 10, 29, 23));
  CHECK(october.end - october.start == 90'000s);
  // Both passes of the repeated hour 02:00-03:00 (00:00-01:00 UTC CEST, 01:00-02:00 UTC CET)
  // are the same day.
  CHECK(day.period_of(utc(2023, 10, 29, 0, 30)) == october);
  CHECK(day.period_of(utc(2023, 10, 29, 1, 30)) == october);
  // A period's end is the next one's start, to the ns.
  CHECK(day.period_of(october.end).start == october.end);
  CHECK(day.period_of(october.end - 1ns) == october);
}

TEST_CASE("New York's days around the 2023 DST changes are 23 and 25 hours", "[calendar][period]") {
  const Calendar day(CalendarUnit::day, "America/New_York");
  // 2023-03-12 02:00 EST (UTC-5) -> 03:00 EDT (UTC-4): 00:00 EST = 05:00 UTC to 00:00 EDT of
  // the 13th = 04:00 UTC: 23 h.
  const CalendarPeriod spring = period(day, utc(2023, 3, 12, 15));
  CHECK(spring.start == utc(2023, 3, 12, 5));
  CHECK(spring.end == utc(2023, 3, 13, 4));
  CHECK(spring.end - spring.start == 23h);
  // 2023-11-05 02:00 EDT -> 01:00 EST: 00:00 EDT = 04:00 UTC to 00:00 EST of the 6th = 05:00
  // UTC: 25 h.
  const CalendarPeriod fall = period(day, utc(2023, 11, 5, 15));
  CHECK(fall.start == utc(2023, 11, 5, 4));
  CHECK(fall.end == utc(2023, 11, 6, 5));
  CHECK(fall.end - fall.start == 25h);
  // A zone link (US/Eastern -> America/New_York) keeps its name and has the same periods.
  const Calendar link(CalendarUnit::day, "US/Eastern");
  CHECK(std::string(link.time_zone()) == "US/Eastern");
  CHECK(link.period_of(utc(2023, 11, 5, 15)) == fall);
}

TEST_CASE("Kolkata's days start at 18:30 UTC, every day 24 hours", "[calendar][period]") {
  // Asia/Kolkata is UTC+5:30 all year (no DST): 2023-06-15 starts at 2023-06-14 18:30 UTC.
  const Calendar day(CalendarUnit::day, "Asia/Kolkata");
  const CalendarPeriod p = period(day, utc(2023, 6, 15, 0));
  CHECK(p.start == utc(2023, 6, 14, 18, 30));
  CHECK(p.end == utc(2023, 6, 15, 18, 30));
  // 2023-06-14 18:29 UTC is 23:59 of the 14th: the day before.
  CHECK(day.period_of(utc(2023, 6, 14, 18, 29)).end == p.start);
  // June 2023 (30 days) in Kolkata: 2023-05-31 18:30 UTC to 2023-06-30 18:30 UTC.
  const Calendar month(CalendarUnit::month, "Asia/Kolkata");
  const CalendarPeriod june = period(month, utc(2023, 6, 15, 0));
  CHECK(june.start == utc(2023, 5, 31, 18, 30));
  CHECK(june.end == utc(2023, 6, 30, 18, 30));
  CHECK(june.end - june.start == 30 * 24h);
}

TEST_CASE("Lord Howe's days are 24.5 and 23.5 hours at its half-hour DST changes",
          "[calendar][period]") {
  const Calendar day(CalendarUnit::day, "Australia/Lord_Howe");
  // 2023-04-02 (first Sunday of April) 02:00 +11 -> 01:30 +10:30. The day starts at 00:00 +11
  // = 2023-04-01 13:00 UTC and ends at 00:00 +10:30 of the 3rd = 2023-04-02 13:30 UTC:
  // 24.5 h = 88,200 s.
  const CalendarPeriod april = period(day, utc(2023, 4, 2, 0));
  CHECK(april.start == utc(2023, 4, 1, 13));
  CHECK(april.end == utc(2023, 4, 2, 13, 30));
  CHECK(april.end - april.start == 88'200s);
  // 2023-10-01 (first Sunday of October) 02:00 +10:30 -> 02:30 +11. 00:00 +10:30 = 2023-09-30
  // 13:30 UTC to 00:00 +11 of the 2nd = 2023-10-01 13:00 UTC: 23.5 h = 84,600 s.
  const CalendarPeriod october = period(day, utc(2023, 10, 1, 0));
  CHECK(october.start == utc(2023, 9, 30, 13, 30));
  CHECK(october.end == utc(2023, 10, 1, 13));
  CHECK(october.end - october.start == 84'600s);
}

TEST_CASE(
    "A nonexistent local midnight starts the day at the jump, an ambiguous one at its "
    "first occurrence",
    "[calendar][period]") {
  // America/Havana changes at midnight. 2023-03-12 00:00 CST (UTC-5) -> 01:00 CDT (UTC-4):
  // local midnight does not exist; the day starts at the jump, 05:00 UTC, and ends at 00:00
  // CDT of the 13th = 04:00 UTC: 23 h.
  const Calendar day(CalendarUnit::day, "America/Havana");
  const CalendarPeriod spring = period(day, utc(2023, 3, 12, 12));
  CHECK(spring.start == utc(2023, 3, 12, 5));
  CHECK(spring.end == utc(2023, 3, 13, 4));
  // The instant before the jump is 23:59:59 CST of the 11th: the day before.
  CHECK(day.period_of(utc(2023, 3, 12, 5) - 1s).end == spring.start);
  // 2023-11-05 01:00 CDT -> 00:00 CST: local 00:00-01:00 occurs twice (04:00-05:00 UTC in
  // CDT, 05:00-06:00 UTC in CST). The day starts at the first midnight, 04:00 UTC, and ends at
  // 00:00 CST of the 6th = 05:00 UTC: 25 h; both passes of the repeated hour belong to it.
  const CalendarPeriod fall = period(day, utc(2023, 11, 5, 12));
  CHECK(fall.start == utc(2023, 11, 5, 4));
  CHECK(fall.end == utc(2023, 11, 6, 5));
  CHECK(fall.end - fall.start == 25h);
  CHECK(day.period_of(utc(2023, 11, 5, 4, 30)) == fall);
  CHECK(day.period_of(utc(2023, 11, 5, 5, 30)) == fall);
}

TEST_CASE("A day the zone skipped is an empty period: Samoa's 2011-12-30", "[calendar][period]") {
  // Pacific/Apia: 2011-12-29 24:00 (UTC-10) -> 2011-12-31 00:00 (UTC+14), at 2011-12-30 10:00
  // UTC. The 29th ends there; the 31st starts there and ends at 00:00 +14 of 2012-01-01 =
  // 2011-12-31 10:00 UTC.
  const Calendar day(CalendarUnit::day, "Pacific/Apia");
  const CalendarPeriod p29 = period(day, utc(2011, 12, 30, 9));
  CHECK(p29.start == utc(2011, 12, 29, 10));
  CHECK(p29.end == utc(2011, 12, 30, 10));
  const CalendarPeriod p31 = period(day, utc(2011, 12, 30, 10));
  CHECK(p31.start == utc(2011, 12, 30, 10));
  CHECK(p31.end == utc(2011, 12, 31, 10));
}

TEST_CASE("Months last 28, 29, 30 or 31 days from local midnight of the first",
          "[calendar][period]") {
  const Calendar utc_month(CalendarUnit::month, "UTC");
  // February 2023 (not a leap year: 2023 is not divisible by 4): 28 days.
  const CalendarPeriod feb23 = period(utc_month, utc(2023, 2, 14, 9));
  CHECK(feb23.start == utc(2023, 2, 1));
  CHECK(feb23.end == utc(2023, 3, 1));
  CHECK(feb23.end - feb23.start == 28 * 24h);
  // February 2024 (2024 divisible by 4, not by 100): 29 days; the 29th itself belongs to it.
  const CalendarPeriod feb24 = period(utc_month, utc(2024, 2, 29, 23, 59));
  CHECK(feb24.start == utc(2024, 2, 1));
  CHECK(feb24.end - feb24.start == 29 * 24h);
  // February 2000 (divisible by 400: a leap year): 29 days.
  CHECK(utc_month.period_of(utc(2000, 2, 10)).end - utc_month.period_of(utc(2000, 2, 10)).start ==
        29 * 24h);
  // April 2023: 30 days; January 2023: 31 days; December 2022 runs into 2023-01-01.
  const CalendarPeriod apr = period(utc_month, utc(2023, 4, 30, 23));
  CHECK(apr.end - apr.start == 30 * 24h);
  const CalendarPeriod jan = period(utc_month, utc(2023, 1, 1));
  CHECK(jan.start == utc(2023, 1, 1));
  CHECK(jan.end - jan.start == 31 * 24h);
  CHECK(utc_month.period_of(utc(2022, 12, 31, 23, 59)).end == utc(2023, 1, 1));
  // March 2023 in Madrid: 00:00 CET of the 1st = 2023-02-28 23:00 UTC to 00:00 CEST of April 1
  // = 2023-03-31 22:00 UTC: 31 days minus the hour lost on the 26th.
  const Calendar madrid(CalendarUnit::month, "Europe/Madrid");
  const CalendarPeriod march = period(madrid, utc(2023, 3, 26, 12));
  CHECK(march.start == utc(2023, 2, 28, 23));
  CHECK(march.end == utc(2023, 3, 31, 22));
  CHECK(march.end - march.start == 31 * 24h - 1h);
}

TEST_CASE("Weeks start on Monday (ISO 8601) or on the configured first day", "[calendar][period]") {
  // 2023-03-26 is a Sunday (2023-01-01 was a Sunday, and March 26 is 84 = 12 x 7 days later).
  // ISO week in Madrid: Monday 2023-03-20 00:00 CET = 2023-03-19 23:00 UTC to Monday
  // 2023-03-27 00:00 CEST = 2023-03-26 22:00 UTC: 7 days minus the hour lost.
  const Calendar iso(CalendarUnit::week, "Europe/Madrid");
  const CalendarPeriod w = period(iso, utc(2023, 3, 26, 12));
  CHECK(w.start == utc(2023, 3, 19, 23));
  CHECK(w.end == utc(2023, 3, 26, 22));
  CHECK(w.end - w.start == 7 * 24h - 1h);
  // Weeks from Sunday: Sunday 2023-03-26 00:00 CET = 2023-03-25 23:00 UTC to Sunday
  // 2023-04-02 00:00 CEST = 2023-04-01 22:00 UTC.
  const Calendar sunday(CalendarUnit::week, "Europe/Madrid", std::chrono::Sunday);
  const CalendarPeriod s = period(sunday, utc(2023, 3, 26, 12));
  CHECK(s.start == utc(2023, 3, 25, 23));
  CHECK(s.end == utc(2023, 4, 1, 22));
  CHECK(sunday.first_day() == std::chrono::Sunday);
  // A week that spans a year: ISO week 2023-W52 runs Monday 2023-12-25 to Monday 2024-01-01
  // (UTC).
  const Calendar utc_week(CalendarUnit::week, "UTC");
  const CalendarPeriod y = period(utc_week, utc(2023, 12, 31, 23));
  CHECK(y.start == utc(2023, 12, 25));
  CHECK(y.end == utc(2024, 1, 1));
}

TEST_CASE("A bad zone or first day is refused with the field and value", "[calendar][errors]") {
  CHECK_THROWS_AS(Calendar(CalendarUnit::day, "Europe/Madird"), std::invalid_argument);
  try {
    Calendar(CalendarUnit::day, "Europe/Madird");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("time_zone = \"Europe/Madird\": not an IANA time "
                                           "zone of this system's tzdata"));
  }
  CHECK_THROWS_WITH(Calendar(CalendarUnit::week, "UTC", std::chrono::weekday{9}),
                    "first_day = 9: not a weekday (0 = Sunday .. 6 = Saturday)");
  CHECK_THROWS_WITH(Calendar(static_cast<CalendarUnit>(7), "UTC"),
                    "unit = 7: not a CalendarUnit (day, week, month or year)");
}
