#pragma once
/// @file stats/go_stats.hpp
/// The reference service's stats (envoyproxy/ratelimit): its names (src/stats/manager_impl.go,
/// src/metrics/metrics.go), its arithmetic (src/limiter/base_limiter.go) and lyft/gostats'
/// encoding of tags, over a `Store`.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "stats/observer.hpp"
#include "stats/store.hpp"

namespace ratelimit::server::stats {

/// The reference's SanitizeStatName (src/utils/utilities.go): ':' and '|' become '_', and so
/// do the dots of anything that looks like an IPv4 address.
std::string sanitize_stat_name(std::string_view s);

/// lyft/gostats' tag suffix (internal/tags/tags.go, TagSet.Serialize): ".__key=value" per tag
/// in key order, each value with '.', ':' and '|' replaced by '_'; tags with an empty key or
/// value are left out.
std::string serialize_tags(const std::map<std::string, std::string>& tags);

/// The counts of `report` by the reference's rule (base_limiter.go, GetResponseDescriptorStatus
/// and checkOverLimitThreshold / checkNearLimitThreshold / increaseShadowModeStats), with
/// near = floor(float32(limit) * ratio): hits split between within, near and over limit.
struct DescriptorCounts {
  std::uint64_t total_hits = 0, over_limit = 0, near_limit = 0, over_limit_with_local_cache = 0,
                within_limit = 0, shadow_mode = 0;
};
DescriptorCounts count_descriptor(const DescriptorReport& report, float near_limit_ratio) noexcept;

/// The reference's stats as a `StatsObserver`:
/// - `ratelimit.service.rate_limit.<key>.{total_hits,over_limit,near_limit,
///   over_limit_with_local_cache,within_limit,shadow_mode}` per limit (key sanitized),
/// - `ratelimit.service.rate_limit.<domain>.domain_not_found`,
/// - `ratelimit.service.call.should_rate_limit.{redis_error,service_error}`,
/// - `ratelimit.service.{config_load_success,config_load_error,global_shadow_mode}`,
/// - `ratelimit_server.<Method>.total_requests` and the timer `...response_time` (whole
///   milliseconds, as the reference's interceptor reports it),
/// each followed by EXTRA_TAGS' suffix. Thread safety: every member safe from many threads.
class GoStats final : public StatsObserver {
 public:
  GoStats(std::shared_ptr<Store> store, std::map<std::string, std::string> extra_tags,
          float near_limit_ratio = 0.8f);

  void on_descriptor(const DescriptorReport& report) noexcept override;
  void on_domain_not_found(std::string_view domain) noexcept override;
  void on_error(CallError error) noexcept override;
  void on_global_shadow_mode() noexcept override;
  void on_config_load(bool ok) noexcept override;
  void on_call(std::string_view method, std::chrono::nanoseconds elapsed) noexcept override;

  const std::shared_ptr<Store>& store() const noexcept { return store_; }

 private:
  using Counter = std::atomic<std::uint64_t>*;
  struct LimitCounters {
    Counter total_hits, over_limit, near_limit, over_limit_with_local_cache, within_limit,
        shadow_mode;
  };
  struct MethodStats {
    Counter total_requests;
    std::string response_time;
  };
  Counter named(std::string_view name);
  LimitCounters limit_counters(std::string_view key);

  std::shared_ptr<Store> store_;
  std::string tags_;
  float ratio_;
  Counter redis_error_, service_error_, config_load_success_, config_load_error_,
      global_shadow_mode_;
  std::shared_mutex mutex_;
  std::unordered_map<std::string, LimitCounters> limits_;
  std::unordered_map<std::string, Counter> domains_;
  std::unordered_map<std::string, MethodStats> methods_;
};

}  // namespace ratelimit::server::stats
