#pragma once
/// @file redis/lease/bucket.hpp
/// A token bucket leased (docs/far.md, "Leased quotas for hot keys"): an instance takes
/// min(L, tokens the shared bucket holds now) in one script (lua/lease_bucket.lua), which
/// debits them at once, and spends them locally until they run out or H has passed since the
/// lease. A miss is one round trip, which also gives back what the ended lease left unused.
///
/// The give-back is decayed: a lease that took g tokens at s and gives back u unused at t
/// credits min(u, (g - r (t - s))+) tokens, and never more than takes the bucket to C.
/// Crediting all u (capped at C only) is not enough: the bucket refilled through the debited
/// tokens while they were held, and another lease may have taken that refill; credited again,
/// the same tokens are spent twice (tests/far/lease_bucket_test.cpp has a schedule that then
/// spends 195 at one instant where C + r H = 150). Decayed, what a lease can still credit
/// shrinks at r, as fast as the bucket refills.
///
/// Bound: in any interval [t1, t2] of length D, the instances together spend at most
/// C + r (D + H), over-admission at most r H against one exact bucket (C + r D). Proof, with X
/// the shared bucket's tokens (<= C, refilled at r), g_i the tokens lease i took at s_i, and
/// with clocks that agree:
///   1. A unit spent in [t1, t2] belongs to a lease taken in J = (t1 - H, t2] (a lease is
///      spent only while younger than H).
///   2. V(t) = X(t) + sum over leases not yet given back of (g_i - r (t - s_i))+ never exceeds
///      C: a lease moves g_i from X into its term (V unchanged); a give-back credits at most
///      its term and drops it; refill raises X at most at r while every positive term falls at
///      r, so V grows only when no term is positive, when V = X <= C. (Two leases of one key
///      merged by concurrent threads credit at most the sum of their terms: the merged credit
///      starts at that sum and falls at 2 r.)
///   3. Over I = [t1 - H, t2] the debits balance: sum over J of g_i <= X(t1 - H) + r (D + H) +
///      the credits in I. Credits of leases in J are at most their unused tokens; credits of
///      older leases are at most their terms at t1 - H, so with X(t1 - H) they are at most
///      V(t1 - H) <= C. Hence the units spent from J, their g_i less their unused tokens, are
///      at most C + r (D + H).
/// A unit of each lease is spent when it is taken, so a schedule reaches the bound to within
/// one unit (the test: 199 of 200).
///
/// Dead holders: a lease that keeps tokens leaves a record (lua/lease_bucket.lua) expiring
/// H + G after it (G = reclaim_grace). A lease call past the expiry reclaims it, crediting its
/// term min(unspent, (g - r age)+): at most its term, so step 2 holds. A live holder whose record
/// was reclaimed gets no credit for it; what the reclaim credited of tokens it had spent, at most
/// (g - r (H + G))+ per such lease, comes on top of the bound (call `flush` every G).
///
/// What an instance sees: tokens leased by another instance are unavailable to it until spent
/// or given back, so it may deny while others hold them (at most L per other instance, for at
/// most H). The decay costs at most min(u, r H) tokens per lease given back: the bucket is
/// then lower than an exact one by that until it refills.
///
/// The leaky bucket is not leased (see LeasedStorage::bind): its admitted work is told when to
/// go (`delay`), and a leased unit's place in the queue is fixed when it is leased.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../../algorithms/detail/gcra.hpp"
#include "../../algorithms/token_bucket.hpp"
#include "../../core/completion.hpp"
#include "../../core/decision.hpp"
#include "../../core/detail/decimal.hpp"
#include "../../core/detail/validate.hpp"
#include "../../core/storage.hpp"
#include "../../lua/lease_bucket.hpp"
#include "../detail/client.hpp"
#include "../detail/keys.hpp"
#include "../detail/script.hpp"
#include "decide.hpp"
#include "options.hpp"

namespace ratelimit {

namespace detail {
inline const RedisScript& lease_bucket_script() {
  static const RedisScript s = make_script("lease_bucket", std::string(lua::lease_bucket));
  return s;
}
}  // namespace detail

/// One limiter's token bucket, leased (`LeasedStorage::bind<TokenBucketModel>` makes it).
/// Copies share the leases. Errors: `apply` throws std::invalid_argument for cost < 1.
/// Thread safety: every member is safe from many threads (a key's lease is kept under one mutex
/// per limiter; the round trip runs outside it).
class LeasedBucketBinding {
 public:
  using Model = TokenBucketModel;

  /// Decides `key` at `now`: from this instance's lease when it holds `op.cost` tokens and is
  /// younger than H (no round trip), else with one lease round trip that gives back the ended
  /// lease's unused tokens (decayed, see the file comment). Decision fields: limit = C;
  /// remaining = what the lease still holds plus what the shared bucket held after the last
  /// lease; reset_after = until the shared bucket, as the last lease left it, is full; a
  /// denial's retry_after = until the shared bucket holds `op.cost` (the token bucket's own).
  Decision apply(std::string_view key, std::chrono::nanoseconds now, const Operation& op) const {
    return detail::LeaseDecide<LeasedBucketBinding>::apply(*this, key, now, op);
  }

  /// `apply` without blocking the caller on a miss: `done(Decision)` is called exactly once,
  /// with the decision `apply` would give: before this returns when the lease (or a remembered
  /// denial) answers, or when Redis is not asked (circuit open, backpressure); else on the Redis
  /// client's I/O thread once the lease call returns (core/completion.hpp). The key is copied
  /// and the storage's shared state held until `done` runs. Throws std::invalid_argument for
  /// cost < 1 (and never calls `done`). Thread safety: safe from many threads.
  void apply_async(std::string_view key, std::chrono::nanoseconds now, const Operation& op,
                   Completion<Decision> done) const {
    detail::LeaseDecide<LeasedBucketBinding>::apply_async(*this, key, now, op, std::move(done));
  }

  /// Gives back every lease older than H at `now` (one round trip per key whose decayed credit
  /// is positive). Returns the whole tokens credited, rounded down (the shared bucket takes
  /// fewer when that would put it above C). Call it from a timer, and before shutdown.
  std::int64_t flush(std::chrono::nanoseconds now) const {
    now = detail::lease_clamp_time(now);
    std::vector<std::pair<std::string, Lease>> ended;
    {
      const std::lock_guard lock(table_->mutex);
      for (auto it = table_->leases.begin(); it != table_->leases.end();) {
        if (now - it->second.taken_at >= shared_->options.lease_duration) {
          ended.emplace_back(it->first, it->second);
          it = table_->leases.erase(it);
        } else {
          ++it;
        }
      }
    }
    std::int64_t given = 0;
    for (const auto& [key, l] : ended) {
      // A term of 0 only falls: the bucket refilled through the lease, and a reclaim of its
      // records would credit nothing. Otherwise a spent lease still drops its records (a
      // reclaim would credit spent tokens).
      if (term(l, now) <= 0) continue;
      const detail::i128 credit = l.left > 0 ? decayed(l, now) : 0;
      if (take(key, now, l.left, credit, l.records))
        given += static_cast<std::int64_t>(credit / params_.period);
    }
    return given;
  }

  /// Refused: leased tokens held by other instances cannot be taken back from here.
  void reset(std::string_view) const {
    throw std::logic_error("LeasedStorage: reset is not supported (other instances hold leases)");
  }

  /// The part of a one-key `decide_all`.
  LeasedPart part(std::string_view key, const Operation& op, std::string_view = {}) const {
    return LeasedPart{key, op, &apply_part, this, &apply_part_async};
  }

  /// The same keys with other parameters (the lease size follows unless it was given). The
  /// copy shares this binding's leases, but spends one locally only if it was taken under a
  /// capacity no higher than its own. Throws std::invalid_argument as `bind` does.
  LeasedBucketBinding with_params(const detail::GcraParams& p) const {
    LeasedBucketBinding b = *this;
    b.params_ = p;
    check(p);
    if (!explicit_lease_) b.lease_ = default_lease(p);
    if (b.fallback_)
      b.fallback_.emplace(fallback_->with_params(
          TokenBucketModel::Wire::fallback(p, shared_->options.redis.fallback_divisor)));
    return b;
  }

  /// L: the tokens one lease asks for.
  std::int64_t lease_units() const noexcept { return lease_; }

 private:
  friend class LeasedStorage;
  friend struct detail::LeaseDecide<LeasedBucketBinding>;

  struct Lease {
    std::int64_t left = 0;  ///< tokens leased and not spent
    std::int64_t room = 0;  ///< tokens the shared bucket held after the last lease
    std::chrono::nanoseconds taken_at{0};
    std::int64_t limit = 0;               ///< the capacity it was leased under
    std::chrono::nanoseconds full_at{0};  ///< when the shared bucket, as left, is full
    /// The credit: (credit_base - parts x (t - credit_at) x count)+ in 1/count ns, at most
    /// left x period. For one lease credit_base = g x period and credit_at = its start.
    std::int64_t credit_base = 0;
    std::chrono::nanoseconds credit_at{0};
    std::int64_t parts = 1;
    /// Its records in Redis, as the script wrote them (more than one when threads merged).
    std::vector<std::string> records;
  };
  struct Table {
    std::mutex mutex;
    std::unordered_map<std::string, Lease> leases;
    std::unordered_map<std::string, detail::LeaseDenial> denied;
  };
  /// What a lease call saw and did.
  struct Taken {
    std::int64_t granted;  ///< tokens leased (0: none)
    std::int64_t deficit;  ///< D after the credit, before the grant (1/count ns)
  };

  LeasedBucketBinding(std::shared_ptr<detail::LeaseShared> shared, std::string_view name,
                      const detail::GcraParams& params, std::optional<std::int64_t> lease)
      : shared_(std::move(shared)),
        table_(std::make_shared<Table>()),
        params_(params),
        tail_(detail::redis_key_tail("ltb", name)),
        explicit_lease_(lease.has_value()) {
    check(params);
    if (lease && (*lease < 1 || *lease > params.limit))
      detail::invalid("lease_units", *lease, "must be in [1, params.limit]");
    lease_ = lease ? *lease : default_lease(params);
    if (shared_->options.redis.failure_policy == FailurePolicy::local_fallback)
      fallback_.emplace(shared_->fallback.template bind<TokenBucketModel>(
          name, TokenBucketModel::Wire::fallback(params, shared_->options.redis.fallback_divisor)));
  }

  /// The token bucket's range, and what the script's doubles need: a full bucket, C x period
  /// in 1/count ns, at most 2^52.
  static void check(const detail::GcraParams& p) {
    (void)TokenBucketModel::Wire::bound_args(p);
    if (detail::i128{p.limit} * p.period > (detail::i128{1} << 52))
      detail::invalid("params.limit", p.limit,
                      "a leased bucket needs limit x period (the rate reduced to count per "
                      "period ns) <= 2^52: lower the capacity or use a shorter period");
  }

  std::int64_t default_lease(const detail::GcraParams& p) const {
    return std::max<std::int64_t>(1, p.limit / shared_->options.lease_divisor);
  }

  /// What `l` may still credit at `now` whatever it spent, in 1/count ns: its term (g x period
  /// - age x count)+ (for merged leases, see Lease).
  detail::i128 term(const Lease& l, std::chrono::nanoseconds now) const {
    const auto age = std::max<std::int64_t>(0, (now - l.credit_at).count());
    const detail::i128 c = l.credit_base - detail::i128{l.parts} * age * params_.count;
    return c > 0 ? c : 0;
  }

  /// The credit of `l`'s unused tokens at `now`, in 1/count ns: min(left x period, its term),
  /// so the refill since the lease is not credited twice (see the file comment).
  detail::i128 decayed(const Lease& l, std::chrono::nanoseconds now) const {
    return std::min(term(l, now), detail::i128{l.left} * params_.period);
  }

  /// Whole tokens a bucket with deficit `d` (1/count ns) holds.
  std::int64_t available(std::int64_t d) const {
    const detail::i128 room = detail::i128{params_.limit} * params_.period - d;
    return room > 0 ? static_cast<std::int64_t>(room / params_.period) : 0;
  }

  /// `v` in 1/count ns as whole ns, rounded up.
  std::chrono::nanoseconds ns_of(detail::i128 v) const {
    return std::chrono::nanoseconds{
        static_cast<std::int64_t>((v + params_.count - 1) / params_.count)};
  }

  /// What a miss sends: the ended lease's give-back and records, and what it asks for.
  struct Miss {
    std::int64_t back = 0;             ///< unused tokens of the ended lease
    detail::i128 credit = 0;           ///< their decayed credit (1/count ns)
    std::vector<std::string> records;  ///< the ended lease's records, named in its give-back
    bool keep = true;                  ///< a lease may be kept (within max_keys)
    std::string record;                ///< the new lease's record id (empty: none)
    std::optional<Lease> ended;        ///< the ended lease itself (restored if Redis fails)
  };

  /// The decision from this instance's lease or a remembered denial, if one answers; else
  /// nothing, with `m` what the lease call must send.
  std::optional<Decision> local(std::string_view key, std::chrono::nanoseconds now,
                                const Operation& op, Miss& m) const {
    const std::lock_guard lock(table_->mutex);
    const std::string k_str(key);
    if (auto d = detail::recall_denial(table_->denied, k_str, now, op, params_.limit)) {
      shared_->denied_locally.fetch_add(1, std::memory_order_relaxed);
      return d;
    }
    auto it = table_->leases.find(k_str);
    if (it != table_->leases.end()) {
      Lease& l = it->second;
      if (op.cost <= l.left && now - l.taken_at < shared_->options.lease_duration &&
          l.limit <= params_.limit) {
        if (!op.peek) l.left -= op.cost;
        shared_->local.fetch_add(1, std::memory_order_relaxed);
        return admitted(l.left + l.room, l.full_at - now);
      }
      // Too few, too old, or taken under a higher limit (a priority's copy shares this
      // table): given back with the next lease, which Redis grants within this limit. Records
      // of a lease whose term is 0 need not go: a reclaim would credit them nothing.
      m.back = l.left;
      m.credit = decayed(l, now);
      m.ended = l;
      if (term(l, now) > 0) m.records = std::move(l.records);
      table_->leases.erase(it);
    }
    m.keep = table_->leases.size() < shared_->options.max_keys;
    if (!op.peek) m.record = shared_->record_id();
    return std::nullopt;
  }

  /// The lease call of a miss (a peek leases nothing).
  detail::RedisCall call(std::string_view key, std::chrono::nanoseconds now, const Operation& op,
                         const Miss& m) const {
    if (op.peek) return take_call(key, now, 0, 0, m.credit, m.records, {});
    const std::int64_t want = m.keep ? std::max(lease_, op.cost) : op.cost;
    return take_call(key, now, std::min(want, params_.limit + 1), op.cost, m.credit, m.records,
                     m.record);
  }

  /// The decision of a miss from its lease call's result `res`.
  Decision finish(std::string_view key, std::chrono::nanoseconds now, const Operation& op,
                  const Miss& m, const detail::RedisResult& res) const {
    const std::int64_t want =
        op.peek ? 0 : std::min(m.keep ? std::max(lease_, op.cost) : op.cost, params_.limit + 1);
    const auto r = taken(res, want, m.back);
    if (!r) {
      restore(key, now, m);
      return degrade(key, now, op);
    }
    if (op.peek) return model_view(*r, now, op.cost);
    if (r->granted == 0) {
      Decision d = model_view(*r, now, op.cost);
      if (d.allowed || d.retry_after == std::chrono::nanoseconds{0})
        d.retry_after = std::chrono::milliseconds{1};  // the script erred towards denial
      d.allowed = false;
      {
        const std::lock_guard lock(table_->mutex);
        detail::remember_denial(table_->denied, std::string(key), now, d, params_.limit,
                                shared_->options.max_keys, shared_->options.lease_duration);
      }
      return d;
    }
    const std::int64_t left = r->granted - op.cost;
    const std::int64_t room = available(r->deficit) - r->granted;
    const std::int64_t grant_worth = r->granted * params_.period;  // <= C x period <= 2^52
    const std::chrono::nanoseconds full_at = now + ns_of(detail::i128{r->deficit} + grant_worth);
    if (left > 0 && m.keep) {
      const std::lock_guard lock(table_->mutex);
      auto [it, fresh] = table_->leases.try_emplace(std::string(key));
      Lease& l = it->second;
      if (fresh) {
        l = Lease{left, room, now, params_.limit, full_at, grant_worth, now, 1, {}};
      } else {
        // Another thread leased the key meanwhile: merged. The older start ends it, so every
        // unit is still spent within H of its debit; the credit starts at the sum of both
        // terms and falls at r per lease merged, never above their sum (file comment).
        l.credit_base = static_cast<std::int64_t>(term(l, now)) + grant_worth;
        l.credit_at = now;
        ++l.parts;
        l.left += left;
        l.taken_at = std::min(l.taken_at, now);
        l.limit = std::max(l.limit, params_.limit);
        l.room = room;
        l.full_at = full_at;
      }
      l.records.push_back(record_member(m.record, r->granted, now, left));
    }
    return admitted(left + room, full_at - now);
  }

  /// Puts back the ended lease a failed lease call was to give back (unless the key holds a
  /// lease again), still ended: its credit and records go with the next call. Dropped, its
  /// records would be reclaimed at their expiry, crediting tokens this instance had spent.
  void restore(std::string_view key, std::chrono::nanoseconds now, const Miss& m) const {
    if (!m.ended) return;
    const std::lock_guard lock(table_->mutex);
    auto [it, fresh] = table_->leases.try_emplace(std::string(key), *m.ended);
    if (!fresh) return;
    it->second.taken_at = now - shared_->options.lease_duration;  // ended: never spent again
  }

  /// The record the script writes for a lease of `granted` tokens at `now` that left `left`
  /// unspent and was recorded as `id` (lua/lease_bucket.lua).
  std::string record_member(const std::string& id, std::int64_t granted,
                            std::chrono::nanoseconds now, std::int64_t left) const {
    return id + ":" + std::to_string(granted * params_.period) + ":" +
           std::to_string(now.count() / 1000) + ":" + std::to_string(left * params_.period);
  }

  /// The key of the bucket's lease records (in its hash slot).
  std::string records_key(std::string_view key) const {
    return detail::redis_key(shared_->options.redis.key_prefix, key, tail_) + ":l";
  }

  /// One lease call at `now` (flush): credits `credit` (for `back` unused tokens of the ended
  /// lease whose records are `records`; nothing if one was reclaimed), reclaims expired
  /// records. Nothing when Redis could not answer.
  std::optional<Taken> take(std::string_view key, std::chrono::nanoseconds now, std::int64_t back,
                            detail::i128 credit, const std::vector<std::string>& records) const {
    auto& client = *shared_->client;
    shared_->round_trips.fetch_add(1, std::memory_order_relaxed);
    auto res = client.execute_one([&] { return take_call(key, now, 0, 0, credit, records, {}); },
                                  client.deadline_from_now());
    return taken(res.front(), 0, back);
  }

  /// The lease call at `now`: credits `credit` for the ended lease whose records are
  /// `records`, reclaims expired records, leases up to `want` if at least `need` are there
  /// (recorded as `record` if more than `need`).
  detail::RedisCall take_call(std::string_view key, std::chrono::nanoseconds now, std::int64_t want,
                              std::int64_t need, detail::i128 credit,
                              const std::vector<std::string>& records,
                              const std::string& record) const {
    const std::int64_t t = now.count();
    const detail::i128 full = detail::i128{params_.limit} * params_.period;
    detail::RedisCall c;
    c.script = &detail::lease_bucket_script();
    c.keys.push_back(detail::redis_key(shared_->options.redis.key_prefix, key, tail_));
    c.keys.push_back(records_key(key));
    const auto& o = shared_->options;
    const std::int64_t expiry_us =
        t / 1000 + std::chrono::microseconds(o.lease_duration + o.reclaim_grace).count();
    c.argv = {std::to_string(t / 1000),
              std::to_string((t % 1000) * params_.count),
              std::to_string(1000 * params_.count),
              std::to_string(params_.period),
              detail::to_decimal(full),
              std::to_string(want),
              std::to_string(need),
              detail::to_decimal(credit),
              std::to_string(shared_->options.redis.ttl_margin.count()),
              std::to_string(expiry_us),
              record.empty() ? std::string("-") : record};
    c.argv.insert(c.argv.end(), records.begin(), records.end());
    return c;
  }

  /// What a lease call's result says (it asked for at most `want`, giving back `back`);
  /// nothing when Redis could not answer or answered otherwise (reported). Counts it.
  std::optional<Taken> taken(const detail::RedisResult& res, std::int64_t want,
                             std::int64_t back) const {
    const detail::i128 full = detail::i128{params_.limit} * params_.period;
    const auto v = detail::lease_reply(*shared_, res, 3);
    if (!v) return std::nullopt;
    const auto& r = *v;
    if (r[0] > want || r[1] > full + 1) {
      shared_->client->report(
          {RedisFailureKind::protocol, "unexpected reply from the lease script"});
      return std::nullopt;
    }
    shared_->units_leased.fetch_add(static_cast<std::uint64_t>(r[0]), std::memory_order_relaxed);
    shared_->units_returned.fetch_add(static_cast<std::uint64_t>(back), std::memory_order_relaxed);
    shared_->units_reclaimed.fetch_add(static_cast<std::uint64_t>(r[2] / params_.period),
                                       std::memory_order_relaxed);
    return Taken{static_cast<std::int64_t>(r[0]), static_cast<std::int64_t>(r[1])};
  }

  /// The token bucket's dry run of `cost` on the deficit a lease call saw (a denial's or a
  /// peek's fields).
  Decision model_view(const Taken& r, std::chrono::nanoseconds now, std::int64_t cost) const {
    const std::int64_t t = now.count();
    detail::GcraState s;
    s.set(t + r.deficit / params_.count, r.deficit % params_.count, t, params_.frac_bits);
    return TokenBucketModel::apply(params_, s, now, Operation{cost, true});
  }

  Decision admitted(std::int64_t remaining, std::chrono::nanoseconds reset) const {
    Decision d{};
    d.allowed = true;
    d.limit = params_.limit;
    d.remaining = std::clamp<std::int64_t>(remaining, 0, params_.limit);
    d.reset_after = std::max(reset, std::chrono::nanoseconds{0});
    return d;
  }

  Decision degrade(std::string_view key, std::chrono::nanoseconds now, const Operation& op) const {
    if (fallback_) return detail::lease_fallback(*shared_, *fallback_, key, now, op);
    return detail::lease_degraded(*shared_, params_.limit, op, std::chrono::milliseconds{1});
  }

  static Decision apply_part(const void* b, std::string_view key, std::chrono::nanoseconds now,
                             const Operation& op) {
    return static_cast<const LeasedBucketBinding*>(b)->apply(key, now, op);
  }
  static void apply_part_async(const void* b, std::string_view key, std::chrono::nanoseconds now,
                               const Operation& op, Completion<Decision> done) {
    static_cast<const LeasedBucketBinding*>(b)->apply_async(key, now, op, std::move(done));
  }

  std::shared_ptr<detail::LeaseShared> shared_;
  std::shared_ptr<Table> table_;
  detail::GcraParams params_;
  std::string tail_;
  std::int64_t lease_ = 1;
  bool explicit_lease_;
  using Fallback = decltype(std::declval<InMemoryStorage&>().template bind<TokenBucketModel>(
      {}, std::declval<const detail::GcraParams&>()));
  std::optional<Fallback> fallback_;  ///< the instance's share under local_fallback
};

}  // namespace ratelimit
