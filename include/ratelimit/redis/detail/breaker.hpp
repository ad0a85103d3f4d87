#pragma once
/// @file redis/detail/breaker.hpp
/// A circuit breaker: while a node keeps failing, decisions degrade at once instead of each
/// waiting out a timeout.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace ratelimit::detail {

/// Closed: every call goes to the node. After a failure it opens for `backoff` (real time, on
/// the steady clock: this is about the node, not about the limiter's clock); then exactly one
/// call probes the node (the one that wins the compare-exchange, which also pushes the next
/// probe one back-off, or the probe's whole budget if longer, further: a probe that never
/// reports cannot wedge it open, and a slow one is not joined by a second). A success
/// closes it and resets the back-off.
/// The back-off doubles (up to `max_backoff`) only when a probe fails. Calls that were let
/// through while it was closed and fail afterwards (the requests in flight when the node
/// stalled) keep it open one back-off past their failure but do not grow it: a stall of s costs
/// about s plus one back-off, however many threads were waiting on the node.
/// Thread safety: lock-free, safe from many threads.
class CircuitBreaker {
 public:
  /// What `allow` let through: nothing, an ordinary call (the breaker was closed), or the probe.
  enum class Pass : std::uint8_t { refused, closed, probe };

  /// `probe_budget`: the longest a probe can take (its deadline plus the timer's slack). No other
  /// probe starts before it has reported, even when the back-off is shorter: two probes of a
  /// stalled node would both fail and double the back-off twice.
  CircuitBreaker(std::chrono::milliseconds backoff, std::chrono::milliseconds max_backoff,
                 std::chrono::nanoseconds probe_budget = std::chrono::nanoseconds{0})
      : initial_(std::chrono::nanoseconds(backoff).count()),
        max_(std::chrono::nanoseconds(max_backoff).count()),
        probe_budget_(probe_budget.count()),
        backoff_(initial_) {}

  /// Whether to try the node now (`now_ns`: steady clock, ns), and as what.
  Pass allow(std::int64_t now_ns = steady_ns()) noexcept {
    std::int64_t until = open_until_.load(std::memory_order_acquire);
    if (until == 0) return Pass::closed;
    if (now_ns < until) return Pass::refused;
    const std::int64_t hold = std::max(backoff_.load(std::memory_order_relaxed), probe_budget_);
    return open_until_.compare_exchange_strong(until, now_ns + hold, std::memory_order_acq_rel)
               ? Pass::probe
               : Pass::refused;
  }

  /// A call succeeded. Returns true if this closed the breaker (for monitoring: exactly one
  /// caller sees each closing).
  bool record_success() noexcept {
    if (open_until_.load(std::memory_order_relaxed) == 0) return false;
    backoff_.store(initial_, std::memory_order_relaxed);
    return open_until_.exchange(0, std::memory_order_acq_rel) != 0;
  }

  /// A call let through as `pass` failed at `now_ns`. Returns true if this opened the breaker
  /// (it was closed; exactly one caller sees each opening).
  bool record_failure(Pass pass, std::int64_t now_ns = steady_ns()) noexcept {
    if (pass == Pass::probe) {
      const std::int64_t b = std::min(backoff_.load(std::memory_order_relaxed) * 2, max_);
      backoff_.store(b, std::memory_order_relaxed);
      // A probe runs while the breaker is open; a success elsewhere may have closed it since.
      return open_until_.exchange(now_ns + b, std::memory_order_acq_rel) == 0;
    }
    // Open (or keep open) until one back-off after this failure, never shortening it.
    const std::int64_t until = now_ns + backoff_.load(std::memory_order_relaxed);
    std::int64_t seen = open_until_.load(std::memory_order_acquire);
    while (seen < until) {
      if (open_until_.compare_exchange_weak(seen, until, std::memory_order_acq_rel))
        return seen == 0;
    }
    return false;
  }

  bool is_open() const noexcept { return open_until_.load(std::memory_order_acquire) != 0; }

  /// Time until the next probe at `now_ns` (0 when closed or due).
  std::chrono::nanoseconds retry_in(std::int64_t now_ns = steady_ns()) const noexcept {
    const std::int64_t until = open_until_.load(std::memory_order_acquire);
    if (until == 0) return std::chrono::nanoseconds{0};
    return std::chrono::nanoseconds{std::max<std::int64_t>(0, until - now_ns)};
  }

  /// The current back-off (what the next opening lasts).
  std::chrono::nanoseconds backoff() const noexcept {
    return std::chrono::nanoseconds{backoff_.load(std::memory_order_relaxed)};
  }

  /// The steady clock's reading, ns.
  static std::int64_t steady_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

 private:
  std::int64_t initial_;
  std::int64_t max_;
  std::int64_t probe_budget_;
  std::atomic<std::int64_t> backoff_;
  std::atomic<std::int64_t> open_until_{0};  ///< steady ns; 0 = closed
};

}  // namespace ratelimit::detail
