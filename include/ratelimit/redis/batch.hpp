#pragma once
/// @file redis/batch.hpp
/// Many decisions in one pipelined round trip, for callers that check several rules per
/// request (per user, per IP, per route...).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/clock.hpp"
#include "../core/completion.hpp"
#include "../core/decision.hpp"
#include "../core/detail/validate.hpp"
#include "../core/storage.hpp"
#include "../core/wire.hpp"
#include "storage.hpp"

namespace ratelimit {

/// Satisfied by `RedisBinding<M>` for any model (what `RedisBatch::add` takes from a limiter).
template <class B>
concept RedisBindingRef = requires {
  typename std::remove_cvref_t<B>::Model;
}
&&std::same_as<std::remove_cvref_t<B>, RedisBinding<typename std::remove_cvref_t<B>::Model>>;

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
  template <WireModel M>
  std::size_t add(const RedisBinding<M>& binding, std::string_view key,
                  std::chrono::nanoseconds now, const Operation& op = {}) {
    detail::check_cost(op.cost);
    if (binding.client_ != client_)
      throw std::invalid_argument("binding: belongs to another RedisStorage than the batch");
    auto kept = binding.kept_in_flight(key);  // a long key: only its Redis key (a digest)
    calls_.push_back(binding.call_kept(key, kept.second, now, op));
    finishers_.push_back(
        [b = binding, kept = std::move(kept), now, op](detail::RedisResult& r) mutable {
          return b.finish(r, typename RedisBinding<M>::HeldKey{kept.first, kept.second}, now, op);
        });
    return calls_.size() - 1;
  }

  /// Adds `limiter.try_acquire(key, cost)` (for a leaky bucket, no wait bound), read on the
  /// limiter's clock: any limiter (TokenBucket, ..., or a registry extension's) on a
  /// RedisStorage.
  template <class L>
  requires requires(L& l) {
    { l.binding() } -> RedisBindingRef;
    l.clock().now();
  }
  std::size_t add(L& limiter, std::string_view key, std::int64_t cost = 1) {
    detail::check_cost(cost);
    if (limiter.binding().client_ != client_)
      throw std::invalid_argument("limiter: uses another RedisStorage than the batch");
    return add(limiter.binding(), key, limiter.clock().now(),
               Operation{cost, false, Decision::never});
  }

  /// Decisions added so far.
  std::size_t size() const noexcept { return calls_.size(); }

  /// Sends every call in one pipelined round trip (per node) and returns the decisions in the
  /// order added; the batch is then empty and may be reused. Never throws for Redis failures.
  std::vector<Decision> run() {
    auto results = client_->execute(std::move(calls_), client_->deadline_from_now());
    auto finishers = std::move(finishers_);
    calls_.clear();
    finishers_.clear();
    return finish(finishers, results);
  }

  /// `run` without blocking: sends the batch and returns at once; `done(std::vector<Decision>)`
  /// gets the decisions in the order added, exactly once, on the storage's I/O thread (or here,
  /// before this returns, when Redis is not tried: see core/completion.hpp). The batch is empty
  /// again when this returns. One deadline (command_timeout) covers the whole batch.
  template <class F>
  requires std::invocable<F&, std::vector<Decision>>
  void run_async(F&& done) {
    auto finishers = std::make_shared<std::vector<Finisher>>(std::move(finishers_));
    auto calls = std::move(calls_);
    calls_.clear();
    finishers_.clear();
    client_->execute_async(
        std::move(calls), client_->deadline_from_now(),
        [finishers, done = detail::make_completion<std::vector<Decision>>(std::forward<F>(done))](
            std::vector<detail::RedisResult>&& results) {
          detail::complete_safely(done, finish(*finishers, results));
        });
  }

 private:
  using Finisher = std::function<Decision(detail::RedisResult&)>;

  static std::vector<Decision> finish(std::vector<Finisher>& finishers,
                                      std::vector<detail::RedisResult>& results) {
    std::vector<Decision> decisions;
    decisions.reserve(results.size());
    for (std::size_t i = 0; i < results.size(); ++i) decisions.push_back(finishers[i](results[i]));
    return decisions;
  }

  std::shared_ptr<detail::RedisClient> client_;
  std::vector<detail::RedisCall> calls_;
  std::vector<Finisher> finishers_;
};

}  // namespace ratelimit
