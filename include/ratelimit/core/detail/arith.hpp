#pragma once
/// @file core/detail/arith.hpp
/// Exact integer helpers: 128-bit intermediates so that products of two in-range 64-bit values
/// (count x period, cost x period) never overflow and never round.

#include <chrono>
#include <cstdint>

namespace ratelimit::detail {

__extension__ using i128 = __int128;  // g++ and clang++ both have it; -Wpedantic needs the marker

/// Quotient and remainder.
struct DivMod {
  i128 quot, rem;
};

/// a / b and a % b for a >= 0, b > 0. Most in-range operands fit in 64 bits, where the
/// hardware divides in one instruction; a 128-bit division is a library call several times
/// slower, so it is taken only when needed.
constexpr DivMod divmod(i128 a, i128 b) noexcept {
  if ((a >> 63) == 0 && (b >> 63) == 0) {
    const auto x = static_cast<std::uint64_t>(a), y = static_cast<std::uint64_t>(b);
    return {x / y, x % y};
  }
  return {a / b, a % b};
}

/// ceil(a / b) for a >= 0, b > 0.
constexpr i128 ceil_div(i128 a, i128 b) noexcept {
  const auto [q, r] = divmod(a, b);
  return q + (r != 0);
}

/// ceil(a / b) for any sign of a, b > 0.
constexpr i128 ceil_div_signed(i128 a, i128 b) noexcept {
  return a >= 0 ? ceil_div(a, b) : -((-a) / b);
}

/// floor(a / b) for any sign of a, b > 0.
constexpr i128 floor_div(i128 a, i128 b) noexcept {
  return a >= 0 ? divmod(a, b).quot : -ceil_div(-a, b);
}

constexpr std::int64_t gcd(std::int64_t a, std::int64_t b) noexcept {
  while (b != 0) {
    const auto r = a % b;
    a = b;
    b = r;
  }
  return a;
}

constexpr std::chrono::nanoseconds ns(i128 v) noexcept {
  return std::chrono::nanoseconds{static_cast<std::int64_t>(v)};
}

constexpr std::chrono::nanoseconds max(std::chrono::nanoseconds a,
                                       std::chrono::nanoseconds b) noexcept {
  return a < b ? b : a;
}

}  // namespace ratelimit::detail
