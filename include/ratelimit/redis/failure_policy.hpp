#pragma once
/// @file redis/failure_policy.hpp
/// What a Redis binding decides when Redis cannot answer (RedisOptions::failure_policy:
/// fail_open, fail_closed or local_fallback), and the per-instance limit that local_fallback
/// decides with (and the pre-limit, redis/pre_limit.hpp, dry-runs before Redis). Used by
/// RedisBinding (redis/binding.hpp). Include <ratelimit/redis.hpp>.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include "../core/decision.hpp"
#include "../core/storage.hpp"
#include "../core/wire.hpp"
#include "../memory/in_memory_storage.hpp"
#include "detail/client_core.hpp"
#include "options.hpp"

namespace ratelimit::detail {

/// One binding's per-instance limit: the shared limit divided by
/// `RedisOptions::fallback_divisor` (`M::Wire::fallback`), or the one `bind` was given, on the
/// storage's in-process fallback storage. Held only when the failure policy is local_fallback
/// or the pre-limit is on; else empty (`explicit operator bool` is false) and never asked.
/// Thread safety: every member is safe from many threads; copies share the in-process state.
template <WireModel M>
class LocalLimit {
 public:
  /// Empty: not held.
  LocalLimit() = default;

  /// `local`: the per-instance limit `bind` was given, or nullopt to derive it from `params`.
  LocalLimit(const RedisOptions& o, InMemoryStorage storage, std::string_view name,
             const typename M::Params& params, const std::optional<typename M::Params>& local)
      : derived_(!local.has_value()) {
    if (o.failure_policy == FailurePolicy::local_fallback || o.pre_limit)
      binding_.emplace(storage.template bind<M>(
          name, local ? *local : M::Wire::fallback(params, o.fallback_divisor)));
  }

  /// The limit for a binding now deciding with `p`: it follows them (`p / divisor`) unless
  /// `bind` was given an explicit one, which then still holds (a priority's reduced limit,
  /// core/priority.hpp, holds while Redis is down).
  LocalLimit with_params(const typename M::Params& p, std::int64_t divisor) const {
    LocalLimit l = *this;
    if (l.binding_ && derived_)
      l.binding_.emplace(binding_->with_params(M::Wire::fallback(p, divisor)));
    return l;
  }

  /// True if held (local_fallback or the pre-limit is on).
  explicit operator bool() const noexcept { return binding_.has_value(); }

  /// Decides `key` in process. Only when held.
  Decision apply(std::string_view key, std::chrono::nanoseconds now, const Operation& op) const {
    return binding_->apply(key, now, op);
  }

  /// Forgets `key`'s in-process state, if held.
  void reset(std::string_view key) const {
    if (binding_) binding_->reset(key);
  }

  /// The in-process part of an all-or-nothing decision, or nullopt when not held.
  std::optional<InMemoryStorage::Part> part(std::string_view key, const Operation& op) const {
    if (!binding_) return std::nullopt;
    return binding_->part(key, op);
  }

 private:
  std::optional<typename InMemoryStorage::BindingOf<M>> binding_;
  bool derived_ = true;  ///< binding_'s limit is the shared one / fallback_divisor, not bind's own
};

/// The failure policy's decision for `key` when Redis did not answer, with the shared limit's
/// `params`: local_fallback decides on `local`; fail_open admits; fail_closed denies with
/// retry_after = the time until the key's node is tried again (at least 1 ms). A cost over the
/// limit is never admitted (it can never succeed, whatever the shared state). Every decision is
/// `degraded` and counted. `redis_key()`: the key's Redis key, asked only by fail_closed (for
/// the back-off of the node that owns it).
template <WireModel M, class MakeRedisKey>
Decision decide_by_failure_policy(RedisClient& client, const typename M::Params& params,
                                  const LocalLimit<M>& local, std::string_view key,
                                  std::chrono::nanoseconds now, const Operation& op,
                                  MakeRedisKey&& redis_key) {
  client.count_degraded();
  Decision d{};
  if (client.options().failure_policy == FailurePolicy::local_fallback) {
    d = local.apply(key, now, op);
    d.degraded = true;
    return d;
  }
  const std::int64_t limit = params.limit;
  d.limit = limit;
  d.degraded = true;
  if (op.cost > limit) {  // can never succeed, whatever the shared state
    d.retry_after = Decision::never;
    return d;
  }
  if (client.options().failure_policy == FailurePolicy::fail_open) {
    d.allowed = true;
    d.remaining = limit;
    return d;
  }
  const auto wait = client.retry_in(std::forward<MakeRedisKey>(redis_key));
  d.retry_after = wait < std::chrono::milliseconds{1} ? std::chrono::milliseconds{1} : wait;
  return d;
}

}  // namespace ratelimit::detail
