#pragma once
/// @file redis/storage.hpp
/// The Redis storage: per-key state shared by every instance of a service, one atomic Lua
/// script per decision. Needs hiredis (CMake target `ratelimit::redis`).
///
/// Time resolution: decisions are made at the clock's reading rounded down to a whole
/// microsecond (the scripts' time unit, exact below 2^53 in Lua), and every duration in a
/// Decision is exact to the nanosecond from there. With whole-microsecond times (ManualClock
/// in whole ms, say) the decisions equal `InMemoryStorage`'s in every field. Range: the core
/// range of every algorithm, unchanged (the scripts compute in exact big integers); clock
/// readings are clamped to [0, 2^62] ns.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/decision.hpp"
#include "../core/detail/validate.hpp"
#include "../core/storage.hpp"
#include "../memory/in_memory_storage.hpp"
#include "detail/client.hpp"
#include "detail/codecs.hpp"
#include "detail/keys.hpp"
#include "options.hpp"

namespace ratelimit {

class RedisBatch;
namespace detail {
struct RedisRuleAccess;  // rules_redis.hpp: decides a rule set's bindings in one script
}  // namespace detail

/// One limiter's policy bound to a RedisStorage (see `ratelimit::Binding`): decides a key with
/// one EVALSHA of its algorithm's script, and applies the failure policy when Redis cannot.
/// Copies share the storage. Errors: `apply` throws `std::invalid_argument` for cost < 1 (a
/// negative cost would mint shared capacity); Redis failures never throw.
/// Thread safety: every member is safe from many threads.
template <Model M>
class RedisBinding {
 public:
  /// Decides `key` at `now` (rounded down to a whole us; with TimeSource::redis, Redis's clock).
  Decision apply(std::string_view key, std::chrono::nanoseconds now, const Operation& op) {
    detail::check_cost(op.cost);
    std::vector<detail::RedisCall> calls;
    calls.push_back(call(key, now, op));
    auto results = client_->execute(calls);
    return finish(results.front(), key, now, op);
  }

  /// Deletes `key`'s state (DEL of all its Redis keys) and its local fallback state. A failure
  /// is reported (on_failure, counters) but not thrown.
  void reset(std::string_view key) {
    if (fallback_) fallback_->reset(key);
    detail::RedisCall del;
    del.argv.emplace_back("DEL");
    for (const auto suffix : Redis::key_suffixes)
      del.argv.push_back(detail::redis_key(client_->options().key_prefix, key, tail_, suffix));
    del.keys.push_back(del.argv[1]);
    std::vector<detail::RedisCall> calls{std::move(del)};
    (void)client_->execute(calls);
  }

  /// The bound parameters.
  const typename M::Params& params() const noexcept { return params_; }

 private:
  friend class RedisStorage;
  friend class RedisBatch;
  friend struct detail::RedisRuleAccess;
  using Redis = detail::RedisModel<M>;

  RedisBinding(std::shared_ptr<detail::RedisClient> client, InMemoryStorage fallback_storage,
               std::string_view name, const typename M::Params& params,
               const std::optional<typename M::Params>& local)
      : client_(std::move(client)),
        params_(params),
        fixed_(Redis::fix(params)),
        tail_(detail::redis_key_tail(M::name, name)) {
    if (client_->options().failure_policy == FailurePolicy::local_fallback)
      fallback_.emplace(fallback_storage.template bind<M>(
          name, local ? *local : Redis::fallback(params, client_->options().fallback_divisor)));
  }

  detail::RedisCall call(std::string_view key, std::chrono::nanoseconds now,
                         const Operation& op) const {
    detail::RedisCall c;
    c.script = Redis::script;
    for (const auto suffix : Redis::key_suffixes)
      c.keys.push_back(detail::redis_key(client_->options().key_prefix, key, tail_, suffix));
    std::string now_us = client_->options().time_source == TimeSource::client
                             ? std::to_string(detail::redis_time_us(now))
                             : std::string{};
    Redis::args(fixed_, params_, std::move(now_us), op, client_->margin_ms(), c.argv);
    return c;
  }

  Decision finish(detail::RedisResult& r, std::string_view key, std::chrono::nanoseconds now,
                  const Operation& op) {
    if (r.failure) return degrade(*r.failure, key, now, op);
    if (auto d = Redis::decide(params_, *r.reply, op)) {
      client_->count_decision();
      return *d;
    }
    const RedisFailure f{RedisFailureKind::protocol, std::string("unexpected reply from the ") +
                                                         std::string(M::name) + " script"};
    client_->report(f);
    return degrade(f, key, now, op);
  }

  Decision degrade(const RedisFailure&, std::string_view key, std::chrono::nanoseconds now,
                   const Operation& op) {
    client_->count_degraded();
    const std::int64_t limit = params_.limit;
    Decision d{};
    d.limit = limit;
    d.degraded = true;
    if (fallback_) {
      d = fallback_->apply(key, now, op);
      d.degraded = true;
      return d;
    }
    const std::int64_t n = op.cost;
    if (n > limit) {  // can never succeed, whatever the shared state
      d.retry_after = Decision::never;
      return d;
    }
    if (client_->options().failure_policy == FailurePolicy::fail_open) {
      d.allowed = true;
      d.remaining = limit;
      return d;
    }
    const auto wait = client_->retry_in(
        detail::redis_key(client_->options().key_prefix, key, tail_, Redis::key_suffixes[0]));
    d.retry_after = wait < std::chrono::milliseconds{1} ? std::chrono::milliseconds{1} : wait;
    return d;
  }

  std::shared_ptr<detail::RedisClient> client_;
  typename M::Params params_;
  typename Redis::Fixed fixed_;
  std::string tail_;
  std::optional<typename InMemoryStorage::BindingOf<M>> fallback_;
};

/// Keeps every key's state in Redis, shared by every process that uses the same Redis and
/// key_prefix: one Lua script per decision (EVALSHA; reloaded by itself after NOSCRIPT), run
/// atomically by Redis, so instances never spend the same capacity twice.
///
/// Keys: `<key_prefix>{k<hex(key)>}:<algorithm>:<hex(name)>[:log|:meta]`, one hash tag per
/// client key (Redis Cluster-safe), unambiguous for any bytes; every write sets a TTL of the
/// time the state still matters plus `ttl_margin`.
/// Time: see the file comment (whole microseconds; exact Decisions; the core range).
/// Failures (down, slower than command_timeout, error replies): `failure_policy` decides,
/// with `degraded = true`; a circuit breaker skips Redis for a short back-off after a failure,
/// and decisions return to Redis by themselves once it answers again.
///
/// A handle: copies share one connection pool, breaker and counters. Construction does not
/// connect (connections open on first use), so it succeeds while Redis is down.
/// Errors: the constructor throws `std::invalid_argument` naming a bad option; `bind` throws it
/// for parameters outside the range above.
/// Thread safety: every member is safe from many threads.
class RedisStorage {
 public:
  /// A storage on 127.0.0.1:6379 with the default options (so `Storage = {}` works).
  RedisStorage() : RedisStorage(RedisOptions{}) {}

  /// A storage on `options.host:options.port`.
  explicit RedisStorage(RedisOptions options)
      : client_(std::make_shared<detail::RedisClient>(std::move(options))) {}

  /// The binding type for model `M`.
  template <Model M>
  using Binding = RedisBinding<M>;

  /// Binds model `M` under limiter name `name` (bindings with equal M and name share keys).
  /// Throws `std::invalid_argument` naming the field for params outside the range.
  template <Model M>
  requires detail::RedisScripted<M> RedisBinding<M> bind(std::string_view name,
                                                         const typename M::Params& params) {
    return RedisBinding<M>(client_, fallback_, name, params, std::nullopt);
  }

  /// As above, with an explicit per-instance limit for `FailurePolicy::local_fallback` instead
  /// of the shared one divided by `fallback_divisor` (e.g. `TokenBucketModel::make_params(...)`).
  template <Model M>
  requires detail::RedisScripted<M> RedisBinding<M> bind(std::string_view name,
                                                         const typename M::Params& params,
                                                         const typename M::Params& local_fallback) {
    return RedisBinding<M>(client_, fallback_, name, params, local_fallback);
  }

  /// Counters since construction (shared by every copy).
  RedisStats stats() const noexcept { return client_->stats(); }

  /// The options it was built with.
  const RedisOptions& options() const noexcept { return client_->options(); }

 protected:
  /// The cluster hook: RedisClusterStorage is a RedisStorage whose client routes by slot.
  explicit RedisStorage(std::shared_ptr<detail::RedisClient> client) : client_(std::move(client)) {}

 private:
  friend class RedisBatch;
  std::shared_ptr<detail::RedisClient> client_;
  InMemoryStorage fallback_;  ///< local_fallback's per-instance state (a handle: shared too)
};

static_assert(StorageFor<RedisStorage, TokenBucketModel> &&
                  StorageFor<RedisStorage, LeakyBucketModel> &&
                  StorageFor<RedisStorage, FixedWindowModel> &&
                  StorageFor<RedisStorage, SlidingLogModel> &&
                  StorageFor<RedisStorage, SlidingCounterModel>,
              "RedisStorage must hold every algorithm");

}  // namespace ratelimit
