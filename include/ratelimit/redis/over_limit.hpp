#pragma once
/// @file redis/over_limit.hpp
/// The over-limit cache as one Redis binding uses it (RedisOptions::over_limit_cache;
/// docs/redis.md "Hot keys"): the lookup that answers a denial from the state Redis last
/// reported, with the model's own `apply`, and what each reply teaches the cache. The container,
/// blind to models, is redis/detail/over_limit_cache.hpp. Used by RedisBinding
/// (redis/binding.hpp). Include <ratelimit/redis.hpp>.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <utility>

#include "../core/decision.hpp"
#include "../core/detail/arith.hpp"
#include "../core/listener.hpp"
#include "../core/priority.hpp"
#include "../core/storage.hpp"
#include "../core/wire.hpp"
#include "detail/client_core.hpp"
#include "detail/over_limit_cache.hpp"
#include "options.hpp"

namespace ratelimit::detail {

/// How a request went to Redis, for what its reply teaches the over-limit cache.
struct Sent {
  bool probe = false;      ///< it was its key's probe (see OverLimitCache::lookup)
  std::int64_t at_ns = 0;  ///< steady clock when it was sent (TimeSource::redis)
};

/// One binding's view of the over-limit cache, made per call from the binding's members (it
/// refers to them, so it never outlives the call). Only a model whose reply says its state
/// (`StateWire`) is cached; for the others `on()` is false and nothing here is asked.
/// Thread safety: every member is safe from many threads (the cache's own locking).
template <WireModel M>
class OverLimit {
 public:
  /// `params`: the binding's; `tail`, `tail_hash`: its Redis key tail (algorithm and limiter
  /// name) and `cache.tail_hash(tail)`, which name its entries.
  OverLimit(const RedisClient& client, OverLimitCache& cache, const typename M::Params& params,
            std::string_view tail, std::uint64_t tail_hash) noexcept
      : client_(client), cache_(cache), params_(params), tail_(tail), tail_hash_(tail_hash) {}

  /// True if the binding's decisions go through the cache.
  bool on() const noexcept {
    if constexpr (StateWire<M>)
      return client_.options().over_limit_cache.enabled;
    else
      return false;
  }

  /// The cache entry of `key` for this binding.
  CacheKey key(std::string_view key) const noexcept { return {tail_, key, tail_hash_}; }

  /// Forgets what the cache holds for `key` (for this binding), if on: its next request asks
  /// Redis.
  void forget(std::string_view key) const {
    if (on()) cache_.forget(this->key(key));
  }

  /// The steady clock, in ns: the cache's time line with TimeSource::redis (`Sent::at_ns`).
  static std::int64_t steady_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  /// What the cache says about deciding `op` on `key` at `now`: a hit (the denial in `d`), a
  /// probe, a wait (`make_waiter()` is then called) or none (see OverLimitCache::lookup).
  template <class MakeWaiter>
  OverLimitCache::Found lookup(std::string_view key, std::chrono::nanoseconds now,
                               const Operation& op, Decision& d, MakeWaiter&& make_waiter) const {
    if constexpr (!StateWire<M>) {
      (void)key, (void)now, (void)op, (void)d, (void)make_waiter;
      return OverLimitCache::Found::none;  // never cached (on() is false)
    } else {
      const std::int64_t steady = redis_time() ? steady_ns() : 0;
      using Verdict = OverLimitCache::Verdict;
      const auto eval = [&](const CachedState& base, Decision& out) {
        const auto& c = static_cast<const Cached&>(base);
        // A state that is the key's whole state decides for any limit (another priority's, see
        // core/priority.hpp): this request is decided with its own parameters, so a denial of a
        // sheddable request never denies a critical one. A partial state (one cost's) was
        // rebuilt for its own parameters only.
        if (c.any_cost ? !same_but_limit(c.params, params_)
                       : (!(c.params == params_) || c.cost != op.cost))
          return Verdict::unknown;
        // Before the state's time (a clock stepped back, an earlier explicit time), Redis
        // decides at the key's latest admitted time, which the reply did not say.
        if (!redis_time() && now < c.time) return Verdict::unknown;
        const auto t = redis_time() ? redis_now(c, steady) : now;
        if (t >= c.until) return Verdict::unknown;
        typename M::State s = c.state;
        out = M::apply(params_, s, t, op);
        return out.allowed ? Verdict::admit : Verdict::deny;
      };
      // A dry run never probes: its answer changes nothing that others should wait for.
      const auto found =
          cache_.lookup(this->key(key), eval, d, std::forward<MakeWaiter>(make_waiter), !op.peek);
      if (found == OverLimitCache::Found::hit)
        if (const ObserverSet* obs = client_.observers.current())
          Observers::each(*obs, [&](Listener& l, bool with_keys) {
            l.on_over_limit_cache_hit({tail_, with_keys ? key : std::string_view{}});
          });
      return found;
    }
  }

  /// Teaches the cache what Redis's reply `ints` (decided as `d`) says about `key`.
  void learn(std::string_view key, std::span<const i128> ints, const Operation& op,
             const Decision& d, const Sent& sent, std::chrono::nanoseconds now) const {
    if constexpr (StateWire<M>) {
      auto& cache = cache_;
      const auto ck = this->key(key);
      auto w = M::Wire::state(params_, ints, op);
      const std::int64_t local_now = redis_time() ? steady_ns() : now.count();
      // The entry's end on the cache's time line (the client's clock, or the steady clock).
      const auto local_end = [&](std::chrono::nanoseconds end) {
        return redis_time() ? sent.at_ns + (end - w->time).count() : end.count();
      };
      const auto keep = [&](const typename M::State& s, std::chrono::nanoseconds retry) {
        const auto end = std::min(w->time + retry, w->until);
        cache.learn(ck,
                    std::make_unique<Cached>(params_, s, w->time, sent.at_ns, op.cost, w->any_cost,
                                             w->until),
                    local_end(end), true, sent.probe, local_now);
      };
      if (!w || (redis_time() && sent.at_ns == 0)) {
        // Unreadable, or on Redis's clock without the instant it was sent (a batch's call):
        // nothing to anchor the state's time to here.
        if (sent.probe) cache.release(ck);
      } else if (!d.allowed) {
        if (d.retry_after == Decision::never) {
          if (sent.probe) cache.release(ck);  // a cost over the limit: nothing to remember
        } else {
          keep(w->state, d.retry_after);
        }
      } else if (op.peek || !w->any_cost) {
        // Admitted: a dry run, or a log that changed in a way the reply does not say. The
        // entry no longer denies (or no longer says what Redis holds): forget it.
        cache.learn(ck, nullptr, 0, false, sent.probe, local_now);
      } else {
        // The state Redis wrote: remembered while it denies even one unit.
        typename M::State after = w->state;
        (void)M::apply(params_, after, w->time, op);
        typename M::State probe = after;
        const Decision next = M::apply(params_, probe, w->time, Operation{1, true});
        if (!next.allowed && next.retry_after != Decision::never)
          keep(after, next.retry_after);
        else
          cache.learn(ck, nullptr, 0, false, sent.probe, local_now);
      }
    } else {
      (void)key, (void)ints, (void)op, (void)d, (void)sent, (void)now;
    }
  }

 private:
  /// What the cache holds for one key of this binding: the state Redis reported, on its time.
  struct Cached final : CachedState {
    Cached(const typename M::Params& p, const typename M::State& s, std::chrono::nanoseconds t,
           std::int64_t sent_at, std::int64_t c, bool any, std::chrono::nanoseconds u)
        : params(p), state(s), time(t), anchor_ns(sent_at), cost(c), any_cost(any), until(u) {}
    typename M::Params params;  ///< decided with these (a binding with others asks Redis)
    typename M::State state;
    std::chrono::nanoseconds time;  ///< the state's time (the client's clock, or Redis's)
    std::int64_t anchor_ns;         ///< TimeSource::redis: steady clock when it was asked
    std::int64_t cost;              ///< !any_cost: the only cost `state` decides
    bool any_cost;
    std::chrono::nanoseconds until;  ///< `state` decides exactly only before this time
  };

  bool redis_time() const noexcept { return client_.options().time_source == TimeSource::redis; }

  /// The earliest Redis time that may be now, for an entry asked at steady `anchor` (sent
  /// then, so Redis's clock read `time` at or after it): elapsed time plus the drift margin.
  static std::chrono::nanoseconds redis_now(const Cached& c, std::int64_t steady) noexcept {
    const std::int64_t age = steady > c.anchor_ns ? steady - c.anchor_ns : 0;
    return c.time + std::chrono::nanoseconds{age + 1'000'000 + age / 1000};
  }

  const RedisClient& client_;
  OverLimitCache& cache_;
  const typename M::Params& params_;
  std::string_view tail_;
  std::uint64_t tail_hash_;
};

}  // namespace ratelimit::detail
