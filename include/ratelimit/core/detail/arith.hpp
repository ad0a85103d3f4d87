#pragma once
/// @file core/detail/arith.hpp
/// Exact integer helpers: 128-bit intermediates so that products of two in-range 64-bit values
/// (count x period, cost x period) never overflow and never round.

#include <chrono>
#include <cstdint>

namespace ratelimit::detail {

__extension__ using i128 = __int128;  // g++ and clang++ both have it; -Wpedantic needs the marker
__extension__ using u128 = unsigned __int128;

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

/// Division by a positive divisor d < 2^63 fixed in advance (a rate's period, a window), as one
/// multiply and a shift: the division instruction takes tens of cycles on x86-64, as much as
/// the rest of a decision's arithmetic. Granlund and Montgomery, "Division by Invariant Integers
/// using Multiplication" (PLDI 1994), Theorem 4.2 with N = 63: with l = ceil(log2 d) and
/// m = ceil(2^(63+l) / d), 2^(63+l) <= m d < 2^(63+l) + d <= 2^(63+l) + 2^l, hence
/// floor(n / d) = floor(m n / 2^(63+l)) for every n in [0, 2^63). Since d > 2^(l-1), m < 2^64;
/// m n < 2^127 fits in 128 bits. Thread safety: a plain value.
class Divisor {
 public:
  /// Divides by 1.
  constexpr Divisor() noexcept = default;

  /// Divides by `d`, 1 <= d < 2^63 (the caller has checked it; anything else divides by 1).
  constexpr explicit Divisor(std::int64_t d) noexcept {
    if (d < 1) return;
    unsigned l = 0;
    while ((std::uint64_t{1} << l) < static_cast<std::uint64_t>(d)) ++l;
    const u128 two = static_cast<u128>(1) << (63 + l);
    m_ = static_cast<std::uint64_t>((two + static_cast<u128>(d) - 1) / static_cast<u128>(d));
    shift_ = 63 + l;
  }

  /// floor(n / d) for n in [0, 2^63).
  constexpr std::uint64_t quot(std::uint64_t n) const noexcept {
    return static_cast<std::uint64_t>((static_cast<u128>(m_) * n) >> shift_);
  }

  friend constexpr bool operator==(const Divisor&, const Divisor&) = default;

 private:
  std::uint64_t m_ = std::uint64_t{1} << 63;  // d = 1: l = 0, m = 2^63
  unsigned shift_ = 63;
};

/// a / b and a % b for a >= 0, b in [1, 2^63), `inv` = Divisor(b): the multiply when a < 2^63.
constexpr DivMod divmod(i128 a, std::int64_t b, const Divisor& inv) noexcept {
  if ((a >> 63) == 0) {
    const auto x = static_cast<std::uint64_t>(a);
    const std::uint64_t q = inv.quot(x);
    return {q, x - q * static_cast<std::uint64_t>(b)};
  }
  return {a / b, a % b};
}

/// ceil(a / b) for a >= 0, b in [1, 2^63), `inv` = Divisor(b).
constexpr i128 ceil_div(i128 a, std::int64_t b, const Divisor& inv) noexcept {
  const auto [q, r] = divmod(a, b, inv);
  return q + (r != 0);
}

/// a / b and a % b for a in [0, 2^63), b in [1, 2^63), `inv` = Divisor(b).
struct DivMod64 {
  std::int64_t quot, rem;
};
constexpr DivMod64 divmod(std::int64_t a, std::int64_t b, const Divisor& inv) noexcept {
  const auto x = static_cast<std::uint64_t>(a);
  const std::uint64_t q = inv.quot(x);
  return {static_cast<std::int64_t>(q),
          static_cast<std::int64_t>(x - q * static_cast<std::uint64_t>(b))};
}

/// ceil(a / b) for a in [0, 2^63), b in [1, 2^63), `inv` = Divisor(b).
constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b, const Divisor& inv) noexcept {
  const auto [q, r] = divmod(a, b, inv);
  return q + (r != 0);
}

/// floor(a / b) for any sign of a, b in [1, 2^63), `inv` = Divisor(b).
constexpr i128 floor_div(i128 a, std::int64_t b, const Divisor& inv) noexcept {
  return a >= 0 ? divmod(a, b, inv).quot : -ceil_div(-a, b, inv);
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
