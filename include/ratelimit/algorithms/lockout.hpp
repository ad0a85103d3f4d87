#pragma once
/// @file algorithms/lockout.hpp
/// A lockout around any limiter: once the limit denies a key, the key is blocked for a fixed
/// time (rate-limiter-flexible's `blockDuration`), the classic login and OTP rule: "5 failures
/// in 15 min, then locked 1 h".

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "../core/decision.hpp"
#include "../core/detail/validate.hpp"
#include "../core/listener.hpp"
#include "../core/rate.hpp"
#include "../core/storage.hpp"
#include "token_bucket.hpp"

namespace ratelimit {

/// `limiter` (any of the library's limiters, on any storage that holds a token bucket: in
/// process, Redis, Redis Cluster) with a lockout of `block_duration`: a take (`try_acquire`)
/// that the limit denies locks the key out from that instant for `block_duration` (its
/// denial's `retry_after` and `reset_after` are then at least `block_duration`); until then
/// every take of the key is denied without asking the limit (nothing is spent), with
/// `retry_after` and `reset_after` the time left of the lock (at least the limit's own
/// `reset_after`), `remaining` 0 and `limit` the limit's.
///
/// The lock is a second state per key on the limiter's storage, under the limiter's name plus
/// "/lockout": a token bucket of one token refilled once per `block_duration`, whose take
/// locks (so a second lock of a locked key changes nothing: the lock is never extended by the
/// denials it causes). So every instance sharing the storage sees the lock, and it leaves with
/// the bucket's TTL. On Redis the check of the lock and the limit's decision are two script
/// calls: a take racing the denial that locks may still be admitted by the limit.
///
/// Shadow mode (the limiter's `set_shadow_mode`): the lock is taken and checked as enforced,
/// but its denials come back admitted with `shadow_denied`. Listeners of the limiter hear the
/// take that locks as `limited` (or `shadow_limited`) and every take the lock denies as
/// `Outcome::locked_out`. `refund` and `penalty` go to the limit and leave the lock alone:
/// "a success refunds" gives the unit back, it does not unlock; `unlock` and `reset` do.
///
/// Errors: the constructor throws `std::invalid_argument` naming `block_duration` unless it
/// is in [1 ms, 366 days]. Thread safety: as the limiter's, every member safe from many
/// threads.
template <class L>
class Lockout {
  using LockBinding = decltype(std::declval<L&>().storage().template bind<TokenBucketModel>(
      std::string_view{}, std::declval<const TokenBucketModel::Params&>()));

 public:
  /// `inner` locked out for `block` (the block duration) after a denial. (The parameters are
  /// not named `limiter` and `block_duration`: those are members, and -Wshadow would say so.)
  Lockout(L inner, std::chrono::nanoseconds block)
      : limiter_(std::move(inner)),
        block_(check_block(block)),
        lock_(limiter_.storage().template bind<TokenBucketModel>(
            limiter_.name() + "/lockout", TokenBucketModel::make_params({1, Rate{1, block}}))) {}

  /// Decides one take of `cost` units for `key` now: denied while the key is locked out, else
  /// the limit's decision, and a denial then locks the key. Throws `std::invalid_argument` if
  /// cost < 1.
  Decision try_acquire(std::string_view key = {}, std::int64_t cost = 1) {
    return try_acquire(key, cost, limiter_.clock().now());
  }

  /// The same at `now`, a reading of the limiter's clock.
  Decision try_acquire(std::string_view key, std::int64_t cost, std::chrono::nanoseconds now) {
    detail::check_cost(cost);
    const Decision lock = lock_.apply(key, now, Operation{1, true});
    if (!lock.allowed) return locked_out(key, cost, lock);
    Decision d = limiter_.try_acquire(key, cost, now);
    if (d.allowed && !d.shadow_denied) return d;
    // Denied by the limit: locked from now (a lock already taken by a racing denial stays).
    const Decision taken = lock_.apply(key, now, Operation{1, false});
    const auto wait = taken.allowed ? block_ : taken.retry_after;
    if (d.retry_after < wait) d.retry_after = wait;
    if (d.reset_after < wait) d.reset_after = wait;
    return d;
  }

  /// What a cost-1 take would get now (the lock's denial while locked); changes nothing.
  Decision peek(std::string_view key = {}) {
    const auto now = limiter_.clock().now();
    const Decision lock = lock_.apply(key, now, Operation{1, true});
    if (lock.allowed) return limiter_.peek(key);
    return locked(key, lock);
  }

  /// Whether `key` is locked out now, and for how long: the time left (0 if not locked).
  std::chrono::nanoseconds locked_for(std::string_view key = {}) {
    const Decision lock = lock_.apply(key, limiter_.clock().now(), Operation{1, true});
    return lock.allowed ? std::chrono::nanoseconds{0} : lock.retry_after;
  }

  /// The limiter's `refund` (the lock stays).
  Decision refund(std::string_view key, std::int64_t cost, std::chrono::nanoseconds taken_at) {
    return limiter_.refund(key, cost, taken_at);
  }
  /// The limiter's `penalty` (it does not lock by itself: the next take that is denied does).
  Decision penalty(std::string_view key, std::int64_t cost) { return limiter_.penalty(key, cost); }

  /// Lifts `key`'s lock (its limit's state stays).
  void unlock(std::string_view key = {}) { lock_.reset(key); }
  /// Puts `key` back to fresh: the limit's state and the lock.
  void reset(std::string_view key = {}) {
    limiter_.reset(key);
    lock_.reset(key);
  }

  /// The lock's duration.
  std::chrono::nanoseconds block_duration() const noexcept { return block_; }
  /// The limiter inside (its listeners, shadow mode, clock and storage are the lockout's).
  L& limiter() noexcept { return limiter_; }

 private:
  static std::chrono::nanoseconds check_block(std::chrono::nanoseconds b) {
    if (b < detail::min_period || b > detail::max_period)
      detail::invalid("block_duration (ns)", b.count(),
                      "must be in [1 ms, 366 days] = [1000000, 31622400000000000] ns");
    return b;
  }

  /// The denial of a locked key: the limit's state as a peek reads it, with the lock's wait.
  Decision locked(std::string_view key, const Decision& lock) {
    Decision d = limiter_.peek(key);
    d.allowed = false;
    d.remaining = 0;
    d.delay = std::chrono::nanoseconds{0};
    d.retry_after = lock.retry_after;
    if (d.reset_after < lock.retry_after) d.reset_after = lock.retry_after;
    d.degraded = d.degraded || lock.degraded;
    return d;
  }

  Decision locked_out(std::string_view key, std::int64_t cost, const Decision& lock) {
    Decision d = locked(key, lock);
    if (limiter_.shadow_mode()) {
      d.allowed = true;
      d.shadow_denied = true;
    }
    limiter_.notify_listeners(key, cost, d, Outcome::locked_out);
    return d;
  }

  L limiter_;
  std::chrono::nanoseconds block_;
  LockBinding lock_;
};

}  // namespace ratelimit
