#pragma once
/// @file core/decision.hpp
/// The answer to "may this request go through?".

#include <chrono>
#include <cstdint>

namespace ratelimit {

/// The outcome of one decision, describing the key's state *after* it (a denied request changes
/// nothing). Denial is a value, never an exception.
///
/// Every duration is in nanoseconds, rounded up to the clock's tick, and is never negative.
/// Thread safety: a plain value.
struct Decision {
  bool allowed;                          ///< true: let the request through
  std::int64_t limit;                    ///< capacity B, queue size Q, or window limit N (requests)
  std::int64_t remaining;                ///< cost-1 requests that would be admitted right now
  std::chrono::nanoseconds retry_after;  ///< 0 if allowed; else the wait until the same request
                                         ///< would be admitted if nothing else happened, or
                                         ///< `never` when the cost exceeds the limit
  std::chrono::nanoseconds reset_after;  ///< time until the key is back to its fresh state
  std::chrono::nanoseconds delay;        ///< leaky bucket only: how long the admitted request
                                         ///< must wait before it is served; a granted
                                         ///< reservation (`reserve`, both buckets): when its
                                         ///< units are due; 0 otherwise
  bool degraded;                         ///< true when a storage failure policy decided, not the
                                         ///< algorithm on the shared state
  bool shadow_denied = false;            ///< shadow mode (`set_shadow_mode`): the limit denied
                                         ///< this request but it was admitted anyway; every other
                                         ///< field is the enforced decision's (nothing was spent)

  /// `retry_after` of a request that can never succeed (its cost exceeds the limit).
  static constexpr std::chrono::nanoseconds never = std::chrono::nanoseconds::max();

  /// Same as `allowed`.
  explicit operator bool() const noexcept { return allowed; }

  friend constexpr bool operator==(const Decision&, const Decision&) = default;
};

}  // namespace ratelimit
