#pragma once
/// @file redis/batch.hpp
/// Many decisions in one pipelined round trip, for callers that check several rules per
/// request (per user, per IP, per route...).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../algorithms/fixed_window.hpp"
#include "../algorithms/leaky_bucket.hpp"
#include "../algorithms/sliding_counter.hpp"
#include "../algorithms/sliding_log.hpp"
#include "../algorithms/token_bucket.hpp"
#include "../core/clock.hpp"
#include "../core/decision.hpp"
#include "../core/detail/validate.hpp"
#include "../core/storage.hpp"
#include "storage.hpp"

namespace ratelimit {

/// Collects decisions for any bindings or limiters of one RedisStorage (any algorithms, names
/// and keys), then `run()` sends them all in one pipelined round trip per Redis node and
/// returns the decisions in the order they were added. Each decision is its own atomic script
/// call: the batch is not a transaction (one can be admitted while another is denied; callers
/// that need all-or-nothing check with peeks first, or accept the partial spend).
/// Failures are per call, with the failure policy of its binding (`degraded = true`).
///
///     ratelimit::RedisBatch batch(storage);
///     batch.add(per_user, user_id);            // a TokenBucket<SystemClock, RedisStorage>
///     batch.add(per_ip, client_ip, 1);         // a FixedWindow<SystemClock, RedisStorage>
///     std::vector<ratelimit::Decision> d = batch.run();
///
/// Errors: `add` throws `std::invalid_argument` for cost < 1 and for a binding or limiter of
/// another storage. Thread safety: one batch is used by one thread; any number of batches may
/// run at once.
class RedisBatch {
 public:
  /// An empty batch on `storage`.
  explicit RedisBatch(const RedisStorage& storage) : client_(storage.client_) {}

  /// Adds a decision of `binding` for `key` at `now`. Returns its index in `run()`'s result.
  template <Model M>
  std::size_t add(const RedisBinding<M>& binding, std::string_view key,
                  std::chrono::nanoseconds now, const Operation& op = {}) {
    detail::check_cost(op.cost);
    if (binding.client_ != client_)
      throw std::invalid_argument("binding: belongs to another RedisStorage than the batch");
    calls_.push_back(binding.call(key, now, op));
    finishers_.push_back([b = binding, k = std::string(key), now,
                          op](detail::RedisResult& r) mutable { return b.finish(r, k, now, op); });
    return calls_.size() - 1;
  }

  /// Adds `limiter.try_acquire(key, cost)`, read on the limiter's clock.
  template <Clock C>
  std::size_t add(TokenBucket<C, RedisStorage>& limiter, std::string_view key,
                  std::int64_t cost = 1) {
    return add_limiter<TokenBucketModel>(limiter, TokenBucketModel::make_params(limiter.config()),
                                         key, cost);
  }
  /// Adds `limiter.try_acquire(key, cost)` (no wait bound), read on the limiter's clock.
  template <Clock C>
  std::size_t add(LeakyBucket<C, RedisStorage>& limiter, std::string_view key,
                  std::int64_t cost = 1) {
    return add_limiter<LeakyBucketModel>(limiter, LeakyBucketModel::make_params(limiter.config()),
                                         key, cost);
  }
  /// Adds `limiter.try_acquire(key, cost)`, read on the limiter's clock.
  template <Clock C>
  std::size_t add(FixedWindow<C, RedisStorage>& limiter, std::string_view key,
                  std::int64_t cost = 1) {
    return add_limiter<FixedWindowModel>(limiter, detail::make_window_params(limiter.rate()), key,
                                         cost);
  }
  /// Adds `limiter.try_acquire(key, cost)`, read on the limiter's clock.
  template <Clock C>
  std::size_t add(SlidingLog<C, RedisStorage>& limiter, std::string_view key,
                  std::int64_t cost = 1) {
    return add_limiter<SlidingLogModel>(limiter, detail::make_window_params(limiter.rate()), key,
                                        cost);
  }
  /// Adds `limiter.try_acquire(key, cost)`, read on the limiter's clock.
  template <Clock C>
  std::size_t add(SlidingCounter<C, RedisStorage>& limiter, std::string_view key,
                  std::int64_t cost = 1) {
    return add_limiter<SlidingCounterModel>(limiter, detail::make_window_params(limiter.rate()),
                                            key, cost);
  }

  /// Decisions added so far.
  std::size_t size() const noexcept { return calls_.size(); }

  /// Sends every call in one pipelined round trip (per node) and returns the decisions in the
  /// order added; the batch is then empty and may be reused. Never throws for Redis failures.
  std::vector<Decision> run() {
    auto results = client_->execute(calls_);
    std::vector<Decision> decisions;
    decisions.reserve(results.size());
    for (std::size_t i = 0; i < results.size(); ++i) decisions.push_back(finishers_[i](results[i]));
    calls_.clear();
    finishers_.clear();
    return decisions;
  }

 private:
  template <Model M, class L>
  std::size_t add_limiter(L& limiter, const typename M::Params& params, std::string_view key,
                          std::int64_t cost) {
    detail::check_cost(cost);
    if (limiter.storage().client_ != client_)
      throw std::invalid_argument("limiter: uses another RedisStorage than the batch");
    return add(limiter.storage().template bind<M>(limiter.name(), params), key,
               limiter.clock().now(), Operation{cost, false, Decision::never});
  }

  std::shared_ptr<detail::RedisClient> client_;
  std::vector<detail::RedisCall> calls_;
  std::vector<std::function<Decision(detail::RedisResult&)>> finishers_;
};

}  // namespace ratelimit
