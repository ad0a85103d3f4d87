#pragma once
/// @file redis/regional/bucket.hpp
/// The token bucket and the leaky bucket on a regional storage (docs/far.md): each region keeps
/// per key one hash in its own Redis (lua/regional_bucket.lua) holding the bucket's GCRA state,
/// the units every region admitted (n:<region>; the others' arrive from the exchange as
/// increments, as for the windows) and how many of the others' units it has debited. A push
/// of the others' units debits them on arrival, dated at the claim that carried them (every
/// unit of it was admitted before that claim): `at <- max(at, t_c) + u / r`, so a region that
/// was idle sees them with the refill since, not all at once against its present. A decision
/// debits what no push debited (a push from a version of this library that did not date
/// its units), forced (the bucket may go below empty), then decides as the bucket does; a
/// region admits at most U units per key that some other region has not acknowledged.
///
/// The bound, with capacity C, refill rate r, R regions: over any interval of length D, every
/// region together admits at most C + r D + (R - 1) U. Proof. Write L for region i's level in
/// tokens (C - r x backlog): a refill raises it to at most C, a debit of the others' units
/// lowers it by their count whatever it is, and a local admission of n needs L >= n and leaves
/// L >= 0.
/// 1. For a <= b where b is a local admission of i, the units i debits in [a, b] (its own and
///    the others') are at most C + r (b - a): L <= C before a, refills add at most r (b - a)
///    (the cap at C only takes away, and a level below zero refills at r like any other), and
///    L >= 0 after b. A forced debit that took L below zero is thus paid back before i admits.
/// 2. A unit is debited in i after it was admitted elsewhere (it reaches i by a push). Late
///    never gives more: debiting c after a refill of r t, min(C, L + r t) - c, is at most
///    debiting it before, min(C, L - c + r t). A push of u units claimed at t_c that arrives
///    at t_a is one debit at the instant tau = min(max(at, t_c), t_a), in a history of i's
///    bucket still ordered in time: max(at, tau) + u / r is what it writes; every earlier
///    step of i's bucket happened before tau (an admission at t' leaves at > t', an earlier
///    push at tau' leaves at > tau'), or before t_a when tau = t_a; and tau >= t_c is after
///    the units were admitted. So steps 1 and 3 hold with "debited" meaning at tau.
/// 3. Take any interval [a, b] and its last admission, at b' <= b, in region i. i's own units
///    of [a, b'] are debited in [a, b']. Of region j's, those i has debited by b' were debited
///    in [a, b'] (not before they were admitted, by 2). The rest: at b' i debits all its hash
///    holds of j, which is at least what j's s:<i> says i acknowledged (the push lands before its
///    acknowledgement), and j admits only while n:<j> - s:<i> <= U (s:<i> only grows): at most U.
///    (A push applied twice, its reply lost, only adds to i's debits.) So by 1 the units of
///    [a, b] are at most C + r (b' - a) + (R - 1) U. The leaky bucket (as a meter) admits under
///    the same two rules, its admission only stricter with more backlog: the same bound.
/// 4. Exclusions (a partition; RegionalState::update_exclusions): a region may leave a cut-off
///    one out of its unseen bound. In 3, take instead the last admission in [a, b] of a region
///    not excluded at it: every other region's units it has not debited are at most U, as for
///    the windows (storage.hpp); after it only excluded regions admit, each fenced at a majority
///    whose acknowledgements stay as they were, so at most U more per exclusion. Over any
///    interval: at most C + r D + (R - 1 + X) U, X the exclusions in effect in it.
/// A client that moves, or a region that was idle: i's `at` is that of one bucket fed i's
/// own admissions and the others' (each at tau above, at most S after it was admitted, since
/// claims start every S) with two differences only. Dating late by at most S moves `at` by
/// at most S (the step max(at, t) + c moves no more than t), so i holds at most r S fewer
/// tokens; and units that arrive after i admitted later ones are debited on top of those
/// (out of order): the others' units of the last S + 2d before i's admissions, at most
/// C + r (S + 2d) for one client that moved. Each is paid back at r. Measured (tests/far):
/// a client at 90 % of its rate moving every 4 s got 900 of 900; a 10 per s client of an
/// idle region got 20 of 20 after a flood elsewhere (one exact bucket: the same).
/// One region's client: the unseen units and the request's own were admitted after the last
/// claim that was acknowledged; claims start every S and their acknowledgement takes a round
/// trip 2d, so they were admitted in an interval shorter than S + 2d, closed at the request,
/// where a bucket admits at most C + r (S + 2d). U >= C + r (S + 2d) never denies such a
/// client; the default is U = C + ceil(r (S + 2d)).
/// Expiry: the hash lives until the bucket is full again plus the exchange's lag (a claim's
/// wait S and a whole round) and the TTL margin, and is never shortened; while some region has
/// not acknowledged its units, each claim keeps it that long again (its unseen units, and with
/// them the bound, outlast a partition). A push of u units arriving at t_p makes the hash live
/// u / r beyond the longer of its TTL and that hold: past max(at, t_p) + u / r, when the
/// bucket, had it debited them at once, is full again. So a hash never expires owing a debit
/// (forgetting a full bucket changes no decision), and a push to a hash that expired creates
/// it with its units debited at the claim's time, from a full bucket.
///
/// Thread safety: every member is safe from many threads.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../core/completion.hpp"
#include "../../core/decision.hpp"
#include "../../core/detail/arith.hpp"
#include "../../core/detail/validate.hpp"
#include "../../core/storage.hpp"
#include "../../core/wire.hpp"
#include "../../memory/in_memory_storage.hpp"
#include "../detail/keys.hpp"
#include "decide.hpp"
#include "exchange.hpp"
#include "options.hpp"
#include "part.hpp"

namespace ratelimit {

class RegionalStorage;

/// One limiter's bucket bound to a RegionalStorage (TokenBucketModel or LeakyBucketModel).
/// Copies share the storage. Errors: `apply` throws std::invalid_argument for cost < 1; Redis
/// failures never throw (the local failure policy decides). Thread safety: every member is safe
/// from many threads.
template <class M>
class RegionalBucketBinding : public detail::RegionalDecisions<RegionalBucketBinding<M>> {
  static_assert(RegionalBucketModel<M>,
                "RegionalBucketBinding holds TokenBucketModel and LeakyBucketModel only");

 public:
  using Model = M;
  /// The largest explicit unseen bound.
  static constexpr std::int64_t max_unseen = 1'000'000'000'000'000;

  /// The same keys decided with other parameters (validated as `bind` does); the unseen bound
  /// follows them unless it was given explicitly.
  RegionalBucketBinding with_params(const typename M::Params& p) const {
    RegionalBucketBinding b = *this;
    b.params_ = p;
    b.bound_ = M::Wire::bound_args(p);
    if (!explicit_unseen_) b.unseen_limit_ = default_unseen(state_->options(), p);
    state_->add_dirty_set(dirty_, hold_ms(state_->options(), *state_), unit_ns(p));
    if (b.fallback_) b.fallback_.emplace(fallback_->with_params(fallback_params(p)));
    return b;
  }

  /// The bound parameters.
  const typename M::Params& params() const noexcept { return params_; }
  /// U: the units per key this region may admit unseen by another region.
  std::int64_t unseen_limit() const noexcept { return unseen_limit_; }

  /// U = C + ceil(r (S + 2d)), at most max_unseen: with it a client staying in one region
  /// gets its whole bucket (see the file comment).
  static std::int64_t default_unseen(const RegionalOptions& o, const typename M::Params& p) {
    using detail::i128;
    const i128 lag = std::chrono::nanoseconds(o.exchange_interval + 2 * o.one_way_delay).count();
    const i128 u = p.limit + (i128{p.count} * lag + p.period - 1) / p.period;
    return static_cast<std::int64_t>(std::min<i128>(u, max_unseen));
  }

 private:
  friend class RegionalStorage;
  friend class detail::RegionalDecisions<RegionalBucketBinding>;

  RegionalBucketBinding(std::shared_ptr<detail::RegionalState> state, InMemoryStorage fallback,
                        std::string_view name, const typename M::Params& params,
                        std::optional<std::int64_t> unseen)
      : state_(std::move(state)),
        params_(params),
        bound_(M::Wire::bound_args(params)),  // C, r in range; a whole refill within 100 years
        tail_(detail::redis_key_tail(std::is_same_v<M, TokenBucketModel> ? "rtb" : "rlb", name)),
        unseen_limit_(unseen ? *unseen : default_unseen(state_->options(), params)),
        explicit_unseen_(unseen.has_value()),
        hold_ms_(std::to_string(hold_ms(state_->options(), *state_))) {
    if (unseen && (*unseen < 1 || *unseen > max_unseen))
      detail::invalid("unseen_limit", *unseen, "must be in [1, 10^15]");
    dirty_ = state_->options().local.key_prefix + "{rg-dirty}" + tail_;
    dirty_slots_ =
        state_->add_dirty_set(dirty_, hold_ms(state_->options(), *state_), unit_ns(params));
    if (state_->options().local.failure_policy == FailurePolicy::local_fallback)
      fallback_.emplace(fallback.template bind<M>(name, fallback_params(params)));
  }

  /// How long a hash outlives its full bucket, ms: the exchange's lag and the TTL margin.
  static std::int64_t hold_ms(const RegionalOptions& o, const detail::RegionalState& s) {
    return s.exchange_lag_ms() + o.local.ttl_margin.count();
  }
  /// One unit's refill time, ns rounded up.
  static std::int64_t unit_ns(const typename M::Params& p) {
    return (p.period + p.count - 1) / p.count;
  }

  typename M::Params fallback_params(const typename M::Params& p) const {
    return M::Wire::fallback(p, state_->options().local.fallback_divisor);
  }

  /// The script call deciding `key` at `now` (lua/regional_bucket.lua).
  detail::RedisCall call(std::string_view key, std::chrono::nanoseconds now,
                         const Operation& op) const {
    const std::int64_t t_us = detail::wire_time_us(now);
    detail::RedisCall call;
    call.script = &detail::regional_bucket_script();
    std::string h = detail::redis_key(state_->options().local.key_prefix, key, tail_);
    call.keys = {state_->dirty_key(dirty_, h), std::move(h)};
    M::Wire::args(bound_, params_, std::to_string(t_us), op, hold_ms_, call.argv);
    const std::size_t m = state_->remote_count();
    call.argv.push_back(state_->options().region);
    M::Wire::push_pair(detail::i128{params_.period}, params_, call.argv);  // one unit's worth
    call.argv.push_back(std::to_string(m == 0 ? -1 : unseen_limit_));
    call.argv.push_back(std::to_string(std::min(op.cost, params_.limit + 1)));
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
    const auto d = decode(*result.reply, op);
    if (!d) {
      state_->local().report(
          {RedisFailureKind::protocol, "unexpected reply from the regional bucket"});
      return this->degrade(key, now, op);
    }
    return *d;
  }

  /// The decision from the script's reply {admitted, reason, t, at_us, at_rem, unseen,
  /// debited}: the model's on the state after the debit, or an unseen denial.
  std::optional<Decision> decode(const redisReply& reply, const Operation& op) const {
    const auto r = detail::reply_ints(reply);
    if (!r || std::span<const detail::i128>(*r).size() != 7) return std::nullopt;
    const std::span<const detail::i128> v = *r;
    if (v[1] < 0 || v[1] > 2 || v[5] < 0 || v[6] < 0) return std::nullopt;
    const std::array<detail::i128, 4> gcra{v[0], v[2], v[3], v[4]};  // gcra.lua's reply
    auto s = M::Wire::state(params_, gcra, op);
    if (!s) return std::nullopt;
    // An unseen denial spends nothing: its fields describe the bucket as it stays (a peek's).
    Operation as = op;
    if (v[1] == 2) as.peek = true;
    Decision d = M::apply(params_, s->state, s->time, as);
    state_->decisions.fetch_add(1, std::memory_order_relaxed);
    if (v[1] == 2) {
      // The bucket would admit; the unseen bound does not: wait for the next exchange.
      if (!d.allowed) return std::nullopt;
      state_->unseen_denials.fetch_add(1, std::memory_order_relaxed);
      d.allowed = false;
      d.degraded = true;
      d.delay = std::chrono::nanoseconds{0};
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
  typename M::Wire::BoundArgs bound_;
  std::string tail_;
  std::string dirty_;
  std::shared_ptr<detail::DirtySlots> dirty_slots_;  ///< the slots decisions touched (cluster)
  std::int64_t unseen_limit_;
  bool explicit_unseen_;
  std::string hold_ms_;  ///< the script's "TTL beyond full", formatted once
  using Fallback = decltype(std::declval<InMemoryStorage&>().template bind<M>(
      {}, std::declval<const typename M::Params&>()));
  std::optional<Fallback> fallback_;
};

}  // namespace ratelimit
