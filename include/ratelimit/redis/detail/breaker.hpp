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
/// probe one back-off further, so a probe that never reports cannot wedge it open). A success
/// closes it; each failure while open doubles the back-off up to `max_backoff`.
/// Thread safety: lock-free, safe from many threads.
class CircuitBreaker {
 public:
  CircuitBreaker(std::chrono::milliseconds backoff, std::chrono::milliseconds max_backoff)
      : initial_(std::chrono::nanoseconds(backoff).count()),
        max_(std::chrono::nanoseconds(max_backoff).count()),
        backoff_(initial_) {}

  /// True: try the node. False: degrade without trying.
  bool allow() noexcept {
    std::int64_t until = open_until_.load(std::memory_order_acquire);
    if (until == 0) return true;
    const std::int64_t now = steady_ns();
    if (now < until) return false;
    return open_until_.compare_exchange_strong(
        until, now + backoff_.load(std::memory_order_relaxed), std::memory_order_acq_rel);
  }

  void record_success() noexcept {
    if (open_until_.load(std::memory_order_relaxed) == 0) return;
    backoff_.store(initial_, std::memory_order_relaxed);
    open_until_.store(0, std::memory_order_release);
  }

  void record_failure() noexcept {
    const std::int64_t now = steady_ns();
    std::int64_t b = backoff_.load(std::memory_order_relaxed);
    if (open_until_.load(std::memory_order_acquire) != 0) {
      b = std::min(b * 2, max_);
      backoff_.store(b, std::memory_order_relaxed);
    }
    open_until_.store(now + b, std::memory_order_release);
  }

  bool is_open() const noexcept { return open_until_.load(std::memory_order_acquire) != 0; }

  /// Time until the next probe (0 when closed or due).
  std::chrono::nanoseconds retry_in() const noexcept {
    const std::int64_t until = open_until_.load(std::memory_order_acquire);
    if (until == 0) return std::chrono::nanoseconds{0};
    return std::chrono::nanoseconds{std::max<std::int64_t>(0, until - steady_ns())};
  }

 private:
  static std::int64_t steady_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  std::int64_t initial_;
  std::int64_t max_;
  std::atomic<std::int64_t> backoff_;
  std::atomic<std::int64_t> open_until_{0};  ///< steady ns; 0 = closed
};

}  // namespace ratelimit::detail
