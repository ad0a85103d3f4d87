#pragma once
/// @file calendar/calendar.hpp
/// Calendar periods (days, weeks, months, years) in a named IANA time zone, as instants: where a
/// quota's period begins and ends.
///
/// Needs Howard Hinnant's date library with its time-zone database (`date/tz.h`, Debian
/// `libhowardhinnant-date-dev`, shared library `libdate-tz3`, reading the system's tzdata):
/// link the CMake target `ratelimit::calendar`. g++ 12's <chrono> has no `locate_zone`.
///
/// A period begins at local midnight (00:00 wall-clock time) of its first day: every day, on
/// the configured first day of the week (ISO 8601: Monday), on the first of the month, or on
/// January 1. So a local day lasts 23 to 25 hours across a DST change (23.5 or 24.5 on
/// Australia/Lord_Howe), a month 28 to 31 days, a year 365 or 366 days. A local midnight that does
/// not exist (the clocks jump over it) is replaced by the instant of the jump, the first instant of
/// that local day; a local midnight that occurs twice (the clocks go back over it) counts from its
/// first occurrence.

#include <chrono>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

#include <date/date.h>
#include <date/tz.h>

namespace ratelimit {

/// The length of a calendar period.
enum class CalendarUnit : std::uint8_t {
  day,    ///< from local midnight to the next local midnight (23 to 25 h around DST changes)
  week,   ///< seven local days from local midnight of the first day of the week
  month,  ///< from local midnight of the first of the month to that of the next (28 to 31 days)
  year,   ///< from local midnight of January 1 to that of the next (365 or 366 days)
};

/// The rules-file and error-message name of a unit: "day", "week", "month" or "year".
/// Thread safety: pure.
constexpr std::string_view calendar_unit_name(CalendarUnit u) noexcept {
  return u == CalendarUnit::day     ? "day"
         : u == CalendarUnit::week  ? "week"
         : u == CalendarUnit::month ? "month"
                                    : "year";
}

/// One calendar period as instants: [start, end), nanoseconds since the Unix epoch (UTC).
/// Thread safety: a plain value.
struct CalendarPeriod {
  std::chrono::nanoseconds start;  ///< the first instant of the period
  std::chrono::nanoseconds end;    ///< the first instant of the next period (exclusive)

  friend constexpr bool operator==(const CalendarPeriod&, const CalendarPeriod&) = default;
};

namespace detail {

/// The first instant of local day `d` in zone `z`: local midnight, or the end of the gap that
/// swallows it, or its first occurrence when it occurs twice.
inline date::sys_seconds local_midnight(const date::time_zone& z, date::local_days d) {
  const date::local_seconds midnight{d};
  const date::local_info i = z.get_info(midnight);
  switch (i.result) {
    case date::local_info::nonexistent:
      return i.first.end;              // the instant the clocks jumped over midnight
    case date::local_info::ambiguous:  // the earlier occurrence: first's offset
    case date::local_info::unique:
    default:
      return date::sys_seconds{midnight.time_since_epoch() - i.first.offset};
  }
}

}  // namespace detail

/// Periods of one `CalendarUnit` in one IANA time zone ("Europe/Madrid", "UTC", ...).
///
/// The zone is looked up once, at construction, in the system's tzdata (through the date
/// library); afterwards a copy is a pointer and two small integers. The clock readings it is
/// given are nanoseconds since the Unix epoch (UTC): `SystemClock`, or a `ManualClock` set to
/// such times; never `SteadyClock`.
///
/// Errors: the constructor throws `std::invalid_argument` naming the field: an unknown zone
/// ("time_zone = \"Europe/Madird\": ..."), tzdata that cannot be read, or a `first_day` that is
/// not a weekday (`!ok()`).
/// Thread safety: immutable after construction; every member is safe from many threads (the
/// date library's zone data is loaded before the constructor returns).
class Calendar {
 public:
  /// Days in UTC (no zone lookup; what a default-constructed quota parameter holds).
  Calendar() noexcept = default;

  /// Periods of `unit` in `time_zone`; weeks start on `first_day` (default Monday, ISO 8601;
  /// ignored for days, months and years).
  Calendar(CalendarUnit unit, std::string_view time_zone,
           std::chrono::weekday first_day = std::chrono::Monday)
      : unit_(unit), first_day_(first_day.c_encoding()) {
    if (unit != CalendarUnit::day && unit != CalendarUnit::week && unit != CalendarUnit::month &&
        unit != CalendarUnit::year)
      throw std::invalid_argument("unit = " + std::to_string(static_cast<int>(unit)) +
                                  ": not a CalendarUnit (day, week, month or year)");
    if (!first_day.ok())
      throw std::invalid_argument("first_day = " + std::to_string(first_day.c_encoding()) +
                                  ": not a weekday (0 = Sunday .. 6 = Saturday)");
    try {
      zone_ = date::locate_zone(time_zone);
      // Loads the zone's transitions now, so that `period_of` never meets an I/O error.
      (void)zone_->get_info(date::sys_seconds{});
    } catch (const std::exception& e) {
      throw std::invalid_argument("time_zone = \"" + std::string(time_zone) +
                                  "\": not an IANA time zone of this system's tzdata (" + e.what() +
                                  ")");
    }
  }

  /// The period containing `t` (ns since the Unix epoch, in the clock range [0, 2^62] ns):
  /// start <= t < end. Thread safety: safe from many threads.
  CalendarPeriod period_of(std::chrono::nanoseconds t) const noexcept {
    const date::sys_seconds s =
        date::floor<std::chrono::seconds>(date::sys_time<std::chrono::nanoseconds>{t});
    const std::chrono::seconds offset = zone_ ? zone_->get_info(s).offset : std::chrono::seconds{0};
    const date::local_seconds local{s.time_since_epoch() + offset};
    date::local_days first = period_start(date::floor<date::days>(local));
    date::local_days next = step(first, 1);
    date::sys_seconds start = midnight(first);
    date::sys_seconds end = midnight(next);
    // The local date of t names its period except where the clocks went back over a
    // midnight (t's local date is then the day before, which already ended) or a period is
    // empty (a day the zone skipped): step to the period that holds t. Two steps at most in
    // tzdata's history; the bound keeps a pathological zone from looping.
    for (int i = 0; i < 8 && t >= std::chrono::nanoseconds{end.time_since_epoch()}; ++i) {
      first = next;
      next = step(first, 1);
      start = end;
      end = midnight(next);
    }
    for (int i = 0; i < 8 && t < std::chrono::nanoseconds{start.time_since_epoch()}; ++i) {
      next = first;
      first = step(first, -1);
      end = start;
      start = midnight(first);
    }
    return {std::chrono::nanoseconds{start.time_since_epoch()},
            std::chrono::nanoseconds{end.time_since_epoch()}};
  }

  /// The unit.
  CalendarUnit unit() const noexcept { return unit_; }
  /// The zone's IANA name as given ("UTC" for a default-constructed calendar). A link such as
  /// "US/Eastern" keeps its own name and has its target's periods.
  std::string_view time_zone() const noexcept {
    if (zone_ == nullptr) return "UTC";
    return zone_->name();  // a string of the zone database, alive as long as the program
  }
  /// The first day of a week.
  std::chrono::weekday first_day() const noexcept { return std::chrono::weekday{first_day_}; }

  /// Equal when the periods are: same unit, zone and (for weeks) first day.
  friend bool operator==(const Calendar& a, const Calendar& b) noexcept {
    return a.unit_ == b.unit_ && a.time_zone() == b.time_zone() &&
           (a.unit_ != CalendarUnit::week || a.first_day_ == b.first_day_);
  }

 private:
  /// The first instant of local day `d` (see detail::local_midnight; in UTC, its midnight).
  date::sys_seconds midnight(date::local_days d) const {
    return zone_ ? detail::local_midnight(*zone_, d) : date::sys_seconds{d.time_since_epoch()};
  }

  /// The first local day of the period holding local day `d`.
  date::local_days period_start(date::local_days d) const noexcept {
    switch (unit_) {
      case CalendarUnit::week:
        // weekday difference is modulo 7: days since the last first_day, in [0, 6].
        return d - (date::weekday{d} - date::weekday{first_day_});
      case CalendarUnit::month: {
        const date::year_month_day ymd{d};
        return date::local_days{ymd.year() / ymd.month() / 1};
      }
      case CalendarUnit::year:
        return date::local_days{date::year_month_day{d}.year() / date::January / 1};
      case CalendarUnit::day:
      default:
        return d;
    }
  }

  /// The first local day of the period `n` periods after the one starting on `first`.
  date::local_days step(date::local_days first, int n) const noexcept {
    switch (unit_) {
      case CalendarUnit::week:
        return first + date::days{7 * n};
      case CalendarUnit::month:
        return date::local_days{date::year_month_day{first} + date::months{n}};
      case CalendarUnit::year:  // first is a January 1: always a valid date n years on
        return date::local_days{date::year_month_day{first} + date::years{n}};
      case CalendarUnit::day:
      default:
        return first + date::days{n};
    }
  }

  const date::time_zone* zone_ = nullptr;  ///< null: UTC without a lookup
  CalendarUnit unit_ = CalendarUnit::day;
  unsigned first_day_ = 1;  ///< c_encoding: 0 = Sunday .. 6 = Saturday (1: Monday)
};

}  // namespace ratelimit
