#pragma once
/// @file redis/regional/decide.hpp
/// What the regional window and bucket bindings do alike: send one script call to this region's
/// Redis, blocking or not, decide by the failure policy when Redis cannot, and make the part of a
/// one-key `decide_all`. Each binding only builds its call and reads its reply.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../core/completion.hpp"
#include "../../core/decision.hpp"
#include "../../core/detail/validate.hpp"
#include "../../core/storage.hpp"
#include "../detail/call.hpp"
#include "../detail/keys.hpp"
#include "../options.hpp"
#include "part.hpp"

namespace ratelimit::detail {

/// The decisions of a regional binding `B` (CRTP). `B` provides `call(key, now, op)` (its
/// script call), `finish(result, key, now, op)` (the decision from the reply, `degrade` when
/// there is none) and the members `state_` (its `RegionalState`), `params_` (with `limit`) and
/// `fallback_` (the in-process binding of local_fallback, or empty).
template <class B>
class RegionalDecisions {
 public:
  /// Decides `key` at `now` (whole us) against this region's Redis: one round trip.
  Decision apply(std::string_view key, std::chrono::nanoseconds now, const Operation& op) const {
    check_cost(op.cost);
    auto& local = self().state_->local();
    std::vector<RedisCall> calls;
    calls.push_back(self().call(key, now, op));
    auto results = local.execute(std::move(calls), local.deadline_from_now());
    return self().finish(results.front(), key, now, op);
  }

  /// `apply` without blocking: `done(Decision)` is called exactly once, with the decision
  /// `apply` would give, on this region's Redis client's I/O thread, or before this returns
  /// when Redis is not asked (circuit open, backpressure; see core/completion.hpp). The key is
  /// copied and the storage's shared state held until `done` runs: the binding, its limiter
  /// and its storage may go first. Throws std::invalid_argument for cost < 1 (and never calls
  /// `done`). Thread safety: safe from many threads.
  void apply_async(std::string_view key, std::chrono::nanoseconds now, const Operation& op,
                   Completion<Decision> done) const {
    check_cost(op.cost);
    auto& local = self().state_->local();
    const auto deadline = local.deadline_from_now();
    // Only the local fallback decides on the key after the reply (the call is built before
    // this returns); a long key it keeps counts against max_in_flight_bytes.
    std::string kept = self().fallback_ ? std::string(key) : std::string();
    const std::size_t held = kept.size() > max_plain_key_bytes ? kept.size() : 0;
    auto finish_here = [binding = self(), kept = std::move(kept), now, op,
                        done = std::move(done)](std::vector<RedisResult>&& r) {
      Decision d = binding.finish(r.front(), kept, now, op);
      complete_safely(done, std::move(d));
    };
    local.execute_one_async([&] { return self().call(key, now, op); }, deadline,
                            std::move(finish_here), held);
  }

  /// Refused: units already pushed to other regions cannot be taken back from here. Throws
  /// std::logic_error (bind under another name instead).
  void reset(std::string_view) const {
    throw std::logic_error(
        "RegionalStorage: reset is not supported (this region's admissions were pushed to the "
        "other regions' Redis and cannot be taken back from here)");
  }

  /// The part of a one-key `decide_all`.
  RegionalPart part(std::string_view key, const Operation& op, std::string_view = {}) const {
    return RegionalPart{key, op, &apply_part, &self(), &apply_part_async};
  }

 protected:
  /// This region's Redis could not decide: its failure policy.
  Decision degrade(std::string_view key, std::chrono::nanoseconds now, const Operation& op) const {
    const B& b = self();
    b.state_->degraded.fetch_add(1, std::memory_order_relaxed);
    Decision d{};
    if (b.fallback_) {
      d = b.fallback_->apply(key, now, op);
      d.degraded = true;
      return d;
    }
    d.limit = b.params_.limit;
    d.degraded = true;
    if (op.cost > b.params_.limit) {
      d.retry_after = Decision::never;
    } else if (b.state_->options().local.failure_policy == FailurePolicy::fail_open) {
      d.allowed = true;
      d.remaining = b.params_.limit;
    } else {
      d.retry_after = std::chrono::milliseconds{1};
    }
    return d;
  }

 private:
  const B& self() const noexcept { return static_cast<const B&>(*this); }

  static Decision apply_part(const void* b, std::string_view key, std::chrono::nanoseconds now,
                             const Operation& op) {
    return static_cast<const B*>(b)->apply(key, now, op);
  }
  static void apply_part_async(const void* b, std::string_view key, std::chrono::nanoseconds now,
                               const Operation& op, Completion<Decision> done) {
    static_cast<const B*>(b)->apply_async(key, now, op, std::move(done));
  }
};

}  // namespace ratelimit::detail
