#pragma once
/// @file algorithms/leaky_bucket.hpp
/// Leaky bucket as a shaping queue: admitted work leaves at a steady rate.

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

/// A leaky bucket's shape. Ranges: queue_size in [1, 10^9] units; leak.count in [1, 10^9] per
/// leak.period in [1 ms, 366 days]; at most one unit per ns; draining a full queue within
/// 100 years.
struct LeakyBucketConfig {
  std::int64_t queue_size;  ///< Q: the most work (units) queued and not yet leaked
  Rate leak;                ///< r: units that leave per period
};

/// The leaky bucket as a meter-and-queue (the fluid model; Turner 1986, and GCRA, ITU-T I.371).
///
/// The level L (work admitted and not yet leaked) starts at 0 and drains at r. A request of n is
/// admitted iff L + n <= Q; it waits `delay` = L / r behind the queued work, then L <- L + n.
/// 16 bytes of state per key in process (see detail::GcraState), 24 in Redis.
struct LeakyBucketModel {
  static constexpr std::string_view name = "leaky_bucket";
  using Params = detail::GcraParams;
  using State = detail::GcraState;
  /// This algorithm's id inside a composed Redis script (see core/wire.hpp).
  static constexpr int wire_id = 2;
  /// Its Redis twin: lua/gcra.lua, shared with the token bucket.
  using Wire = detail::GcraWire<LeakyBucketModel, true>;
  /// Takes `Operation::Kind::refund` and `penalty` (see detail::gcra_adjust).
  static constexpr bool adjustable = true;
  /// Takes `Operation::Kind::reserve` (see detail::gcra_reserve).
  static constexpr bool reservable = true;

  /// The parameters of a rules-file limit of `r`: queue size r.count, drained at r.
  static Params from_rate(const Rate& r) { return make_params({r.count, r}); }
  /// Checks parameters given directly to a storage (`bind`, `with_params`); throws
  /// `std::invalid_argument` naming the field (see detail::check_gcra_params).
  static void check_params(const Params& p) { detail::check_gcra_params(p); }

  /// Validates `c` (throws `std::invalid_argument` naming the field) and reduces it.
  static Params make_params(const LeakyBucketConfig& c) {
    detail::check_bucket("queue_size", c.queue_size, "leak", c.leak);
    return detail::make_gcra_params(c.queue_size, c.leak.count, c.leak.period);
  }
  static Decision apply(const Params& p, State& s, std::chrono::nanoseconds now,
                        const Operation& op) noexcept {
    return detail::gcra_apply<true>(p, s, now, op);
  }
  static std::chrono::nanoseconds fresh_at(const Params& p, const State& s) noexcept {
    return detail::gcra_fresh_at(p, s);
  }
  /// A blocked caller is served once the whole current backlog has leaked: retry_after plus the
  /// delay then is always L / r, which is `reset_after`.
  static constexpr bool completes_within(const Decision& d,
                                         std::chrono::nanoseconds budget) noexcept {
    return d.reset_after <= budget;
  }
};

/// A leaky bucket limiter per key: admits up to `queue_size` units of queued work and tells each
/// admitted request how long to wait (`delay`) so that work leaves at the `leak` rate.
/// Decision fields: limit = Q; remaining = floor(Q - L); retry_after = (L + n - Q) / r;
/// reset_after = L / r; delay = L / r before the request joined the queue.
///
/// Errors: the constructor throws `std::invalid_argument` naming the out-of-range field; the
/// calls throw it for cost < 1. Thread safety: every member is safe from many threads.
template <Clock C = SteadyClock, class Storage = InMemoryStorage>
class LeakyBucket : public detail::Limiter<LeakyBucketModel, C, Storage> {
 public:
  /// A queue of `config`, keeping state in `storage`, reading time from `clock`.
  explicit LeakyBucket(LeakyBucketConfig config, Storage storage = {}, C clock = {},
                       std::string name = {})
      : detail::Limiter<LeakyBucketModel, C, Storage>(LeakyBucketModel::make_params(config),
                                                      std::move(storage), std::move(clock),
                                                      std::move(name)),
        config_(config) {}

  /// The configuration it was built with.
  const LeakyBucketConfig& config() const noexcept { return config_; }

 private:
  LeakyBucketConfig config_;
};

}  // namespace ratelimit
