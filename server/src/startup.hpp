#pragma once
/// @file startup.hpp
/// The start-up wait for the storage, as the reference waits for Redis before it opens any
/// listener (src/redis/driver_impl.go, newClientImpl): the storage is asked until it answers,
/// with an exponential backoff (jpillora/backoff: factor 2, jitter) between attempts, and the
/// process gives up after REDIS_STARTUP_MAX_ELAPSED_TIME when that is not 0.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace ratelimit::server {

/// REDIS_STARTUP_* (Go's defaults). Thread safety: a plain value.
struct StartupSettings {
  /// REDIS_STARTUP_INITIAL_INTERVAL: the first wait, and the least (> 0; Go's backoff takes
  /// 100 ms for 0).
  std::chrono::nanoseconds initial_interval = std::chrono::seconds{1};
  /// REDIS_STARTUP_MAX_INTERVAL: the longest wait (Go's backoff takes 10 s for 0).
  std::chrono::nanoseconds max_interval = std::chrono::seconds{30};
  /// REDIS_STARTUP_MAX_ELAPSED_TIME: give up once this long has passed since the first attempt;
  /// 0: never.
  std::chrono::nanoseconds max_elapsed = std::chrono::nanoseconds{0};
};

/// The wait before attempt `attempt` + 1 (0 for the wait after the first failure), as
/// jpillora/backoff's ForAttempt with factor 2 and jitter: d = min * 2^attempt, then a uniform
/// draw in [min, d) (`unit` in [0, 1) is the draw), capped at max; max when min >= max.
std::chrono::nanoseconds backoff_wait(const StartupSettings& s, int attempt, double unit);

/// What the wait needs from the process: each a plain function, so tests pass fakes.
struct StartupHooks {
  /// Asks the storage once; throws (`std::exception`) with the reason when it does not answer.
  std::function<void()> probe;
  /// The time on a steady clock.
  std::function<std::chrono::nanoseconds()> now;
  /// Waits `d`; returns false when the process was told to stop meanwhile (SIGTERM).
  std::function<bool(std::chrono::nanoseconds)> sleep;
  /// A uniform draw in [0, 1) for the jitter.
  std::function<double()> random;
  /// Tells of each retry (a start-up line).
  std::function<void(const std::string&)> log;
};

/// Returns once `hooks.probe` succeeds. Throws `std::runtime_error` with the reference's
/// message "timed out waiting for Redis connection to <target> after <elapsed>: <error>" once
/// `settings.max_elapsed` (not 0) has passed after a failure, or "context cancelled while
/// waiting for Redis connection to <target>: context canceled" when `sleep` returns false.
void wait_for_storage(const std::string& target, const StartupSettings& settings,
                      const StartupHooks& hooks);

/// A duration as Go prints it (time.Duration.String, rounded to milliseconds as the reference
/// rounds the elapsed time): "1.5s", "2m0s", "0s", "250ms".
std::string go_duration_text(std::chrono::nanoseconds d);

}  // namespace ratelimit::server
