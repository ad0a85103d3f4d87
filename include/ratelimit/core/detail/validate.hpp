#pragma once
/// @file core/detail/validate.hpp
/// Range checks shared by the limiters' constructors; each names the field and the value.

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "../rate.hpp"
#include "arith.hpp"

namespace ratelimit::detail {

inline constexpr std::int64_t max_count = 1'000'000'000;
inline constexpr std::chrono::nanoseconds min_period = std::chrono::milliseconds{1};
inline constexpr std::chrono::nanoseconds max_period = std::chrono::hours{24 * 366};
/// 100 Julian years: the longest time a bucket may take to refill (or drain) completely.
inline constexpr std::chrono::nanoseconds max_refill_time = std::chrono::hours{24} * 36525;

[[noreturn]] inline void invalid(std::string_view field, std::int64_t value,
                                 std::string_view rule) {
  throw std::invalid_argument(std::string(field) + " = " + std::to_string(value) + ": " +
                              std::string(rule));
}

inline void check_count(std::string_view field, std::int64_t v) {
  if (v < 1 || v > max_count) invalid(field, v, "must be in [1, 1000000000]");
}

inline void check_rate(std::string_view field, const Rate& r) {
  check_count(std::string(field) + ".count", r.count);
  if (r.period < min_period || r.period > max_period)
    invalid(std::string(field) + ".period (ns)", r.period.count(),
            "must be in [1 ms, 366 days] = [1000000, 31622400000000000] ns");
}

/// Checks a bucket's capacity and rate: at most one token per ns and a whole refill within
/// 100 years, so that every duration a decision reports fits in `std::chrono::nanoseconds`.
inline void check_bucket(std::string_view capacity_field, std::int64_t capacity,
                         std::string_view rate_field, const Rate& r) {
  check_count(capacity_field, capacity);
  check_rate(rate_field, r);
  if (r.count > r.period.count())
    invalid(
        std::string(rate_field) + ".count", r.count,
        "more than one token per nanosecond (period " + std::to_string(r.period.count()) + " ns)");
  const i128 refill_ns = ceil_div(i128{capacity} * r.period.count(), r.count);
  if (refill_ns > max_refill_time.count())
    invalid(capacity_field, capacity,
            "a whole refill (capacity x period / count) would take more than 100 years");
}

inline void check_cost(std::int64_t cost) {
  if (cost < 1) invalid("cost", cost, "must be >= 1");
}

}  // namespace ratelimit::detail
