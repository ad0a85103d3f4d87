#pragma once
/// @file redis/lease/storage.hpp
/// Leased quotas for hot keys (docs/far.md): a long-lived instance far from Redis takes L units
/// of a key in one script and spends them locally, without a round trip, until they run out (a
/// miss: one round trip, which also gives back what an ended lease left unused) or the lease
/// ends after H (its unused units go back with the key's next lease, or with `flush`). A lease
/// that keeps units leaves a record in Redis expiring H + G after it (G: reclaim_grace): a
/// holder that died never gives it back, and the next decision of any instance past the expiry
/// reclaims its units.
///
/// Algorithms and bounds:
/// - the fixed window and the sliding window counter (redis/lease/window.hpp): a window never
///   over-admits;
/// - the token bucket (redis/lease/bucket.hpp): tokens are debited when leased, so in any
///   interval of length D the instances spend at most C + r (D + H), over-admission at most r H.
/// Others fail to compile with a message: the leaky bucket (a leased unit's queue delay would
/// be fixed when it is leased, not when it is spent), the sliding log and the concurrency limit.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../algorithms/fixed_window.hpp"
#include "../../algorithms/leaky_bucket.hpp"
#include "../../algorithms/sliding_counter.hpp"
#include "../../algorithms/token_bucket.hpp"
#include "../../core/decision.hpp"
#include "../../core/detail/validate.hpp"
#include "../../core/listener.hpp"
#include "../detail/one_key.hpp"
#include "../options.hpp"
#include "bucket.hpp"
#include "options.hpp"
#include "window.hpp"

namespace ratelimit {

namespace detail {
/// The leased binding of model `M`; fails to compile, saying why, for a model not leased.
template <class M>
struct LeasedBindingOf {
  static_assert(!std::is_same_v<M, LeakyBucketModel>,
                "LeasedStorage does not hold the leaky bucket: its admitted work is told when to "
                "go (`delay`, its place in the queue), and a leased unit's place would be fixed "
                "when it is leased, not when it is spent, so units spent late would go together "
                "and break the steady rate it promises (docs/far.md). Use RedisStorage for it, or "
                "TokenBucketModel with LeasedStorage");
  static_assert(std::is_same_v<M, LeakyBucketModel> || sizeof(M) == 0,
                "LeasedStorage holds FixedWindowModel, SlidingCounterModel and TokenBucketModel "
                "only (docs/far.md): their leased units are debited when leased");
  using type = void;
};
template <>
struct LeasedBindingOf<FixedWindowModel> {
  using type = LeasedWindowBinding<FixedWindowModel>;
};
template <>
struct LeasedBindingOf<SlidingCounterModel> {
  using type = LeasedWindowBinding<SlidingCounterModel>;
};
template <>
struct LeasedBindingOf<TokenBucketModel> {
  using type = LeasedBucketBinding;
};
}  // namespace detail

/// The binding `LeasedStorage::bind<M>` returns: LeasedWindowBinding<M> for the windows,
/// LeasedBucketBinding for the token bucket.
template <class M>
using LeasedBinding = typename detail::LeasedBindingOf<M>::type;

/// Leased quotas on one shared Redis (see the file comment and docs/far.md). A handle: copies
/// share the client, the counters and (per binding) the leases; one storage is one instance.
/// Errors: the constructor throws std::invalid_argument naming a bad option.
/// Thread safety: every member is safe from many threads.
class LeasedStorage {
 public:
  explicit LeasedStorage(LeaseOptions options)
      : shared_(std::make_shared<detail::LeaseShared>(std::move(options))) {}

  template <class M>
  using Binding = LeasedBinding<M>;
  using Part = LeasedPart;

  /// Binds model `M` (FixedWindowModel, SlidingCounterModel or TokenBucketModel; others fail
  /// to compile) under `name` with leases of N / lease_divisor units (C / lease_divisor tokens).
  /// Throws std::invalid_argument naming a parameter out of range.
  template <class M>
  LeasedBinding<M> bind(std::string_view name, const typename M::Params& params) {
    return LeasedBinding<M>(shared_, name, params, std::nullopt);
  }
  /// As above with leases of `lease_units` (L, in [1, N] or [1, C]).
  template <class M>
  LeasedBinding<M> bind(std::string_view name, const typename M::Params& params,
                        std::int64_t lease_units) {
    return LeasedBinding<M>(shared_, name, params, lease_units);
  }

  /// One part only. Throws std::invalid_argument for more parts, or `out` too short.
  bool decide_all(std::span<const Part> parts, std::chrono::nanoseconds now,
                  std::span<Decision> out) const {
    return detail::decide_one_key(parts, now, out, "LeasedStorage");
  }

  /// `decide_all` without blocking on a miss: `done(decisions, all_admitted)` is called
  /// exactly once, as the part's `apply_async` completes (before this returns when the lease
  /// answers, Redis is not asked or there is no part; else on the Redis client's I/O thread;
  /// see core/completion.hpp). Throws as `decide_all` (and then never calls `done`). Thread
  /// safety: safe from many threads.
  void decide_all_async(std::span<const Part> parts, std::chrono::nanoseconds now,
                        std::function<void(std::vector<Decision>&&, bool)> done) const {
    detail::decide_one_key_async(parts, now, std::move(done), "LeasedStorage");
  }

  /// Cold start: connects to Redis (TLS and AUTH included) and loads the lease scripts, so that
  /// the first lease is one round trip with no script body (see RedisStorage::warm_up; within
  /// connect_timeout + command_timeout). Call it at start-up. Returns true if Redis answered.
  bool warm_up() const {
    return shared_->client->warm_up(
        {&detail::lease_window_script(), &detail::lease_bucket_script()});
  }

  /// Counters since construction (shared by every copy).
  LeaseStats stats() const noexcept {
    LeaseStats s;
    s.local = shared_->local.load(std::memory_order_relaxed);
    s.round_trips = shared_->round_trips.load(std::memory_order_relaxed);
    s.units_leased = shared_->units_leased.load(std::memory_order_relaxed);
    s.units_returned = shared_->units_returned.load(std::memory_order_relaxed);
    s.degraded = shared_->degraded.load(std::memory_order_relaxed);
    s.denied_locally = shared_->denied_locally.load(std::memory_order_relaxed);
    s.units_reclaimed = shared_->units_reclaimed.load(std::memory_order_relaxed);
    return s;
  }

  /// The Redis client's own counters (decisions, failures, script loads, ...).
  RedisStats redis_stats() const noexcept { return shared_->client->stats(); }

  /// Attaches a listener to the Redis client (errors, breaker, round trips).
  void attach_listener(std::shared_ptr<Listener> l, ListenerOptions o = {}) const {
    shared_->client->observers.attach(std::move(l), o);
  }

 private:
  std::shared_ptr<detail::LeaseShared> shared_;
};

}  // namespace ratelimit
