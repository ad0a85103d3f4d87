#pragma once
/// @file redis/detail/decimal.hpp
/// A script's reply as exact integers (core/detail/decimal.hpp parses the decimal strings).

#include <hiredis/hiredis.h>

#include <array>
#include <cstddef>
#include <optional>
#include <span>
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

/// A script reply's integers, read as a span: held inline up to `inline_count` (every
/// script's reply but a long sliding log's, so a decision reads its reply without allocating),
/// on the heap beyond.
class ReplyInts {
 public:
  static constexpr std::size_t inline_count = 16;

  explicit ReplyInts(std::size_t n) : n_(n) {
    if (n > inline_count) heap_.resize(n);
  }
  i128& operator[](std::size_t i) noexcept { return n_ > inline_count ? heap_[i] : inline_[i]; }
  operator std::span<const i128>() const noexcept {
    return {n_ > inline_count ? heap_.data() : inline_.data(), n_};
  }

 private:
  std::size_t n_;
  std::array<i128, inline_count> inline_{};
  std::vector<i128> heap_;
};

/// A script's reply, a flat array of integers or decimal strings, as exact integers (what a
/// model's `Wire::decode` reads); nullopt if any element is something else.
inline std::optional<ReplyInts> reply_ints(const redisReply& r) {
  if (r.type != REDIS_REPLY_ARRAY) return std::nullopt;
  std::optional<ReplyInts> out(std::in_place, r.elements);
  for (std::size_t i = 0; i < r.elements; ++i) {
    const auto v = reply_int(r, i);
    if (!v) return std::nullopt;
    (*out)[i] = *v;
  }
  return out;
}

}  // namespace ratelimit::detail
