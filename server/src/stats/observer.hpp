#pragma once
/// @file stats/observer.hpp
/// What the service tells its stats about a call: the seam between the decisions
/// (service.cpp) and the statsd, DogStatsD and Prometheus outputs (stats/go_stats.hpp).

#include <chrono>
#include <cstdint>
#include <string_view>

namespace ratelimit::server::stats {

/// One descriptor of a call that a limit applied to (none, unlimited and replaced limits are
/// not reported), after its counter was counted or read.
struct DescriptorReport {
  std::string_view domain;
  /// The limit's stat key as the reference names it: "<domain>.<key>_<value>.<key>..." (the
  /// rule's path, or the request's values with `detailed_metric` / `value_to_metric`; for a
  /// limit override the request's entries), not yet sanitized.
  std::string_view key;
  std::int64_t limit = 0;  ///< requests_per_unit
  std::int64_t hits = 0;   ///< the descriptor's hits (0: a read)
  /// The counter before and after this call's hits (after - before = hits). For a library
  /// algorithm, which has no such count, after is the limit minus what remains when admitted
  /// and past the limit when denied.
  std::int64_t before = 0;
  std::int64_t after = 0;
  bool shadow = false;  ///< the rule's shadow_mode
  /// Answered OVER_LIMIT from the over-limit cache (LOCAL_CACHE_SIZE_IN_BYTES), not the storage.
  bool over_limit_with_local_cache = false;
};

/// Why a call failed, as the reference counts it (src/service/ratelimit.go).
enum class CallError {
  redis,    ///< the storage failed: ratelimit.service.call.should_rate_limit.redis_error
  service,  ///< a bad request or no configuration: ...should_rate_limit.service_error
};

/// Hears of every call. Implementations must be cheap and must never block: they run on the
/// calls' threads. Thread safety: every member is called from many threads at once.
class StatsObserver {
 public:
  virtual ~StatsObserver() = default;
  /// A descriptor decided by a limit.
  virtual void on_descriptor(const DescriptorReport& report) noexcept = 0;
  /// A descriptor of a domain that no rules file names (counted per descriptor, as the
  /// reference looks each one up).
  virtual void on_domain_not_found(std::string_view domain) noexcept = 0;
  /// A call that failed.
  virtual void on_error(CallError error) noexcept = 0;
  /// A call over its limits answered OK because of SHADOW_MODE.
  virtual void on_global_shadow_mode() noexcept = 0;
  /// A rules directory loaded (`ok`) or refused.
  virtual void on_config_load(bool ok) noexcept = 0;
  /// A gRPC method's call finished, after `elapsed` (`method`: e.g. "ShouldRateLimit").
  virtual void on_call(std::string_view method, std::chrono::nanoseconds elapsed) noexcept = 0;
};

}  // namespace ratelimit::server::stats
