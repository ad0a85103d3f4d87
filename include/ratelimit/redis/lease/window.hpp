#pragma once
/// @file redis/lease/window.hpp
/// A window leased (docs/far.md, "Leased quotas for hot keys"): a long-lived instance far from
/// Redis takes L units of a key's window in one script (lua/lease_window.lua) and spends them
/// locally, without a round trip, until they run out (a miss: one round trip, which also gives
/// back what an ended lease left unused) or the lease ends after H (its unused units go back
/// with the key's next lease, or with `flush`).
///
/// Bound: a window never over-admits. Redis counts a unit when it is leased, and grants at most
/// what the window has left (the sliding counter: what keeps its estimate within N at the
/// lease's time, which later in the window only weighs the previous window less), so the units
/// all instances spend never exceed the limit. A lease ends with its window: units leased in
/// one window are never spent in the next. The price is under-admission: units leased by one
/// instance and not yet given back are unavailable to the others (at most L - 1 per instance
/// and key, for at most H).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../../algorithms/fixed_window.hpp"
#include "../../algorithms/sliding_counter.hpp"
#include "../../core/completion.hpp"
#include "../../core/decision.hpp"
#include "../../core/detail/validate.hpp"
#include "../../core/storage.hpp"
#include "../../lua/lease_window.hpp"
#include "../detail/client.hpp"
#include "../detail/keys.hpp"
#include "../detail/script.hpp"
#include "decide.hpp"
#include "options.hpp"

namespace ratelimit {

namespace detail {
inline const RedisScript& lease_window_script() {
  static const RedisScript s = make_script("lease_window", std::string(lua::lease_window));
  return s;
}
}  // namespace detail

/// One limiter's window (fixed or sliding), leased (`LeasedStorage::bind<M>` makes it). Copies
/// share the leases.
/// Errors: `apply` throws std::invalid_argument for cost < 1. Thread safety: every member is
/// safe from many threads (a key's lease is kept under one mutex per limiter; the round trip
/// runs outside it).
template <class M>
class LeasedWindowBinding {
  static_assert(std::is_same_v<M, FixedWindowModel> || std::is_same_v<M, SlidingCounterModel>,
                "LeasedWindowBinding holds FixedWindowModel and SlidingCounterModel (the token "
                "bucket is LeasedBucketBinding; see LeasedStorage::bind)");

 public:
  using Model = M;
  static constexpr bool sliding = std::is_same_v<M, SlidingCounterModel>;

  /// Decides `key` at `now`: from this instance's lease when it holds `op.cost` units of the
  /// current window (no round trip), else with one lease round trip. Decision fields: limit =
  /// N; remaining = what the lease still holds plus the window's unleased units at the last
  /// lease; retry_after and reset_after = the window's end.
  Decision apply(std::string_view key, std::chrono::nanoseconds now, const Operation& op) const {
    return detail::LeaseDecide<LeasedWindowBinding>::apply(*this, key, now, op);
  }

  /// `apply` without blocking the caller on a miss: `done(Decision)` is called exactly once,
  /// with the decision `apply` would give: before this returns when the lease (or a remembered
  /// denial) answers, or when Redis is not asked (circuit open, backpressure); else on the Redis
  /// client's I/O thread once the lease call returns (core/completion.hpp). The key is copied
  /// and the storage's shared state held until `done` runs. Throws std::invalid_argument for
  /// cost < 1 (and never calls `done`). Thread safety: safe from many threads.
  void apply_async(std::string_view key, std::chrono::nanoseconds now, const Operation& op,
                   Completion<Decision> done) const {
    detail::LeaseDecide<LeasedWindowBinding>::apply_async(*this, key, now, op, std::move(done));
  }

  /// Gives back every lease that ended by `now` (H after it was taken) or whose window ended,
  /// one round trip per key with units to give. Returns the units given back. Call it from a
  /// timer (or before shutdown, with a `now` far ahead) so that idle keys' units come back.
  std::int64_t flush(std::chrono::nanoseconds now) const {
    now = detail::lease_clamp_time(now);
    std::vector<std::pair<std::string, Lease>> ended;
    {
      const std::lock_guard lock(table_->mutex);
      for (auto it = table_->leases.begin(); it != table_->leases.end();) {
        if (now - it->second.taken_at >= shared_->options.lease_duration ||
            params_.window_of(now.count()) != it->second.window) {
          ended.emplace_back(it->first, it->second);
          it = table_->leases.erase(it);
        } else {
          ++it;
        }
      }
    }
    std::int64_t given = 0;
    for (const auto& [key, l] : ended) {
      if (params_.window_of(now.count()) != l.window) continue;  // its count no longer matters
      // A spent lease still confirms its records (its units stay counted when they expire).
      if (take(key, now.count(), 0, 0, l.left, l.records, {})) given += l.left;
    }
    return given;
  }

  /// Refused: leased units held by other instances cannot be taken back from here.
  void reset(std::string_view) const {
    throw std::logic_error("LeasedStorage: reset is not supported (other instances hold leases)");
  }

  /// The part of a one-key `decide_all`.
  LeasedPart part(std::string_view key, const Operation& op, std::string_view = {}) const {
    return LeasedPart{key, op, &apply_part, this, &apply_part_async};
  }

  /// The same keys with other parameters (the lease size follows unless it was given). The
  /// copy shares this binding's leases, but spends one locally only if it was taken under a
  /// limit no higher than its own; otherwise it gives it back and asks Redis.
  LeasedWindowBinding with_params(const typename M::Params& p) const {
    LeasedWindowBinding b = *this;
    b.params_ = p;
    (void)M::Wire::bound_args(p);
    if (!explicit_lease_) b.lease_ = default_lease(p);
    if (b.fallback_)
      b.fallback_.emplace(
          fallback_->with_params(M::Wire::fallback(p, shared_->options.redis.fallback_divisor)));
    return b;
  }

  /// L: the units one lease takes.
  std::int64_t lease_units() const noexcept { return lease_; }

 private:
  friend class LeasedStorage;
  friend struct detail::LeaseDecide<LeasedWindowBinding>;

  struct Lease {
    std::int64_t window = -1;  ///< the window k the units belong to
    std::int64_t left = 0;     ///< units leased and not spent
    std::int64_t room = 0;     ///< the window's unleased units at the last lease
    std::chrono::nanoseconds taken_at{0};
    /// The limit the units were leased under: a binding with a lower one never spends them.
    std::int64_t limit = 0;
    /// Its records in Redis, "<id>:<units>" (two when threads merged leases).
    std::vector<std::string> records;
  };
  struct Table {
    std::mutex mutex;
    std::unordered_map<std::string, Lease> leases;
    std::unordered_map<std::string, detail::LeaseDenial> denied;
  };

  LeasedWindowBinding(std::shared_ptr<detail::LeaseShared> shared, std::string_view name,
                      const typename M::Params& params, std::optional<std::int64_t> lease)
      : shared_(std::move(shared)),
        table_(std::make_shared<Table>()),
        params_(params),
        tail_(detail::redis_key_tail(sliding ? "lsc" : "lfw", name)),
        explicit_lease_(lease.has_value()) {
    (void)M::Wire::bound_args(params);  // N in range, W whole us (the script's unit)
    if (lease && (*lease < 1 || *lease > params.limit))
      detail::invalid("lease_units", *lease, "must be in [1, params.limit]");
    lease_ = lease ? *lease : default_lease(params);
    if (shared_->options.redis.failure_policy == FailurePolicy::local_fallback)
      fallback_.emplace(shared_->fallback.template bind<M>(
          name, M::Wire::fallback(params, shared_->options.redis.fallback_divisor)));
  }

  std::int64_t default_lease(const typename M::Params& p) const {
    return std::max<std::int64_t>(1, p.limit / shared_->options.lease_divisor);
  }

  /// What a lease call saw and did.
  struct Taken {
    std::int64_t granted;  ///< units leased (0: none)
    std::int64_t count;    ///< window k's count before the grant (after the give back)
    std::int64_t prev;     ///< window k - 1's count (sliding counter; else 0)
    std::int64_t room;     ///< units the window can still lease after the grant
  };
  /// The key of window k's lease records (in the count's hash slot).
  std::string records_key(std::string_view key, std::int64_t k) const {
    return count_key(key, k) + ":l";
  }

  std::string count_key(std::string_view key, std::int64_t k) const {
    return detail::redis_key(shared_->options.redis.key_prefix, key, tail_) + ":" +
           std::to_string(k);
  }

  /// What a miss sends: the ended lease's give-back and records, and what it asks for.
  struct Miss {
    std::int64_t give_back = 0;        ///< unused units of the ended lease
    std::vector<std::string> records;  ///< the ended lease's records, named in its give-back
    bool keep = true;                  ///< a lease may be kept (within max_keys)
    std::string record;                ///< the new lease's record id (empty: none)
    std::optional<Lease> ended;        ///< the ended lease itself (restored if Redis fails)
  };

  /// The decision from this instance's lease or a remembered denial, if one answers; else
  /// nothing, with `m` what the lease call must send.
  std::optional<Decision> local(std::string_view key, std::chrono::nanoseconds now,
                                const Operation& op, Miss& m) const {
    const std::int64_t t = now.count(), k = params_.window_of(t);
    const std::lock_guard lock(table_->mutex);
    const std::string k_str(key);
    if (auto d = detail::recall_denial(table_->denied, k_str, now, op, params_.limit)) {
      shared_->denied_locally.fetch_add(1, std::memory_order_relaxed);
      return d;
    }
    auto it = table_->leases.find(k_str);
    if (it != table_->leases.end()) {
      Lease& l = it->second;
      if (l.window != k) {
        table_->leases.erase(it);  // its window ended: its count no longer matters
      } else if (op.cost <= l.left && now - l.taken_at < shared_->options.lease_duration &&
                 l.limit <= params_.limit) {
        if (!op.peek) l.left -= op.cost;
        shared_->local.fetch_add(1, std::memory_order_relaxed);
        return admitted(l.left + l.room, to_end(t));
      } else {
        // Too little, the lease ended, or it was taken under a higher limit (a copy from
        // `with_params`, such as a priority's reserve, shares this table): back with the
        // next lease, which Redis grants within this binding's own limit.
        m.give_back = l.left;
        m.ended = l;
        m.records = std::move(l.records);
        table_->leases.erase(it);
      }
    }
    m.keep = table_->leases.size() < shared_->options.max_keys;
    if (!op.peek) m.record = shared_->record_id();
    return std::nullopt;
  }

  std::chrono::nanoseconds to_end(std::int64_t t) const {
    return std::chrono::nanoseconds{(params_.window_of(t) + 1) * params_.window - t};
  }

  /// The lease call of a miss (a peek leases nothing).
  detail::RedisCall call(std::string_view key, std::chrono::nanoseconds now, const Operation& op,
                         const Miss& m) const {
    if (op.peek) return take_call(key, now.count(), 0, 0, m.give_back, m.records, {});
    const std::int64_t want = m.keep ? std::max(lease_, op.cost) : op.cost;
    return take_call(key, now.count(), std::min(want, params_.limit + 1), op.cost, m.give_back,
                     m.records, m.record);
  }

  /// The decision of a miss from its lease call's result `res`.
  Decision finish(std::string_view key, std::chrono::nanoseconds now, const Operation& op,
                  const Miss& m, const detail::RedisResult& res) const {
    const std::int64_t t = now.count(), k = params_.window_of(t);
    const auto r = taken(res, m.give_back);
    if (!r) {
      restore(key, now, m);
      return degrade(key, now, op, to_end(t));
    }
    if (op.peek) return model_view(*r, t, 1);
    if (r->granted == 0) {
      Decision d = model_view(*r, t, op.cost);
      // The script errs towards denial where its arithmetic is inexact (docs:
      // lua/lease_window.lua).
      if (d.allowed || d.retry_after == std::chrono::nanoseconds{0})
        d.retry_after = std::chrono::milliseconds{1};
      d.allowed = false;
      {
        const std::lock_guard lock(table_->mutex);
        detail::remember_denial(table_->denied, std::string(key), now, d, params_.limit,
                                shared_->options.max_keys, shared_->options.lease_duration);
      }
      return d;
    }
    const std::int64_t left = r->granted - op.cost, room = r->room;
    if (left > 0 && m.keep) {
      const std::lock_guard lock(table_->mutex);
      Lease& l = table_->leases[std::string(key)];
      if (l.window != k) l = Lease{k, 0, 0, now, params_.limit, {}};
      l.left += left;
      // Merged with another thread's lease: both records go back with the next give-back,
      // and the older start ends it (its record expires first).
      l.records.push_back(m.record + ":" + std::to_string(left));
      l.limit = std::max(l.limit, params_.limit);  // merged units: spendable under the higher
      l.room = room;
      l.taken_at = std::min(l.taken_at, now);
    }
    return admitted(left + room, to_end(t));
  }

  /// Puts back the ended lease a failed lease call was to give back (unless the key holds a
  /// lease again), still ended: its records go with the next call. Dropped, they would be
  /// reclaimed at their expiry with the units this instance had spent of them.
  void restore(std::string_view key, std::chrono::nanoseconds now, const Miss& m) const {
    if (!m.ended) return;
    const std::lock_guard lock(table_->mutex);
    auto [it, fresh] = table_->leases.try_emplace(std::string(key), *m.ended);
    if (!fresh) return;
    it->second.taken_at = now - shared_->options.lease_duration;  // ended: never spent again
  }

  /// One lease call at `t` (ns) on t's window: gives back `give_back` of the ended lease whose
  /// records are `records`, reclaims expired records, leases up to `want` if at least `need`
  /// fit (recorded as `record` if more than `need`). Nothing when Redis could not answer.
  std::optional<Taken> take(std::string_view key, std::int64_t t, std::int64_t want,
                            std::int64_t need, std::int64_t give_back,
                            const std::vector<std::string>& records,
                            const std::string& record) const {
    auto& client = *shared_->client;
    shared_->round_trips.fetch_add(1, std::memory_order_relaxed);
    auto res = client.execute_one(
        [&] { return take_call(key, t, want, need, give_back, records, record); },
        client.deadline_from_now());
    return taken(res.front(), give_back);
  }

  detail::RedisCall take_call(std::string_view key, std::int64_t t, std::int64_t want,
                              std::int64_t need, std::int64_t give_back,
                              const std::vector<std::string>& records,
                              const std::string& record) const {
    const std::int64_t W = params_.window, k = params_.window_of(t);
    detail::RedisCall c;
    c.script = &detail::lease_window_script();
    c.keys.push_back(count_key(key, k));
    c.keys.push_back(records_key(key, k));
    if constexpr (sliding) c.keys.push_back(count_key(key, k - 1));
    const std::int64_t matters = (k + (sliding ? 2 : 1)) * W - t;
    const std::int64_t ttl_ms = matters / 1'000'000 + 1 + shared_->options.redis.ttl_margin.count();
    const auto& o = shared_->options;
    const std::int64_t expiry_us =
        t / 1000 + std::chrono::microseconds(o.lease_duration + o.reclaim_grace).count();
    c.argv = {std::to_string(params_.limit),
              std::to_string(want),
              std::to_string(need),
              std::to_string(give_back),
              std::to_string(ttl_ms),
              std::to_string(W / 1000),
              std::to_string((t - k * W) / 1000),
              std::to_string(t / 1000),
              std::to_string(expiry_us),
              record.empty() ? std::string("-") : record};
    c.argv.insert(c.argv.end(), records.begin(), records.end());
    return c;
  }

  /// What a lease call's result says, nothing when Redis could not answer or answered
  /// otherwise (reported); counts it in the stats.
  std::optional<Taken> taken(const detail::RedisResult& res, std::int64_t give_back) const {
    const auto v = detail::lease_reply(*shared_, res, 5);
    if (!v) return std::nullopt;
    const auto& r = *v;
    if (r[1] > (1 << 30) || r[2] > (1 << 30)) {
      shared_->client->report(
          {RedisFailureKind::protocol, "unexpected reply from the lease script"});
      return std::nullopt;
    }
    shared_->units_leased.fetch_add(static_cast<std::uint64_t>(r[0]), std::memory_order_relaxed);
    shared_->units_returned.fetch_add(static_cast<std::uint64_t>(give_back),
                                      std::memory_order_relaxed);
    shared_->units_reclaimed.fetch_add(static_cast<std::uint64_t>(r[4]), std::memory_order_relaxed);
    return Taken{static_cast<std::int64_t>(r[0]), static_cast<std::int64_t>(r[1]),
                 static_cast<std::int64_t>(r[2]), static_cast<std::int64_t>(r[3])};
  }

  /// The model's dry run of `cost` on the counts a lease call saw (a denial's or peek's fields).
  Decision model_view(const Taken& r, std::int64_t t, std::int64_t cost) const {
    typename M::State s;
    if constexpr (sliding)
      s = {t, static_cast<std::uint32_t>(r.count), static_cast<std::uint32_t>(r.prev)};
    else
      s = {t, r.count};
    return M::apply(params_, s, std::chrono::nanoseconds{t}, Operation{cost, true});
  }

  Decision admitted(std::int64_t remaining, std::chrono::nanoseconds to_end) const {
    Decision d{};
    d.allowed = true;
    d.limit = params_.limit;
    d.remaining = std::clamp<std::int64_t>(remaining, 0, params_.limit);
    d.reset_after = to_end;
    return d;
  }

  Decision degrade(std::string_view key, std::chrono::nanoseconds now, const Operation& op,
                   std::chrono::nanoseconds to_end) const {
    if (fallback_) return detail::lease_fallback(*shared_, *fallback_, key, now, op);
    return detail::lease_degraded(
        *shared_, params_.limit, op,
        std::min<std::chrono::nanoseconds>(to_end, std::chrono::milliseconds{1}));
  }

  static Decision apply_part(const void* b, std::string_view key, std::chrono::nanoseconds now,
                             const Operation& op) {
    return static_cast<const LeasedWindowBinding*>(b)->apply(key, now, op);
  }
  static void apply_part_async(const void* b, std::string_view key, std::chrono::nanoseconds now,
                               const Operation& op, Completion<Decision> done) {
    static_cast<const LeasedWindowBinding*>(b)->apply_async(key, now, op, std::move(done));
  }

  std::shared_ptr<detail::LeaseShared> shared_;
  std::shared_ptr<Table> table_;
  typename M::Params params_;
  std::string tail_;
  std::int64_t lease_ = 1;
  bool explicit_lease_;
  using Fallback = decltype(std::declval<InMemoryStorage&>().template bind<M>(
      {}, std::declval<const typename M::Params&>()));
  std::optional<Fallback> fallback_;  ///< the instance's share under local_fallback
};

}  // namespace ratelimit
