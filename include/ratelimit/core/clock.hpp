#pragma once
/// @file core/clock.hpp
/// The clock policy: where a limiter reads the time, and how it waits.

#include <chrono>
#include <concepts>
#include <cstdint>
#include <thread>

#include <time.h>

namespace ratelimit {

/// The largest clock reading the library accepts: 2^62 ns (about 146 years). Every algorithm's
/// arithmetic is proven exact up to it, and the Redis scripts keep it below 2^53 us.
inline constexpr std::chrono::nanoseconds max_clock_time{std::int64_t{1} << 62};

/// A clock policy.
///
/// Requirements: `c.now()` returns the time in nanoseconds since the clock's epoch, never negative
/// and at most 2^62 ns (about 146 years); `c.sleep_for(d)` waits `d` (the blocking `acquire`
/// calls it). Both must be safe to call from many threads at once. A clock may step back: the
/// limiters never let a key's time go backwards, so that never mints capacity.
template <class C>
concept Clock = std::copy_constructible<C> && requires(C& c, std::chrono::nanoseconds d) {
  { c.now() } -> std::same_as<std::chrono::nanoseconds>;
  c.sleep_for(d);
};

/// `std::chrono::steady_clock`: monotonic, local to this host. The default: right for in-process
/// limits. Do not share its times across hosts (each host has its own epoch).
/// Thread safety: stateless.
struct SteadyClock {
  /// Nanoseconds since an unspecified epoch (usually boot).
  std::chrono::nanoseconds now() const noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now().time_since_epoch());
  }
  /// Sleeps the calling thread for `d` (nothing if d <= 0).
  void sleep_for(std::chrono::nanoseconds d) const { std::this_thread::sleep_for(d); }
};

/// `std::chrono::system_clock`: UTC nanoseconds since the Unix epoch. The one to share across
/// hosts (a per-minute fixed window is then the calendar minute); it may step when NTP corrects it.
/// Thread safety: stateless.
struct SystemClock {
  /// Nanoseconds since 1970-01-01T00:00:00Z.
  std::chrono::nanoseconds now() const noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::system_clock::now().time_since_epoch());
  }
  /// Sleeps the calling thread for `d` (nothing if d <= 0).
  void sleep_for(std::chrono::nanoseconds d) const { std::this_thread::sleep_for(d); }
};

#if defined(__linux__) && defined(CLOCK_MONOTONIC_COARSE)
/// CLOCK_MONOTONIC_COARSE (Linux): monotonic like SteadyClock, read from the kernel's last tick
/// without touching the hardware counter, so a read costs a few ns instead of tens; the price
/// is resolution: `resolution()` (the tick, typically 1 to 4 ms). Time only moves by whole
/// ticks, so a limit finer than the tick admits in bursts of a tick's worth. Use it where
/// millisecond precision is plenty (per-second and coarser limits) and the clock read shows.
/// Thread safety: stateless.
struct CoarseClock {
  /// Nanoseconds since an unspecified epoch (usually boot), advancing by whole ticks.
  std::chrono::nanoseconds now() const noexcept {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return std::chrono::seconds{ts.tv_sec} + std::chrono::nanoseconds{ts.tv_nsec};
  }
  /// Sleeps the calling thread for `d` (nothing if d <= 0).
  void sleep_for(std::chrono::nanoseconds d) const { std::this_thread::sleep_for(d); }
  /// The clock's tick as the kernel reports it (clock_getres).
  static std::chrono::nanoseconds resolution() noexcept {
    timespec ts{};
    ::clock_getres(CLOCK_MONOTONIC_COARSE, &ts);
    return std::chrono::seconds{ts.tv_sec} + std::chrono::nanoseconds{ts.tv_nsec};
  }
};
static_assert(Clock<CoarseClock>);
#endif

static_assert(Clock<SteadyClock> && Clock<SystemClock>);

}  // namespace ratelimit
