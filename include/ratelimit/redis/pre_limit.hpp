#pragma once
/// @file redis/pre_limit.hpp
/// The pre-limit as one Redis binding uses it (RedisOptions::pre_limit; docs/redis.md "Hot
/// keys"): every decision is first dry-run on the binding's per-instance limit, which denies
/// without asking Redis, and then spends what Redis admitted. Used by RedisBinding
/// (redis/binding.hpp). Include <ratelimit/redis.hpp>.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>

#include "../core/decision.hpp"
#include "../core/storage.hpp"
#include "../core/wire.hpp"
#include "failure_policy.hpp"
#include "options.hpp"

namespace ratelimit::detail {

/// One binding's view of the pre-limit, made per call from the binding's members (it refers to
/// them, so it never outlives the call). Thread safety: every member is safe from many threads.
template <WireModel M>
class PreLimit {
 public:
  /// `local`: the binding's per-instance limit (held when the pre-limit is on); `denied`: the
  /// storage's count of pre-limit denials (`RedisStats::pre_limited`).
  PreLimit(const RedisOptions& options, const LocalLimit<M>& local,
           std::atomic<std::uint64_t>& denied) noexcept
      : options_(options), local_(local), denied_(denied) {}

  /// True if the pre-limit is on.
  bool on() const noexcept { return options_.pre_limit; }

  /// True, with the pre-limit's denial in `d`, if the per-instance limit denies `op` now.
  bool denies(std::string_view key, std::chrono::nanoseconds now, const Operation& op,
              Decision& d) const {
    if (!on()) return false;
    Operation dry = op;
    dry.peek = true;
    d = local_.apply(key, now, dry);
    if (d.allowed) return false;
    denied_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  /// Spends what Redis admitted (`redis`: its decision of `op`; a denial or a dry run spends
  /// nothing). Requests in flight together may find it spent already: Redis has admitted them,
  /// so they stand.
  void spend(std::string_view key, std::chrono::nanoseconds now, const Operation& op,
             const Decision& redis) const {
    if (on() && redis.allowed && !op.peek) (void)local_.apply(key, now, op);
  }

  /// A refund or a penalty that Redis took: the per-instance limit takes the same step, so that
  /// it never denies what Redis now admits.
  void follow(std::string_view key, std::chrono::nanoseconds now, const Operation& op) const {
    if (on()) (void)local_.apply(key, now, op);
  }

 private:
  const RedisOptions& options_;
  const LocalLimit<M>& local_;
  std::atomic<std::uint64_t>& denied_;
};

}  // namespace ratelimit::detail
