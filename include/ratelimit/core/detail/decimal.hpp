#pragma once
/// @file core/detail/decimal.hpp
/// Exact integers to and from decimal strings: what the Lua scripts read and return (a Lua
/// number would round above 2^53).

#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "arith.hpp"

namespace ratelimit::detail {

/// `v` in decimal (a leading '-' if negative).
inline std::string to_decimal(i128 v) {
  // Most values fit in 64 bits, where std::to_chars needs no 128-bit division per digit (a
  // library call each: the loop below cost about a thousand instructions per argument).
  if (v >= std::numeric_limits<std::int64_t>::min() &&
      v <= std::numeric_limits<std::int64_t>::max()) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, static_cast<std::int64_t>(v));
    return std::string(buf, r.ptr);
  }
  const bool negative = v < 0;
  std::string digits;
  while (v != 0) {
    const auto d = static_cast<int>(v % 10);
    digits.push_back(static_cast<char>('0' + (d < 0 ? -d : d)));
    v /= 10;
  }
  if (negative) digits.push_back('-');
  return std::string(digits.rbegin(), digits.rend());
}

/// A whole decimal number, optionally negative, of at most 36 digits; nullopt otherwise.
inline std::optional<i128> parse_decimal(std::string_view s) noexcept {
  bool negative = false;
  if (!s.empty() && s.front() == '-') {
    negative = true;
    s.remove_prefix(1);
  }
  if (s.empty() || s.size() > 36) return std::nullopt;
  i128 v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return negative ? -v : v;
}

}  // namespace ratelimit::detail
