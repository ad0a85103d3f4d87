#pragma once
/// @file algorithms/token_bucket.hpp
/// Token bucket: bursts up to the capacity, a long-run rate of the refill.

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/clock.hpp"
#include "../core/decision.hpp"
#include "../core/detail/validate.hpp"
#include "../core/limiter.hpp"
#include "../core/rate.hpp"
#include "../core/storage.hpp"
#include "../memory/in_memory_storage.hpp"
#include "detail/gcra.hpp"
#include "detail/gcra_wire.hpp"

namespace ratelimit {

/// A token bucket's shape. Ranges: capacity in [1, 10^9] tokens; refill.count in [1, 10^9]
/// tokens per refill.period in [1 ms, 366 days]; at most one token per ns; a whole refill
/// (capacity x period / count) within 100 years.
struct TokenBucketConfig {
  std::int64_t capacity;  ///< B: the most tokens the bucket holds (the largest burst)
  Rate refill;            ///< r: tokens added per period
};

/// The token bucket as a pure transition (see `ratelimit::Model`).
///
/// Tokens T start at B; at each decision T <- min(B, T + r * elapsed); a request of n tokens is
/// admitted iff T >= n, then T <- T - n. Computed exactly as GCRA (ITU-T I.371; the "virtual
/// scheduling" form), one timestamp per key. 16 bytes of state per key in process (see
/// detail::GcraState), 24 in Redis.
struct TokenBucketModel {
  static constexpr std::string_view name = "token_bucket";
  using Params = detail::GcraParams;
  using State = detail::GcraState;
  /// This algorithm's id inside a composed Redis script (see core/wire.hpp).
  static constexpr int wire_id = 1;
  /// Its Redis twin: lua/gcra.lua, shared with the leaky bucket.
  using Wire = detail::GcraWire<TokenBucketModel, false>;
  /// Takes `Operation::Kind::refund` and `penalty` (see detail::gcra_adjust).
  static constexpr bool adjustable = true;
  /// Takes `Operation::Kind::reserve` (see detail::gcra_reserve).
  static constexpr bool reservable = true;

  /// The parameters of a rules-file limit of `r`: capacity r.count, refilled at r.
  static Params from_rate(const Rate& r) { return make_params({r.count, r}); }
  /// Checks parameters given directly to a storage (`bind`, `with_params`); throws
  /// `std::invalid_argument` naming the field (see detail::check_gcra_params).
  static void check_params(const Params& p) { detail::check_gcra_params(p); }

  /// Validates `c` (throws `std::invalid_argument` naming the field) and reduces it.
  static Params make_params(const TokenBucketConfig& c) {
    detail::check_bucket("capacity", c.capacity, "refill", c.refill);
    return detail::make_gcra_params(c.capacity, c.refill.count, c.refill.period);
  }
  static Decision apply(const Params& p, State& s, std::chrono::nanoseconds now,
                        const Operation& op) noexcept {
    return detail::gcra_apply<false>(p, s, now, op);
  }
  static std::chrono::nanoseconds fresh_at(const Params& p, const State& s) noexcept {
    return detail::gcra_fresh_at(p, s);
  }
};

/// A token bucket limiter per key: admits bursts of up to `capacity` tokens and `refill` tokens
/// per period in the long run. Decision fields: limit = capacity; remaining = whole tokens left;
/// retry_after = (n - T) / r; reset_after = (B - T) / r.
///
/// Errors: the constructor throws `std::invalid_argument` naming the out-of-range field; the
/// calls throw it for cost < 1. Thread safety: every member is safe from many threads.
template <Clock C = SteadyClock, class Storage = InMemoryStorage>
class TokenBucket : public detail::Limiter<TokenBucketModel, C, Storage> {
 public:
  /// A bucket of `config`, keeping state in `storage`, reading time from `clock`. Limiters on one
  /// storage share keys only when algorithm and `name` both match.
  explicit TokenBucket(TokenBucketConfig config, Storage storage = {}, C clock = {},
                       std::string name = {})
      : detail::Limiter<TokenBucketModel, C, Storage>(TokenBucketModel::make_params(config),
                                                      std::move(storage), std::move(clock),
                                                      std::move(name)),
        config_(config) {}

  /// The configuration it was built with.
  const TokenBucketConfig& config() const noexcept { return config_; }

 private:
  TokenBucketConfig config_;
};

}  // namespace ratelimit
