#pragma once
/// @file core/bound_key.hpp
/// A limiter bound to one key, fixed once (`limiter.bind_key(key)`).

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "decision.hpp"

namespace ratelimit {

/// One key of a limiter `L`, fixed once: a configured tenant, route or upstream that a service
/// decides again and again. Its decisions are the limiter's for that key (the same state,
/// listeners and shadow mode), minus the work that depends on the key alone: in process the
/// key is hashed when the handle is made, so a decision goes straight to its slot without
/// hashing anything (as a limiter used without a key does).
///
/// Made by `limiter.bind_key(key)`; refers to the limiter, which must outlive it.
/// Errors: as the limiter's calls (`std::invalid_argument` for cost < 1).
/// Thread safety: immutable after construction; its calls are as safe as the limiter's (from
/// many threads).
template <class L>
class BoundKey {
 public:
  /// `limiter.try_acquire(key(), cost)`.
  Decision try_acquire(std::int64_t cost = 1) {
    return limiter_->decide_located(at_, key_, cost, L::read_clock);
  }

  /// `limiter.try_acquire(key(), cost, now)`: at a clock reading taken by the caller (clamped
  /// to the clock range [0, 2^62] ns, as there).
  Decision try_acquire(std::int64_t cost, std::chrono::nanoseconds now) {
    return limiter_->decide_located(at_, key_, cost, L::clock_range(now));
  }

  /// `limiter.peek(key())`.
  Decision peek() { return limiter_->peek(key_); }

  /// The key.
  const std::string& key() const noexcept { return key_; }

 private:
  friend L;
  BoundKey(L& limiter, std::string key)
      : limiter_(&limiter), key_(std::move(key)), at_(limiter.locate_key(key_)) {}

  L* limiter_;
  std::string key_;
  typename L::Located at_;  ///< what the storage found from the key alone (its hash)
};

}  // namespace ratelimit
