#pragma once
/// @file service.hpp
/// The decisions of Envoy's rate limit service (envoy.service.ratelimit.v3.ShouldRateLimit) with
/// the reference Go service's semantics (envoyproxy/ratelimit), over this library's rules
/// (`RulesConfig`, `Rules::lookup`) and a `Counters` storage. One path, asynchronous: plan
/// (plan.hpp), count (counting.hpp: the reference's default, its stop-increment option, or all
/// or nothing), answer (response.hpp); the blocking call waits on it.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/support/status.h>

#include <ratelimit/core/listener.hpp>
#include <ratelimit/rules.hpp>

#include "counters.hpp"
#include "rls.pb.h"
#include "service_settings.hpp"

namespace ratelimit::server {

class OverLimitCache;
struct Call;
struct Served;

/// Answers ShouldRateLimit. The configuration is swapped whole by `reload`: a call is decided
/// under one configuration. Counters live in the `Counters` under each limit's `Rule::id`, so a
/// limit whose path and unit are unchanged by a reload keeps its counts.
/// Thread safety: every member is safe from many threads.
class Service {
 public:
  /// The time in nanoseconds since the Unix epoch (tests pass a manual clock's reading).
  using Now = std::function<std::chrono::nanoseconds()>;

  /// Throws `std::invalid_argument` when `settings` asks for both `all_or_nothing` and
  /// `stop_increment_when_over`.
  Service(std::shared_ptr<Counters> counters, ServiceSettings settings, Now now = system_now);
  ~Service();

  /// Serves `config` from now on (the previous configuration is dropped). `config` is loaded
  /// with `ServerAlgorithms` (server_algorithms.hpp), so that a limit naming no algorithm runs
  /// the reference's window, and one naming a library algorithm runs that. Throws
  /// `std::invalid_argument` "FILE:LINE: rate_limit.algorithm = ...: ..." for a limit its
  /// algorithm cannot hold (or an algorithm not in `ServerAlgorithms`); the configuration in
  /// force then stays.
  void reload(RulesConfig config);
  /// The configuration being served (empty until the first `reload`).
  std::shared_ptr<const RulesConfig> config() const;

  /// Decides `request` into `response`: `should_rate_limit_async` and a wait for it. Not from
  /// the storage's I/O thread (it would wait for itself).
  grpc::Status should_rate_limit(const envoy::service::ratelimit::v3::RateLimitRequest& request,
                                 envoy::service::ratelimit::v3::RateLimitResponse& response);

  /// Decides `request` into `response` without waiting for the storage: `done(status)` is
  /// called exactly once, when `response` is complete, on the storage's I/O thread or here
  /// before this returns. `request` is read before this returns; `response` must live until
  /// `done`. Errors as the reference gives them: UNKNOWN "rate limit domain must not be
  /// empty" / "rate limit descriptor list must not be empty" / "no rate limit configuration
  /// loaded" (Go errors that grpc-go reports as UNKNOWN with their text), UNKNOWN with the
  /// storage's error text when the storage fails (the reference's RedisError),
  /// INVALID_ARGUMENT for a limit override with an unknown unit.
  void should_rate_limit_async(const envoy::service::ratelimit::v3::RateLimitRequest& request,
                               envoy::service::ratelimit::v3::RateLimitResponse& response,
                               std::function<void(grpc::Status)> done);

  static std::chrono::nanoseconds system_now();

  /// The stats observer of the settings (null when none), e.g. for the rules loader to report
  /// loads to.
  const std::shared_ptr<stats::StatsObserver>& stats() const noexcept { return settings_.stats; }

 private:
  void decide_async(const envoy::service::ratelimit::v3::RateLimitRequest& request,
                    envoy::service::ratelimit::v3::RateLimitResponse& response,
                    std::function<void(grpc::Status)> done);

  std::shared_ptr<Counters> counters_;
  ServiceSettings settings_;
  Now now_;
  std::unique_ptr<OverLimitCache> cache_;
  mutable std::mutex mutex_;
  std::shared_ptr<const Served> served_;
};

}  // namespace ratelimit::server
