#pragma once
/// @file redis/binding.hpp
/// One limiter's policy bound to a Redis storage (`RedisBinding`, made by `RedisStorage::bind`):
/// a decision's arguments, its script call and its reply read back with the model, and the part
/// of an all-or-nothing decision (`RedisPart`). Beside it: the storage's hot-key levers as a
/// binding uses them (redis/over_limit.hpp, redis/pre_limit.hpp; docs/redis.md "Hot keys") and
/// the failure policy's decision when Redis cannot answer (redis/failure_policy.hpp).
/// Include <ratelimit/redis.hpp>.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../algorithms/registry.hpp"
#include "../core/completion.hpp"
#include "../core/decision.hpp"
#include "../core/detail/validate.hpp"
#include "../core/storage.hpp"
#include "../core/wire.hpp"
#include "../memory/in_memory_storage.hpp"
#include "detail/client.hpp"
#include "detail/decimal.hpp"
#include "detail/keys.hpp"
#include "detail/over_limit_cache.hpp"
#include "detail/script.hpp"
#include "detail/waiter.hpp"
#include "failure_policy.hpp"
#include "options.hpp"
#include "over_limit.hpp"
#include "pre_limit.hpp"

namespace ratelimit {

class RedisBatch;
class RedisStorage;
template <WireModel M>
class RedisBinding;

namespace detail {
/// How `RedisStorage::decide_all` reaches a part's binding without knowing its model.
struct RedisPartOps {
  ScriptPart script;
  RedisClient* (*client)(const void* binding);
  std::string (*key)(const void* binding, std::string_view key, std::string_view tag);
  void (*args)(const void* binding, std::chrono::nanoseconds now, const Operation& op,
               std::vector<std::string>& out);
  std::optional<Decision> (*decode)(const void* binding, const redisReply& reply,
                                    const Operation& op);
  Decision (*degrade)(const void* binding, std::string_view key, std::chrono::nanoseconds now,
                      const Operation& op);
  /// The part's per-instance limit (the pre-limit), if the binding has one.
  std::optional<InMemoryStorage::Part> (*local)(const void* binding, std::string_view key,
                                                const Operation& op);
};

/// What a storage's bindings share besides the client: the over-limit cache and the pre-limit's
/// counter.
struct HotKeys {
  explicit HotKeys(const RedisOptions& o)
      : cache(o.over_limit_cache.enabled ? o.over_limit_cache.capacity : 0) {}
  OverLimitCache cache;
  std::atomic<std::uint64_t> pre_limited{0};
};
}  // namespace detail

/// One part of a Redis all-or-nothing decision (see `MultiKeyStorage`), made by
/// `RedisBinding::part`: it refers to the binding, key and tag, which must outlive the call.
/// Thread safety: a plain value.
struct RedisPart {
  const detail::RedisPartOps* ops;
  const void* binding;
  std::string_view key;
  std::string_view tag;
  Operation op;
};

/// One limiter's policy bound to a RedisStorage (see `ratelimit::Binding`): decides a key with
/// one EVALSHA of its algorithm's script, and applies the failure policy when Redis cannot.
/// Copies share the storage. Errors: `apply` throws `std::invalid_argument` for cost < 1 (a
/// negative cost would mint shared capacity); Redis failures never throw.
/// Thread safety: every member is safe from many threads.
template <WireModel M>
class RedisBinding {
 public:
  using Model = M;

  /// Decides `key` at `now` (rounded down to a whole us; with TimeSource::redis, Redis's clock).
  /// With the pre-limit or the over-limit cache on (RedisOptions), a denial may come from them
  /// without asking Redis.
  Decision apply(std::string_view key, std::chrono::nanoseconds now, const Operation& op) const {
    detail::check_cost(op.cost);
    if (op.kind == Operation::Kind::refund || op.kind == Operation::Kind::penalty ||
        op.kind == Operation::Kind::reserve) [[unlikely]]
      return adjust(key, now, op);
    Decision d{};
    if (pre_limit().denies(key, now, op, d)) return d;
    std::chrono::steady_clock::time_point deadline;
    detail::Sent sent;
    if (over_limit().on()) {
      // Waits at most once: after another request's answer, this one looks again and asks
      // Redis itself if it must (a failed probe must not line its waiters up again, one round
      // trip each). Never on an I/O thread, which must not block.
      bool may_wait = !detail::on_io_thread;
      for (bool first = true;; first = false) {
        std::shared_ptr<detail::OneShot> woken;
        const auto make_waiter = [&]() -> std::function<void()> {
          if (!may_wait) return {};
          woken = std::make_shared<detail::OneShot>();
          return [woken] { woken->notify(); };
        };
        const auto found = over_limit().lookup(key, now, op, d, make_waiter);
        if (found == detail::OverLimitCache::Found::hit) return d;
        // The decision's time starts here, before any wait (waiting for another request's
        // answer counts against it), not before the lookup: a hit, which never waits, must
        // not pay a second clock read (a third of its cost; bench/run --hot-keys).
        if (first) deadline = client_->deadline_from_now();
        if (found != detail::OverLimitCache::Found::wait) {
          sent.probe = found == detail::OverLimitCache::Found::probe;
          break;
        }
        woken->wait();  // another request is asking Redis for this key: then look again
        may_wait = false;
      }
      sent.at_ns = detail::OverLimit<M>::steady_ns();
    } else {
      deadline = client_->deadline_from_now();
    }
    detail::ProbeGuard guard(sent.probe ? &hot_->cache : nullptr, over_limit().key(key));
    auto results = client_->execute_one([&] { return call(key, now, op); }, deadline);
    guard.dismiss();
    return finish(results.front(), HeldKey{key, {}}, now, op, sent);
  }

  /// `apply` without blocking: `done(Decision)` is called exactly once, on the storage's I/O
  /// thread, or before this returns when Redis is not asked (see core/completion.hpp; from a
  /// completion, on the I/O thread's next turn). The key is copied. Throws
  /// `std::invalid_argument` for cost < 1 (and never calls `done`).
  void apply_async(std::string_view key, std::chrono::nanoseconds now, const Operation& op,
                   Completion<Decision> done) const {
    detail::check_cost(op.cost);
    const auto deadline = client_->deadline_from_now();
    if (detail::on_io_thread && (over_limit().on() || pre_limit().on())) {
      // From a completion: the cache or pre-limit would complete inline; a chain of such
      // decisions must not nest one stack frame per decision.
      client_->post([self = *this, k = std::string(key), now, op, done = std::move(done),
                     deadline] { self.apply_async_now(k, now, op, done, deadline, true); });
      return;
    }
    apply_async_now(key, now, op, std::move(done), deadline, true);
  }

  /// A refund, a penalty or a reservation: straight to Redis (neither the pre-limit nor the
  /// over-limit cache may answer it), then the cache forgets the key (a refund may have made room)
  /// and the pre-limit's share takes the same step, so that it never denies what Redis now admits.
  [[gnu::cold]] Decision adjust(std::string_view key, std::chrono::nanoseconds now,
                                const Operation& op) const {
    auto results =
        client_->execute_one([&] { return call(key, now, op); }, client_->deadline_from_now());
    const Decision d = finish(results.front(), HeldKey{key, {}}, now, op);
    over_limit().forget(key);
    // A reservation Redis refused changed nothing there: the share must not take it either.
    if (op.kind != Operation::Kind::reserve || d.allowed) pre_limit().follow(key, now, op);
    return d;
  }

  /// Deletes `key`'s state (DEL of all its Redis keys) and its local fallback state. A failure
  /// is reported (on_failure, counters) but not thrown.
  void reset(std::string_view key) const {
    fallback_.reset(key);
    over_limit().forget(key);
    detail::RedisCall del;
    del.argv.emplace_back("DEL");
    del.argv.push_back(redis_key_of(key, {}));
    del.keys.push_back(del.argv[1]);
    std::vector<detail::RedisCall> calls{std::move(del)};
    (void)client_->execute(std::move(calls), client_->deadline_from_now());
    // Again: a decision in flight during the DEL may have brought the old state back.
    over_limit().forget(key);
  }

  /// Forgets what the over-limit cache holds for `key` (for this binding's limiter): its next
  /// request asks Redis. For a reset or a limit raised through another instance.
  void clear_over_limit_cache(std::string_view key) const { over_limit().forget(key); }

  /// The part of an all-or-nothing decision (`RedisStorage::decide_all`). `tag`: the Redis hash
  /// tag (one Cluster slot per tag); empty or equal to `key` gives the same Redis keys as
  /// `apply(key, ...)`, so a limiter and a rule set can decide the same counter.
  RedisPart part(std::string_view key, const Operation& op, std::string_view tag = {}) const {
    return RedisPart{&ops_, this, key, tag, op};
  }

  /// The same keys decided with other parameters (validated as `bind` does). The per-instance
  /// limit (local_fallback, pre-limit) follows them, as the shared one divided by
  /// `fallback_divisor`, unless `bind` was given an explicit one: a priority's reduced limit
  /// (core/priority.hpp) then still holds while Redis is down.
  RedisBinding with_params(const typename M::Params& p) const {
    RedisBinding b = *this;
    b.bound_args_ = M::Wire::bound_args(p);
    b.params_ = p;
    b.fallback_ = fallback_.with_params(p, client_->options().fallback_divisor);
    return b;
  }

  /// The bound parameters.
  const typename M::Params& params() const noexcept { return params_; }

 private:
  friend class RedisStorage;
  friend class RedisBatch;

  RedisBinding(std::shared_ptr<detail::RedisClient> client, std::shared_ptr<detail::HotKeys> hot,
               InMemoryStorage fallback_storage, std::string_view name,
               const typename M::Params& params, const std::optional<typename M::Params>& local)
      : client_(std::move(client)),
        hot_(std::move(hot)),
        params_(params),
        bound_args_(M::Wire::bound_args(params)),
        tail_(detail::redis_key_tail(M::Wire::key_tag, name)),
        tail_hash_(hot_->cache.tail_hash(tail_)) {
    // A model whose script needs the client's time (the calendar quota: the client computes
    // the period, Redis has no time-zone data) cannot run on Redis's own clock.
    if constexpr (requires { M::Wire::needs_client_time; })
      if (M::Wire::needs_client_time && client_->options().time_source == TimeSource::redis)
        throw std::invalid_argument(
            "options.time_source = redis: algorithm " + std::string(M::name) +
            " needs the client's time (its periods are computed by the client, Redis has no "
            "time-zone data); use TimeSource::client with SystemClock");
    fallback_ =
        detail::LocalLimit<M>(client_->options(), std::move(fallback_storage), name, params, local);
  }

  /// The Redis key of `key` under hash tag `tag` (one per client key, every algorithm).
  std::string redis_key_of(std::string_view key, std::string_view tag) const {
    return detail::redis_key(client_->options().key_prefix, key, tail_, tag);
  }

  void args_of(std::chrono::nanoseconds now, const Operation& op,
               std::vector<std::string>& out) const {
    std::string now_us = client_->options().time_source == TimeSource::client
                             ? std::to_string(detail::wire_time_us(now))
                             : std::string{};
    M::Wire::args(bound_args_, params_, std::move(now_us), op, client_->margin_ms(), out);
  }

  detail::RedisCall call(std::string_view key, std::chrono::nanoseconds now,
                         const Operation& op) const {
    return call_on(redis_key_of(key, {}), now, op);
  }

  /// `call(key, now, op)` on `redis_key` when kept_in_flight built it (a long key's digest is
  /// computed once per decision, not once for the call and once to keep).
  detail::RedisCall call_kept(std::string_view key, std::string_view redis_key,
                              std::chrono::nanoseconds now, const Operation& op) const {
    return redis_key.empty() ? call(key, now, op) : call_on(std::string(redis_key), now, op);
  }

  detail::RedisCall call_on(std::string redis_key, std::chrono::nanoseconds now,
                            const Operation& op) const {
    detail::RedisCall c;
    c.script = &detail::script_of<M>();
    c.keys.push_back(std::move(redis_key));
    c.argv.reserve(16);  // every script takes fewer: one allocation, not one per doubling
    args_of(now, op, c.argv);
    return c;
  }

  /// The model's decision from the script's reply, or nullopt if the reply cannot be its.
  std::optional<Decision> decode(const redisReply& reply, const Operation& op) const {
    const auto ints = detail::reply_ints(reply);
    if (!ints) return std::nullopt;
    auto d = M::Wire::decode(params_, *ints, op);
    if (d) client_->count_decision();
    return d;
  }

  /// What a decision keeps of its client key until Redis answers: the key (`redis_key`
  /// empty), or for a key over max_plain_key_bytes without a local fallback only its Redis
  /// key (`key` empty), which is all the failure policy then needs. Such a key is neither
  /// cached (the over-limit cache holds no key that long) nor spent from the pre-limit (which
  /// then never denies it: Redis decides it, exactly).
  struct HeldKey {
    std::string_view key;
    std::string_view redis_key;
  };

  /// The decision from Redis's reply `r` (or the failure policy's). `held`: a client key, or
  /// (see `HeldKey`) only its Redis key when the key was too long to keep in flight.
  Decision finish(detail::RedisResult& r, const HeldKey& held, std::chrono::nanoseconds now,
                  const Operation& op, const detail::Sent& sent = {}) const {
    const std::string_view key = held.key;
    detail::ProbeGuard guard(sent.probe ? &hot_->cache : nullptr, over_limit().key(key));
    if (r.failure) return degrade(key, now, op, held.redis_key);
    const auto ints = detail::reply_ints(*r.reply);
    std::optional<Decision> d;
    if (ints) d = M::Wire::decode(params_, *ints, op);
    if (!d) {
      client_->report({RedisFailureKind::protocol,
                       "unexpected reply from the " + std::string(M::name) + " script"});
      return degrade(key, now, op, held.redis_key);
    }
    client_->count_decision();
    if (!held.redis_key.empty()) return *d;  // a long key: neither cached nor pre-limited
    if (op.kind == Operation::Kind::refund || op.kind == Operation::Kind::penalty ||
        op.kind == Operation::Kind::reserve) [[unlikely]]
      return *d;  // see `adjust`
    if (over_limit().on()) {
      guard.dismiss();
      over_limit().learn(key, *ints, op, *d, sent, now);
    }
    pre_limit().spend(key, now, op, *d);
    return *d;
  }

  /// `apply_async`'s work, once it may complete here, by the decision's `deadline`;
  /// `may_wait`: it may wait for its key's probe (once: see apply).
  void apply_async_now(std::string_view key, std::chrono::nanoseconds now, const Operation& op,
                       Completion<Decision> done, std::chrono::steady_clock::time_point deadline,
                       bool may_wait) const {
    Decision d{};
    if (pre_limit().denies(key, now, op, d)) return detail::complete_safely(done, std::move(d));
    detail::Sent sent;
    if (over_limit().on()) {
      const auto make_waiter = [&]() -> std::function<void()> {
        if (!may_wait) return {};
        // Looked up again when the key's probe is back, on the I/O thread's next turn
        // whatever thread settles the probe (a blocking caller, a reset): completions run on
        // the I/O thread, never inside another caller's call.
        return [self = *this, k = std::string(key), now, op, done = std::move(done), deadline] {
          self.client_->post([self, k, now, op, done, deadline] {
            self.apply_async_now(k, now, op, done, deadline, false);
          });
        };
      };
      const auto found = over_limit().lookup(key, now, op, d, make_waiter);
      if (found == detail::OverLimitCache::Found::hit)
        return detail::complete_safely(done, std::move(d));
      if (found == detail::OverLimitCache::Found::wait) return;
      sent.probe = found == detail::OverLimitCache::Found::probe;
      sent.at_ns = detail::OverLimit<M>::steady_ns();
    }
    detail::ProbeGuard guard(sent.probe ? &hot_->cache : nullptr, over_limit().key(key));
    // A long key is kept in flight only for the local fallback, which decides on it, and is
    // then counted against max_in_flight_bytes. Otherwise only its Redis key (a digest) is
    // kept: a client's megabyte key must not, by itself, pass the budget and be decided by
    // the failure policy while Redis is healthy (with fail_open: never limited).
    auto kept = kept_in_flight(key);
    const std::size_t held =
        kept.first.size() > detail::max_plain_key_bytes ? kept.first.size() : 0;
    // Its own copy of the Redis key (empty for a short key): `kept` moves into the completion
    // before the call is built.
    auto make_call = [&, rk = kept.second] { return call_kept(key, rk, now, op); };
    auto finish_here = [self = *this, kept = std::move(kept), now, op, sent,
                        done = std::move(done)](std::vector<detail::RedisResult>&& r) {
      Decision settled = self.finish(r.front(), HeldKey{kept.first, kept.second}, now, op, sent);
      detail::complete_safely(done, std::move(settled));
    };
    guard.dismiss();  // from here the completion settles the probe, exactly once
    client_->execute_one_async(make_call, deadline, std::move(finish_here), held);
  }

  /// What a decision in flight keeps of `key`, as {key, Redis key} (see HeldKey): the key, or
  /// for a key over max_plain_key_bytes only its Redis key (a digest), unless the local
  /// fallback needs the key itself.
  std::pair<std::string, std::string> kept_in_flight(std::string_view key) const {
    if (key.size() <= detail::max_plain_key_bytes ||
        client_->options().failure_policy == FailurePolicy::local_fallback)
      return {std::string(key), {}};
    return {{}, redis_key_of(key, {})};
  }

  /// The failure policy's decision (redis/failure_policy.hpp). `redis_key`: the key's Redis key
  /// when known (`key` is then empty: see HeldKey), for the back-off of the node that owns it.
  Decision degrade(std::string_view key, std::chrono::nanoseconds now, const Operation& op,
                   std::string_view redis_key = {}) const {
    return detail::decide_by_failure_policy(*client_, params_, fallback_, key, now, op, [&] {
      return redis_key.empty() ? redis_key_of(key, {}) : std::string(redis_key);
    });
  }

  /// The storage's hot-key levers as this binding uses them (views of its members, made per
  /// call): the over-limit cache and the pre-limit.
  detail::OverLimit<M> over_limit() const noexcept {
    return {*client_, hot_->cache, params_, tail_, tail_hash_};
  }
  detail::PreLimit<M> pre_limit() const noexcept {
    return {client_->options(), fallback_, hot_->pre_limited};
  }

  static const RedisBinding& self(const void* b) { return *static_cast<const RedisBinding*>(b); }
  static constexpr detail::RedisPartOps ops_{
      detail::ScriptPart{M::wire_id, M::name, M::Wire::lua},
      [](const void* b) { return self(b).client_.get(); },
      [](const void* b, std::string_view key, std::string_view tag) {
        return self(b).redis_key_of(key, tag);
      },
      [](const void* b, std::chrono::nanoseconds now, const Operation& op,
         std::vector<std::string>& out) { self(b).args_of(now, op, out); },
      [](const void* b, const redisReply& reply, const Operation& op) {
        return self(b).decode(reply, op);
      },
      [](const void* b, std::string_view key, std::chrono::nanoseconds now, const Operation& op) {
        return self(b).degrade(key, now, op);
      },
      [](const void* b, std::string_view key, const Operation& op)
          -> std::optional<InMemoryStorage::Part> { return self(b).fallback_.part(key, op); }};

  std::shared_ptr<detail::RedisClient> client_;
  std::shared_ptr<detail::HotKeys> hot_;
  typename M::Params params_;
  typename M::Wire::BoundArgs bound_args_;
  std::string tail_;
  std::uint64_t tail_hash_;         ///< the over-limit cache's hash of tail_
  detail::LocalLimit<M> fallback_;  ///< of local_fallback and the pre-limit, or empty
};

}  // namespace ratelimit
