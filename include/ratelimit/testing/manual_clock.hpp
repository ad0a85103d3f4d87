#pragma once
/// @file testing/manual_clock.hpp
/// The fake clock for tests: time moves only when the test says so.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "../core/clock.hpp"

namespace ratelimit {

/// A clock that starts at 0 ns and moves only by `advance` and `set` (and `sleep_for`, which
/// advances instead of sleeping, so a blocking `acquire` returns at once in a test).
///
/// Copies share one time: give a copy to the limiter and keep one to drive it.
/// Thread safety: every member is safe to call from many threads (one atomic word).
class ManualClock {
 public:
  /// The largest time the clock accepts: 2^62 ns (about 146 years).
  static constexpr std::chrono::nanoseconds max_time = max_clock_time;

  /// Starts at 0 ns.
  ManualClock() : now_(std::make_shared<std::atomic<std::int64_t>>(0)) {}

  /// The current time in ns.
  std::chrono::nanoseconds now() const noexcept {
    return std::chrono::nanoseconds{now_->load(std::memory_order_acquire)};
  }

  /// Moves the time forward by `d`.
  /// Throws `std::invalid_argument` if d < 0 or the result would pass `max_time`; the time is
  /// then unchanged.
  void advance(std::chrono::nanoseconds d) {
    if (d.count() < 0)
      throw std::invalid_argument("ManualClock::advance: d must be >= 0 ns, got " +
                                  std::to_string(d.count()));
    auto cur = now_->load(std::memory_order_relaxed);
    do {
      if (d.count() > max_time.count() - cur)
        throw std::invalid_argument("ManualClock::advance: d = " + std::to_string(d.count()) +
                                    " ns would pass max_time");
    } while (!now_->compare_exchange_weak(cur, cur + d.count(), std::memory_order_acq_rel));
  }

  /// Sets the time to `t` (it may go back: that is how a test steps a clock back).
  /// Throws `std::invalid_argument` unless 0 <= t <= max_time.
  void set(std::chrono::nanoseconds t) {
    if (t.count() < 0 || t > max_time)
      throw std::invalid_argument("ManualClock::set: t must be in [0, 2^62] ns, got " +
                                  std::to_string(t.count()));
    now_->store(t.count(), std::memory_order_release);
  }

  /// Advances the time by `d` instead of sleeping (nothing if d <= 0).
  void sleep_for(std::chrono::nanoseconds d) {
    if (d.count() > 0) advance(d);
  }

 private:
  std::shared_ptr<std::atomic<std::int64_t>> now_;
};

static_assert(Clock<ManualClock>);

}  // namespace ratelimit
