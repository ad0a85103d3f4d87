#pragma once
/// @file core/rate.hpp
/// A rate: a whole number of events per period, and the helpers that build one.

#include <charconv>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ratelimit {

/// `count` events (requests or tokens) per `period`.
///
/// Ranges accepted by the limiters: count in [1, 10^9], period in [1 ms, 366 days]; the limiters
/// check them at construction and throw `std::invalid_argument` naming the field.
/// Thread safety: a plain value.
struct Rate {
  std::int64_t count;               ///< events per period, 1..10^9
  std::chrono::nanoseconds period;  ///< length of the period, 1 ms..366 days

  friend constexpr bool operator==(const Rate&, const Rate&) = default;
};

/// `n` per second. No range check here: the limiter that receives the rate checks it.
constexpr Rate per_second(std::int64_t n) noexcept { return {n, std::chrono::seconds{1}}; }
/// `n` per minute.
constexpr Rate per_minute(std::int64_t n) noexcept { return {n, std::chrono::minutes{1}}; }
/// `n` per hour.
constexpr Rate per_hour(std::int64_t n) noexcept { return {n, std::chrono::hours{1}}; }
/// `n` per day (86 400 s).
constexpr Rate per_day(std::int64_t n) noexcept { return {n, std::chrono::hours{24}}; }

namespace detail {

constexpr bool is_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

constexpr std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

/// Parses a whole, non-negative decimal number; false on anything else (sign, junk, overflow).
inline bool parse_count(std::string_view s, std::int64_t& out) noexcept {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && end == s.data() + s.size() && out >= 0;
}

/// The length of one unit named `u` ("s", "second", "minutes", "h", "day", ...), or 0 if unknown.
inline std::chrono::nanoseconds unit_length(std::string_view u) noexcept {
  using namespace std::chrono;
  struct Unit {
    std::string_view name;
    nanoseconds length;
  };
  constexpr Unit units[] = {
      {"ms", milliseconds{1}},
      {"millisecond", milliseconds{1}},
      {"milliseconds", milliseconds{1}},
      {"s", seconds{1}},
      {"sec", seconds{1}},
      {"second", seconds{1}},
      {"seconds", seconds{1}},
      {"m", minutes{1}},
      {"min", minutes{1}},
      {"minute", minutes{1}},
      {"minutes", minutes{1}},
      {"h", hours{1}},
      {"hour", hours{1}},
      {"hours", hours{1}},
      {"d", hours{24}},
      {"day", hours{24}},
      {"days", hours{24}},
  };
  for (const auto& unit : units)
    if (unit.name == u) return unit.length;
  return nanoseconds{0};
}

constexpr bool all_digits(std::string_view s) noexcept {
  if (s.empty()) return false;
  for (const char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

[[noreturn]] inline void bad_rate(std::string_view text, std::string_view why) {
  throw std::invalid_argument("rate: cannot parse \"" + std::string(text) +
                              "\": " + std::string(why));
}

}  // namespace detail

/// Parses "COUNT/[N]UNIT" or "COUNT per [N] UNIT": "100/minute", "10/s", "5/15m", "1000 per hour",
/// "3 per 2 days". Units: ms, s, sec, second(s), m, min, minute(s), h, hour(s), d, day(s).
/// Surrounding blanks and line ends are ignored; units are lower case only.
/// Throws `std::invalid_argument` quoting the text on anything else, including a zero or
/// overflowing count or multiplier. Range checks (count <= 10^9 and so on) are the limiter's.
/// Thread safety: pure.
inline Rate parse_rate(std::string_view text) {
  const std::string_view s = detail::trim(text);
  std::string_view count_part, period_part;
  if (const auto slash = s.find('/'); slash != std::string_view::npos) {
    count_part = detail::trim(s.substr(0, slash));
    period_part = detail::trim(s.substr(slash + 1));
  } else if (const auto per = s.find(" per "); per != std::string_view::npos) {
    count_part = detail::trim(s.substr(0, per));
    period_part = detail::trim(s.substr(per + 5));
  } else {
    detail::bad_rate(text, "expected COUNT/UNIT or COUNT per UNIT");
  }
  std::int64_t count = 0;
  const bool parsed = detail::parse_count(count_part, count);
  if (!parsed || count == 0)
    detail::bad_rate(text, !parsed && detail::all_digits(count_part)
                               ? "count does not fit in 64 bits"
                               : "count must be a whole number >= 1 (digits only)");
  std::size_t digits = 0;
  while (digits < period_part.size() && period_part[digits] >= '0' && period_part[digits] <= '9')
    ++digits;
  std::int64_t multiplier = 1;
  if (digits > 0 &&
      (!detail::parse_count(period_part.substr(0, digits), multiplier) || multiplier == 0))
    detail::bad_rate(text, "period multiplier must be a whole number >= 1");
  const std::string_view unit_name = detail::trim(period_part.substr(digits));
  if (unit_name.empty()) detail::bad_rate(text, "missing unit");
  const auto unit = detail::unit_length(unit_name);
  if (unit.count() == 0)
    detail::bad_rate(text, "unknown unit \"" + std::string(unit_name) +
                               "\" (expected ms, s, sec, second(s), m, min, minute(s), h, "
                               "hour(s), d, day(s), lower case; the multiplier is whole)");
  // 366 days in ms is far below the overflow point; reject multipliers that would overflow.
  if (multiplier > std::chrono::nanoseconds::max().count() / unit.count())
    detail::bad_rate(text, "period too long");
  return Rate{count, unit * multiplier};
}

}  // namespace ratelimit
