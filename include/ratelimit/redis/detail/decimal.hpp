#pragma once
/// @file redis/detail/decimal.hpp
/// Exact integers to and from the decimal strings the Lua scripts read and return (a Lua number
/// would round above 2^53).

#include <hiredis/hiredis.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "../../core/detail/arith.hpp"

namespace ratelimit::detail {

inline std::string to_decimal(i128 v) {
  if (v == 0) return "0";
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

/// Element `i` of a script's array reply as an exact integer (an integer or a decimal string).
inline std::optional<i128> reply_int(const redisReply& r, std::size_t i) noexcept {
  if (r.type != REDIS_REPLY_ARRAY || i >= r.elements || r.element[i] == nullptr)
    return std::nullopt;
  const redisReply& e = *r.element[i];
  if (e.type == REDIS_REPLY_INTEGER) return i128{e.integer};
  if (e.type == REDIS_REPLY_STRING) return parse_decimal(std::string_view(e.str, e.len));
  return std::nullopt;
}

}  // namespace ratelimit::detail
