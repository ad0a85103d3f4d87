#pragma once
/// @file service_settings.hpp
/// What the service does beyond the rules files (the reference's environment settings).

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include <ratelimit/core/listener.hpp>

#include "descriptor_result.hpp"
#include "stats/observer.hpp"

namespace ratelimit::server {

/// What the service does beyond the rules files. Thread safety: a plain value.
struct ServiceSettings {
  /// SHADOW_MODE: statuses report OVER_LIMIT, the overall code is always OK.
  bool global_shadow_mode = false;
  /// QUOTA_MODE: every descriptor a limit applies to (or none matched) is in quota mode: the
  /// call is OVER_LIMIT only when every one of them is (src/service/ratelimit.go,
  /// shouldRateLimitWorker); the statuses still say OVER_LIMIT.
  bool global_quota_mode = false;
  /// LIMIT_RESPONSE_HEADERS_ENABLED: add the limit, remaining and reset headers of one
  /// descriptor to `response_headers_to_add`, chosen as the reference chooses it: the last
  /// descriptor over its limit that is not in quota mode, else the first with the least
  /// remaining among those with a limit (strictly below 2^32 - 1).
  bool response_headers = false;
  std::string limit_header = "RateLimit-Limit";          ///< LIMIT_LIMIT_HEADER
  std::string remaining_header = "RateLimit-Remaining";  ///< LIMIT_REMAINING_HEADER
  std::string reset_header = "RateLimit-Reset";          ///< LIMIT_RESET_HEADER
  /// RESPONSE_DYNAMIC_METADATA: the response's `dynamic_metadata` is the Struct of the
  /// reference's ratelimitToMetadata (see response.hpp).
  bool response_dynamic_metadata = false;
  /// NEAR_LIMIT_RATIO (0 to 1): where "near the limit" starts, floor(limit * ratio). It changes
  /// no answer (as in the reference, where it feeds stats only): it sorts `DescriptorResult`s.
  float near_limit_ratio = 0.8F;
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
  /// if every one is admitted, else none is (the storage's `decide_all`, in the library's
  /// rule-set rounds, rules/detail/rounds.hpp); a denied shadow-mode hit, and a denied
  /// quota-mode hit unless every quota-mode hit of the call is denied, is dropped and the rest
  /// decided again. Two descriptors on one counter are one hit of their summed hits. The
  /// over-limit cache is not used (a denial counts nothing, so a counter is not known over).
  bool all_or_nothing = false;
  /// Whether the counters hold the library's algorithms, which a rule's lockout
  /// (`block_duration`) keeps its lock in: false for memcached (BACKEND_TYPE=memcache), where
  /// `Service::reload` refuses such a rule naming it.
  bool lockouts = true;
  /// When set, hears of every counted descriptor's decision (not reads), named as the
  /// reference names its stats ("<domain>.<key>_<value>...", see `RuleSet::metric_name`; a
  /// limit override is "<domain>.override"), e.g. a `PrometheusExporter`.
  std::shared_ptr<Listener> listener;
  /// When set, called with every call's duration, from its arrival at the service to its
  /// answer (not sampled), e.g. `PrometheusExporter::record_call`. Must be quick and must not
  /// throw; called on the thread that completes the call.
  std::function<void(std::chrono::nanoseconds)> call_timer;
  /// When set, called with each decided descriptor's `DescriptorResult` (the stats hook).
  DescriptorObserver observer;
  /// When set, hears of what the reference's stats count beyond the descriptors
  /// (stats/observer.hpp): unknown domains, errors, global shadow mode, each call's duration,
  /// rules loads.
  std::shared_ptr<stats::StatsObserver> stats;
};

}  // namespace ratelimit::server
