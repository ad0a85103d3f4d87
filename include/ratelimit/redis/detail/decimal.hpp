#pragma once
/// @file redis/detail/decimal.hpp
/// A script's reply as exact integers (core/detail/decimal.hpp parses the decimal strings).

#include <hiredis/hiredis.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../../core/detail/decimal.hpp"

namespace ratelimit::detail {

/// Element `i` of a script's array reply as an exact integer (an integer or a decimal string).
inline std::optional<i128> reply_int(const redisReply& r, std::size_t i) noexcept {
  if (r.type != REDIS_REPLY_ARRAY || i >= r.elements || r.element[i] == nullptr)
    return std::nullopt;
  const redisReply& e = *r.element[i];
  if (e.type == REDIS_REPLY_INTEGER) return i128{e.integer};
  if (e.type == REDIS_REPLY_STRING) return parse_decimal(std::string_view(e.str, e.len));
  return std::nullopt;
}

/// A script's reply, a flat array of integers or decimal strings, as exact integers (what a
/// model's `Wire::decode` reads); nullopt if any element is something else.
inline std::optional<std::vector<i128>> reply_ints(const redisReply& r) {
  if (r.type != REDIS_REPLY_ARRAY) return std::nullopt;
  std::vector<i128> out;
  out.reserve(r.elements);
  for (std::size_t i = 0; i < r.elements; ++i) {
    const auto v = reply_int(r, i);
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

}  // namespace ratelimit::detail
