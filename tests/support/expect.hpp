#pragma once
/// @file expect.hpp
/// Readable expected Decisions and a printer so that Catch shows every field on a mismatch.

#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

namespace rltest {

using std::chrono::nanoseconds;

/// An admitted decision: retry_after is 0 by definition; delay only for the leaky bucket.
constexpr ratelimit::Decision admitted(std::int64_t limit, std::int64_t remaining,
                                       nanoseconds reset_after,
                                       nanoseconds delay = nanoseconds{0}) {
  return {true, limit, remaining, nanoseconds{0}, reset_after, delay, false};
}

/// A denied decision: delay is 0 by definition.
constexpr ratelimit::Decision denied(std::int64_t limit, std::int64_t remaining,
                                     nanoseconds retry_after, nanoseconds reset_after) {
  return {false, limit, remaining, retry_after, reset_after, nanoseconds{0}, false};
}

/// What every algorithm reports for a key in its fresh state (never seen, reset, or whose
/// state no longer matters): a cost-1 request passes at once (no delay), all `limit` units are
/// left, and there is nothing to reset.
constexpr ratelimit::Decision fresh(std::int64_t limit) {
  return admitted(limit, limit, nanoseconds{0});
}

inline std::string show_ns(nanoseconds d) {
  if (d == ratelimit::Decision::never) return "never";
  return std::to_string(d.count()) + "ns";
}

}  // namespace rltest

namespace Catch {
template <>
struct StringMaker<ratelimit::Decision> {
  static std::string convert(const ratelimit::Decision& d) {
    std::ostringstream os;
    os << "{allowed=" << d.allowed << " limit=" << d.limit << " remaining=" << d.remaining
       << " retry_after=" << rltest::show_ns(d.retry_after)
       << " reset_after=" << rltest::show_ns(d.reset_after) << " delay=" << rltest::show_ns(d.delay)
       << " degraded=" << d.degraded << "}";
    return os.str();
  }
};
}  // namespace Catch
