#pragma once
/// @file health.hpp
/// The server's health as the reference service keeps it (src/server/health.go,
/// HealthChecker): components that are each healthy or not, and the whole healthy only when
/// every one is. gRPC's health service reports it for the service name "ratelimit" (the empty
/// name stays SERVING, as grpc-go's health server keeps it) and HTTP /healthcheck answers 200
/// "OK" or 500.

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <ratelimit/core/listener.hpp>

namespace ratelimit::server {

/// The reference's health components.
enum class HealthComponent {
  redis,   ///< the storage: unhealthy until it first answers (see startup.hpp)
  config,  ///< only with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: unhealthy until rules load
  sigterm  ///< healthy until SIGTERM
};

/// The components and the whole. Thread safety: every member is safe from many threads.
class Health {
 public:
  /// The gRPC service name the reference registers its health under.
  static constexpr const char* service_name = "ratelimit";

  /// redis starts unhealthy, sigterm healthy, and config (only when `with_config`) unhealthy.
  explicit Health(bool with_config);

  /// Marks `c` healthy; the whole becomes healthy when every component is. A component this
  /// health does not have (config without `with_config`) is ignored, as the reference logs
  /// "Invalid component" and changes nothing.
  void ok(HealthComponent c);
  /// Marks `c` unhealthy, and so the whole.
  void fail(HealthComponent c);
  /// Whether every component is healthy.
  bool serving() const noexcept { return serving_.load(); }
  /// Whether component `c` is healthy (false for one this health does not have).
  bool healthy(HealthComponent c) const;
  /// Calls `f(serving())` now and after every `ok` or `fail` (as the reference updates the
  /// gRPC health server on each, even without a change), under the health's lock: `f` must not
  /// call back into this health. Replaces an earlier `f`.
  void on_change(std::function<void(bool)> f);

 private:
  void publish();  // with mutex_ held
  mutable std::mutex mutex_;
  std::map<HealthComponent, bool> components_;
  std::atomic<bool> serving_{false};
  std::function<void(bool)> on_change_;
};

/// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true: the storage's events move the redis component (the
/// reference's pool trace, src/redis/driver_impl.go: a new connection makes it healthy, losing
/// the last one unhealthy). Here: a new connection or an answered round trip makes it healthy;
/// a failed round trip or a connect, I/O or timeout error unhealthy. Forwards every event to
/// `next` (when set). Thread safety: as `Listener` requires.
class StorageHealthListener final : public Listener {
 public:
  StorageHealthListener(std::shared_ptr<Health> health, std::shared_ptr<Listener> next)
      : health_(std::move(health)), next_(std::move(next)) {}
  void on_decision(const DecisionEvent& e) override;
  void on_storage_error(const StorageErrorEvent& e) override;
  void on_breaker_change(const BreakerEvent& e) override;
  void on_over_limit_cache_hit(const CacheHitEvent& e) override;
  void on_round_trip(const RoundTripEvent& e) override;
  void on_connect(const ConnectEvent& e) override;
  void on_first_decision(const FirstDecisionEvent& e) override;

 private:
  std::shared_ptr<Health> health_;
  std::shared_ptr<Listener> next_;
};

}  // namespace ratelimit::server
