#pragma once
/// @file service.hpp
/// The decisions of Envoy's rate limit service (envoy.service.ratelimit.v3.ShouldRateLimit) with
/// the reference Go service's semantics (envoyproxy/ratelimit), over this library's rules
/// (`RulesConfig`, `Rules::lookup`) and a `Counters` storage.

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
#include "stats/observer.hpp"

namespace ratelimit::server {

/// What the service does beyond the rules files (the reference's environment settings).
struct ServiceSettings {
  /// SHADOW_MODE: statuses report OVER_LIMIT, the overall code is always OK.
  bool global_shadow_mode = false;
  /// RESPONSE_HEADERS_ENABLED: add the RateLimit-* headers of the descriptor closest to its
  /// limit (an over-limit one first) to `response_headers_to_add`.
  bool response_headers = false;
  std::string limit_header = "RateLimit-Limit";
  std::string remaining_header = "RateLimit-Remaining";
  std::string reset_header = "RateLimit-Reset";
  /// LOCAL_CACHE_SIZE_IN_BYTES: when > 0, a counter found over its limit is remembered for the
  /// rest of its window (in at most about this many bytes); later calls on it are OVER_LIMIT
  /// without asking the storage. As in the reference, only that counter is skipped: the call's
  /// other descriptors are still counted, unless `stop_increment_when_over` (then they are
  /// only read) (src/limiter/base_limiter.go, src/redis/fixed_cache_impl.go DoLimit).
  std::size_t over_limit_cache_bytes = 0;
  /// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, the reference's option (src/redis/
  /// fixed_cache_impl.go, DoLimit and getHitsAddend). false (the default): every descriptor is
  /// counted by its hits, over its limit or not. true: when one of a call's counters is in
  /// the over-limit cache, nothing is counted (the others are read); else, when several are
  /// counted, all are read first, and if some would go over their limit (count + hits >
  /// limit) only those are counted and the others read; if none would, all are counted.
  /// Not with `all_or_nothing` (the constructor throws `std::invalid_argument`).
  bool stop_increment_when_over = false;
  /// RATELIMIT_SERVER_ALL_OR_NOTHING (ours, not the reference's): a call's hits are counted only
  /// if every one is admitted, else none is (the storage's `decide_all`, as the library's rule
  /// sets decide); a denied shadow-mode hit, and a denied quota-mode hit unless every
  /// quota-mode hit of the call is denied, is dropped and the rest decided again. Two
  /// descriptors on one counter are one hit of their summed hits. The over-limit cache is not
  /// used (a denial counts nothing, so a counter is not known over). Default: the reference's
  /// every hit counted.
  bool all_or_nothing = false;
  /// When set, hears of every counted descriptor's decision (not reads), named as the
  /// reference names its stats ("<domain>.<key>_<value>...", see `RuleSet::metric_name`; a
  /// limit override is "<domain>.override"), e.g. a `PrometheusExporter`.
  std::shared_ptr<Listener> listener;
  /// When set, hears of every call as the reference's stats count it (stats/observer.hpp):
  /// each limited descriptor's hits and counts, unknown domains, errors, global shadow mode,
  /// and each call's duration.
  std::shared_ptr<stats::StatsObserver> stats;
};

namespace detail {
class OverLimitCache;
}

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

  /// Decides `request` into `response`. Errors as the reference gives them: UNKNOWN "rate
  /// limit domain must not be empty" / "rate limit descriptor list must not be empty" (a Go
  /// error the gRPC layer reports as UNKNOWN), INVALID_ARGUMENT for a limit override with an
  /// unknown unit, UNAVAILABLE when the storage fails.
  grpc::Status should_rate_limit(const envoy::service::ratelimit::v3::RateLimitRequest& request,
                                 envoy::service::ratelimit::v3::RateLimitResponse& response);

  /// `should_rate_limit` without waiting for the storage: `done(status)` is called exactly
  /// once, when `response` is complete, on the storage's I/O thread or here before this
  /// returns. `request` is read before this returns; `response` must live until `done`.
  void should_rate_limit_async(const envoy::service::ratelimit::v3::RateLimitRequest& request,
                               envoy::service::ratelimit::v3::RateLimitResponse& response,
                               std::function<void(grpc::Status)> done);

  static std::chrono::nanoseconds system_now();

  /// The stats observer of the settings (null when none), e.g. for the rules loader to report
  /// loads to.
  const std::shared_ptr<stats::StatsObserver>& stats() const noexcept { return settings_.stats; }

 private:
  struct Call;
  grpc::Status decide(const envoy::service::ratelimit::v3::RateLimitRequest& request,
                      envoy::service::ratelimit::v3::RateLimitResponse& response);
  void decide_async(const envoy::service::ratelimit::v3::RateLimitRequest& request,
                    envoy::service::ratelimit::v3::RateLimitResponse& response,
                    std::function<void(grpc::Status)> done);
  grpc::Status plan(const envoy::service::ratelimit::v3::RateLimitRequest& request,
                    Call& call) const;
  void finish(Call& call, const std::vector<Decision>& decisions) const;
  void consult_cache(Call& call) const;
  bool reads_first(const Call& call) const;
  std::vector<Decision> merged(const Call& call, std::vector<Decision> sent) const;
  bool after_round(Call& call, std::vector<Decision> decided) const;
  void all_or_nothing_async(std::shared_ptr<Call> call, std::function<void(grpc::Status)> done);

  std::shared_ptr<Counters> counters_;
  ServiceSettings settings_;
  Now now_;
  std::unique_ptr<detail::OverLimitCache> cache_;
  mutable std::mutex mutex_;
  std::shared_ptr<const RulesConfig> config_;
};

}  // namespace ratelimit::server
