#pragma once
/// @file redis/regional/storage.hpp
/// Regional counters with background exchange (docs/far.md): a storage for services that run
/// in several regions, each with its own Redis, and accept a bounded imprecision instead of a
/// round trip to one far Redis per decision.
///
/// Each region decides against its own Redis, one round trip (lua/regional_window.lua): the
/// count of a window is this region's admissions plus what the other regions last pushed here.
/// At interval S an exchange (`RegionalStorage::exchange`, or RegionalExchanger in the
/// background) pushes this region's new admissions to every other region's Redis, as increments
/// of this region's own field of the window's hash (redis/regional/exchange.hpp). A region
/// admits at most U units per key and window that some other region has not acknowledged yet;
/// beyond that it denies (`degraded`, retry_after = S) until an exchange catches up (a request
/// of more than U units: retry_after = never).
///
/// Bounds, with R regions, N per window W, exchange interval S and one-way delay d:
/// - over-admission: at most (R - 1) U per window (sliding counter: on its estimate). Every
///   region's view misses at most U units of each other region, so when it admits, the total
///   is at most N + (R - 1) U.
/// - a client staying in one region at N per W reaches its full limit when U >= N (S + 2d) / W:
///   units wait for a claim (up to S) and its acknowledgement (a round trip, 2d).
/// - a partition: each region goes on with its own count plus U, and says so (listeners:
///   on_breaker_change "region <name>" open, on_storage_error kind "partition"; stats). A
///   region that fails to reach j twice in a row and is granted the exclusion of j by a strict
///   majority of the regions leaves j out of its unseen bound (RegionalState::update_exclusions),
///   so the regions that still talk to each other keep their shares while j spends its U.
///   Grants make exclusion one-way (no two regions exclude each other; an excluded region
///   excludes no one) and fence j at the grantors (its pushes are refused there). Over-admission
///   is then at most (R - 1 + X) U per window, X the exclusions in effect during it. Proof: y is
///   the last region to admit while not excluded; every other region had at most U units y had
///   not seen (it kept y in its bound, or its exclusion of y was released after its units
///   reached y, or it was excluded and so kept everyone), so at most N + (R - 1) U by then;
///   after that only excluded regions admit, each at most U beyond its count at its fence (its
///   fencing majority's acknowledgements stay as they were), once per exclusion. Failure terms
///   (a lapsed exclusion, exchange_batch): docs/far.md.
///
/// Algorithms: the fixed window and the sliding window counter (here), the token bucket and
/// the leaky bucket (redis/regional/bucket.hpp: over any interval of length D at most
/// C + r D + (R - 1) U). Others fail to compile.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../algorithms/fixed_window.hpp"
#include "../../algorithms/sliding_counter.hpp"
#include "../../core/completion.hpp"
#include "../../core/decision.hpp"
#include "../../core/detail/validate.hpp"
#include "../../core/storage.hpp"
#include "../../core/wire.hpp"
#include "../../memory/in_memory_storage.hpp"
#include "../detail/keys.hpp"
#include "../detail/one_key.hpp"
#include "bucket.hpp"
#include "decide.hpp"
#include "exchange.hpp"
#include "options.hpp"
#include "part.hpp"

namespace ratelimit {

/// One limiter's window bound to a RegionalStorage. Copies share the storage.
/// Errors: `apply` throws std::invalid_argument for cost < 1; Redis failures never throw (the
/// local failure policy decides). Thread safety: every member is safe from many threads.
template <class M>
class RegionalWindowBinding : public detail::RegionalDecisions<RegionalWindowBinding<M>> {
  static_assert(RegionalWindowModel<M>,
                "RegionalStorage holds FixedWindowModel, SlidingCounterModel, TokenBucketModel and "
                "LeakyBucketModel only: counts that merge by addition, and buckets that debit the "
                "other regions' admissions late (docs/far.md)");

 public:
  using Model = M;
  static constexpr bool sliding = std::is_same_v<M, SlidingCounterModel>;

  /// The same keys decided with other parameters (validated as `bind` does); the unseen bound
  /// scales with the limit unless it was given explicitly.
  RegionalWindowBinding with_params(const typename M::Params& p) const {
    RegionalWindowBinding b = *this;
    b.params_ = p;
    (void)M::Wire::bound_args(p);  // the window: whole us, in range
    if (!explicit_unseen_) {
      b.unseen_limit_ = default_unseen(state_->options(), p);
      check_default_fits(state_->options(), state_->remote_count(), p, b.unseen_limit_);
    }
    if (b.fallback_) b.fallback_.emplace(fallback_->with_params(fallback_params(p)));
    return b;
  }

  /// The bound parameters.
  const typename M::Params& params() const noexcept { return params_; }
  /// U: the units per key and window this region may admit unseen by another region.
  std::int64_t unseen_limit() const noexcept { return unseen_limit_; }

  /// U = ceil(N (S + 2d) / W), at least 1 and at most N: with it a client staying in one region
  /// reaches its full limit (see the file comment).
  static std::int64_t default_unseen(const RegionalOptions& o, const typename M::Params& p) {
    using detail::i128;
    const i128 lag = std::chrono::nanoseconds(o.exchange_interval + 2 * o.one_way_delay).count();
    const i128 u = (i128{p.limit} * lag + p.window - 1) / p.window;
    return static_cast<std::int64_t>(std::clamp<i128>(u, 1, p.limit));
  }

 private:
  friend class RegionalStorage;
  friend class detail::RegionalDecisions<RegionalWindowBinding>;

  RegionalWindowBinding(std::shared_ptr<detail::RegionalState> state, InMemoryStorage fallback,
                        std::string_view name, const typename M::Params& params,
                        std::optional<std::int64_t> unseen)
      : state_(std::move(state)),
        params_(params),
        tail_(detail::redis_key_tail(sliding ? "rsc" : "rfw", name)),
        unseen_limit_(unseen ? *unseen : default_unseen(state_->options(), params)),
        explicit_unseen_(unseen.has_value()) {
    (void)M::Wire::bound_args(params);  // N in [1, 10^9], W whole us in [1 ms, 366 days]
    if (unseen && (*unseen < 1 || *unseen > params.limit))
      detail::invalid("unseen_limit", *unseen, "must be in [1, params.limit]");
    // Counts stay below 2^30 and W below 2^45 us for the script's exact products.
    if (params.limit + static_cast<std::int64_t>(state_->remote_count()) * unseen_limit_ >
        (std::int64_t{1} << 30))
      detail::invalid("params.limit + remotes x unseen_limit", params.limit,
                      "must stay below 2^30 (the script's exact arithmetic)");
    if (!unseen)
      check_default_fits(state_->options(), state_->remote_count(), params, unseen_limit_);
    dirty_ = state_->options().local.key_prefix + "{rg-dirty}" + tail_;
    dirty_slots_ = state_->add_dirty_set(dirty_);
    if (state_->options().local.failure_policy == FailurePolicy::local_fallback)
      fallback_.emplace(fallback.template bind<M>(name, fallback_params(params)));
  }

  /// Refuses a default U with which the regions could admit more than twice the limit per
  /// window ((R - 1) U > N): the exchange is too slow for the window (S + 2d too close to W,
  /// or too many regions). Throws std::invalid_argument naming the combination and what fits.
  static void check_default_fits(const RegionalOptions& o, std::size_t remotes,
                                 const typename M::Params& p, std::int64_t u) {
    const auto r = static_cast<std::int64_t>(remotes);
    if (r == 0 || r * u <= p.limit) return;
    const std::int64_t w_ms = p.window / 1'000'000;
    // (R - 1) ceil(N (S + 2d) / W) <= N holds when S + 2d <= W / (R - 1) - W / N.
    const std::int64_t fits = w_ms / r - w_ms / p.limit - 2 * o.one_way_delay.count();
    throw std::invalid_argument(
        "exchange_interval = " + std::to_string(o.exchange_interval.count()) +
        " ms, one_way_delay = " + std::to_string(o.one_way_delay.count()) + " ms, a window of " +
        std::to_string(w_ms) + " ms, limit " + std::to_string(p.limit) + ", " +
        std::to_string(r + 1) + " regions: the default unseen_limit " + std::to_string(u) +
        " lets the regions admit " + std::to_string(p.limit + r * u) +
        " per window, more than twice the limit; " +
        (fits >= 1 ? "set exchange_interval to at most " + std::to_string(fits) + " ms"
                   : std::string("the window is too short for the delay between regions")) +
        ", or give bind an unseen_limit");
  }

  std::int64_t window_us() const noexcept { return params_.window / 1000; }

  typename M::Params fallback_params(const typename M::Params& p) const {
    return M::Wire::fallback(p, state_->options().local.fallback_divisor);
  }

  /// The hash of `key`'s window k: the same name in every region.
  std::string hash_of(std::string_view key, std::int64_t k) const {
    std::string h = detail::redis_key(state_->options().local.key_prefix, key, tail_);
    h += ':';
    h += std::to_string(k);
    return h;
  }

  /// The script call deciding `key` at `now` (lua/regional_window.lua).
  detail::RedisCall call(std::string_view key, std::chrono::nanoseconds now,
                         const Operation& op) const {
    const std::int64_t t = detail::wire_time_us(now), w = window_us();
    const std::int64_t k = t / w, e = t - k * w;
    detail::RedisCall call;
    call.script = &detail::regional_window_script();
    std::string h = hash_of(key, k);
    call.keys = {state_->dirty_key(dirty_, h), std::move(h)};
    if constexpr (sliding) call.keys.push_back(hash_of(key, k - 1));
    const std::int64_t matters_us = (k + (sliding ? 2 : 1)) * w - t;
    const std::int64_t ttl_ms =
        matters_us / 1000 + 1 + state_->local().options().ttl_margin.count();
    const std::size_t m = state_->remote_count();
    call.argv = {state_->options().region,
                 std::to_string(std::min(op.cost, params_.limit + 1)),
                 std::to_string(params_.limit),
                 std::to_string(m == 0 ? -1 : unseen_limit_),
                 std::to_string(w),
                 std::to_string(e),
                 op.peek ? "1" : "0",
                 std::to_string(ttl_ms)};
    state_->append_bounding_regions(call.argv);  // every other region but the excluded
    return call;
  }

  /// The decision from the call's result: the reply decoded, or the failure policy's when
  /// Redis failed or the reply is not the script's. `apply` and `apply_async` both end here.
  Decision finish(const detail::RedisResult& result, std::string_view key,
                  std::chrono::nanoseconds now, const Operation& op) const {
    // On a cluster, the next exchange claims this key's slot (after the script: see DirtySlots).
    if (state_->local_is_cluster() && !op.peek)
      dirty_slots_->mark(detail::redis_key_slot(
          detail::redis_key(state_->options().local.key_prefix, key, tail_)));
    if (result.failure) return this->degrade(key, now, op);
    const auto d = decode(*result.reply, detail::wire_time_us(now) * 1000, op);
    if (!d) {
      state_->local().report(
          {RedisFailureKind::protocol, "unexpected reply from the regional script"});
      return this->degrade(key, now, op);
    }
    return *d;
  }

  /// The decision from the script's reply {admitted, reason, c, p, unseen, unseen_p}: the
  /// model's on the counts every region contributed, or an unseen denial.
  std::optional<Decision> decode(const redisReply& reply, std::int64_t t_ns,
                                 const Operation& op) const {
    const auto r = detail::reply_ints(reply);
    if (!r || std::span<const detail::i128>(*r).size() != 6) return std::nullopt;
    const std::span<const detail::i128> v = *r;
    if (v[2] < 0 || v[3] < 0 || v[2] > (1 << 30) || v[3] > (1 << 30) || v[1] < 0 || v[1] > 2)
      return std::nullopt;
    typename M::State s;
    if constexpr (sliding)
      s = {t_ns, static_cast<std::uint32_t>(v[2]), static_cast<std::uint32_t>(v[3])};
    else
      s = {t_ns, static_cast<std::int64_t>(v[2])};
    // An unseen denial spends nothing: its fields describe the count as it stays (a peek's).
    Operation as = op;
    if (v[1] == 2) as.peek = true;
    Decision d = M::apply(params_, s, std::chrono::nanoseconds{t_ns}, as);
    state_->decisions.fetch_add(1, std::memory_order_relaxed);
    if (v[1] == 2) {
      // The limit would admit; the unseen bound does not: wait for the next exchange.
      if (!d.allowed) return std::nullopt;
      state_->unseen_denials.fetch_add(1, std::memory_order_relaxed);
      d.allowed = false;
      d.degraded = true;
      // More than U units at once fail the unseen bound whatever the exchange does.
      d.retry_after = op.cost > unseen_limit_
                          ? Decision::never
                          : std::chrono::nanoseconds{state_->options().exchange_interval};
      return d;
    }
    if (d.allowed != (v[0] == 1)) return std::nullopt;
    return d;
  }

  std::shared_ptr<detail::RegionalState> state_;
  typename M::Params params_;
  std::string tail_;
  std::string dirty_;
  std::shared_ptr<detail::DirtySlots> dirty_slots_;  ///< the slots decisions touched (cluster)
  std::int64_t unseen_limit_;
  bool explicit_unseen_;
  using Fallback = decltype(std::declval<InMemoryStorage&>().template bind<M>(
      {}, std::declval<const typename M::Params&>()));
  std::optional<Fallback> fallback_;
};

/// Regional counters with background exchange (see the file comment and docs/far.md).
///
/// A handle: copies share the clients, counters and listeners. Construction does not connect.
/// Errors: the constructor throws std::invalid_argument naming a bad option; `bind` throws it
/// for parameters outside the range (N in [1, 10^9], W whole microseconds in [1 ms, 366 days],
/// N + (R - 1) U below 2^30). Thread safety: every member is safe from many threads.
class RegionalStorage {
 public:
  /// A storage for `options.region`.
  explicit RegionalStorage(RegionalOptions options)
      : state_(std::make_shared<detail::RegionalState>(std::move(options))) {}

  /// A window's binding or a bucket's (RegionalBucketBinding).
  template <class M>
  using Binding = std::conditional_t<RegionalBucketModel<M>, RegionalBucketBinding<M>,
                                     RegionalWindowBinding<M>>;
  using Part = RegionalPart;

  /// Binds model `M` (FixedWindowModel, SlidingCounterModel, TokenBucketModel or
  /// LeakyBucketModel; any other fails to compile) under limiter name `name`, with the default
  /// unseen bound (`default_unseen` of the binding).
  template <class M>
  Binding<M> bind(std::string_view name, const typename M::Params& params) {
    static_assert(RegionalModel<M>,
                  "RegionalStorage holds FixedWindowModel, SlidingCounterModel, TokenBucketModel "
                  "and LeakyBucketModel only: counts that merge by addition, and buckets that "
                  "debit the other regions' admissions late (docs/far.md)");
    return Binding<M>(state_, fallback_, name, params, std::nullopt);
  }

  /// As above with an explicit unseen bound U: in [1, N] for a window, [1, 10^15] for a bucket.
  template <class M>
  Binding<M> bind(std::string_view name, const typename M::Params& params,
                  std::int64_t unseen_limit) {
    static_assert(RegionalModel<M>,
                  "RegionalStorage holds FixedWindowModel, SlidingCounterModel, TokenBucketModel "
                  "and LeakyBucketModel only: counts that merge by addition, and buckets that "
                  "debit the other regions' admissions late (docs/far.md)");
    return Binding<M>(state_, fallback_, name, params, unseen_limit);
  }

  /// One part only (a regional decision spans one key: the exchange keeps no multi-key
  /// atomicity across regions). Throws std::invalid_argument for more parts, or `out` too short.
  bool decide_all(std::span<const Part> parts, std::chrono::nanoseconds now,
                  std::span<Decision> out) const {
    return detail::decide_one_key(parts, now, out, "RegionalStorage");
  }

  /// `decide_all` without blocking: `done(decisions, all_admitted)` is called exactly once,
  /// as the part's `apply_async` completes (on this region's I/O thread, or before this returns
  /// when Redis is not asked or there is no part; see core/completion.hpp). The part's key and
  /// binding are copied before this returns. Throws as `decide_all` (and then never calls
  /// `done`). Thread safety: safe from many threads.
  void decide_all_async(std::span<const Part> parts, std::chrono::nanoseconds now,
                        std::function<void(std::vector<Decision>&&, bool)> done) const {
    detail::decide_one_key_async(parts, now, std::move(done), "RegionalStorage");
  }

  /// One exchange round at `now` (the clock's reading; it only dates the partition reports):
  /// `finish_exchange(begin_exchange(now))`. Blocks for the round trips to every region (at
  /// most each remote's command_timeout). Tests call it on a ManualClock's time; production
  /// runs a RegionalExchanger.
  ExchangeReport exchange(std::chrono::nanoseconds now) const {
    return finish_exchange(begin_exchange(now));
  }

  /// The first half of a round: claims, in this region's Redis, the units admitted and not yet
  /// pushed. Units admitted after it wait for the next round (so a test can admit between the
  /// halves, as requests arrive while a push is on its way).
  ExchangeRound begin_exchange(std::chrono::nanoseconds now) const { return state_->claim(now); }

  /// The second half: pushes the claimed units to every other region and records their
  /// acknowledgements (a failed push is pushed again next round).
  ExchangeReport finish_exchange(ExchangeRound round) const {
    return state_->finish(std::move(round));
  }

  /// Cold start: connects to this region's Redis and every other region's (TLS and AUTH
  /// included) and loads the scripts each runs (SCRIPT LOAD), so that the first decision is one
  /// round trip with no script body (without it, the connect plus one round trip: a script's
  /// first use on a node goes as EVAL). Call it at start-up, before traffic. Returns true if
  /// every Redis answered (a failure is reported to listeners as usual; decisions work without a
  /// warm-up). Blocks for a round trip per region, each within connect_timeout +
  /// command_timeout.
  bool warm_up() const { return state_->warm_up(); }

  /// Counters since construction (shared by every copy).
  RegionalStats stats() const noexcept { return state_->stats(); }

  /// The counters of this region's Redis client (failures, script loads, ...).
  RedisStats local_stats() const noexcept { return state_->local().stats(); }

  /// Attaches a listener: partitions (on_breaker_change with node "region <name>", open while
  /// that region cannot be reached; on_storage_error with kind "partition" at each failed
  /// exchange with it) and every Redis client's events (errors, breaker, round trips).
  /// What it throws is swallowed. Thread safety: safe from many threads.
  void attach_listener(std::shared_ptr<Listener> listener, ListenerOptions options = {}) const {
    state_->attach(std::move(listener), options);
  }
  /// Detaches every attachment of `listener`; returns whether it was attached.
  bool detach_listener(const Listener& listener) const { return state_->detach(listener); }

  /// The options it was built with.
  const RegionalOptions& options() const noexcept { return state_->options(); }

 private:
  std::shared_ptr<detail::RegionalState> state_;
  InMemoryStorage fallback_;  ///< the per-instance share for local_fallback
};

}  // namespace ratelimit
