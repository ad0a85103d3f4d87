#pragma once
/// @file stats/runtime.hpp
/// The stats of a running server, made from its settings: the store and its sink (statsd,
/// DogStatsD, the Prometheus listener, or none), the observer the service reports to, and the
/// debug listener.

#include <functional>
#include <memory>

#include <ratelimit/rules.hpp>

#include "http_server.hpp"
#include "settings.hpp"
#include "stats/go_stats.hpp"
#include "stats/prometheus_sink.hpp"
#include "stats/store.hpp"

namespace ratelimit::server::stats {

/// Owns the stats' threads and listeners. Thread safety: `observer` from any thread; `start_*`
/// and `stop` from one.
class Runtime {
 public:
  /// Makes the sink the settings ask for and starts flushing every STATS_FLUSH_INTERVAL.
  /// Throws `std::invalid_argument` naming the variable for a bad mapping file or mogrifier.
  explicit Runtime(const Settings& settings);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const std::shared_ptr<GoStats>& observer() const noexcept { return observer_; }
  const std::shared_ptr<Store>& store() const noexcept { return store_; }
  /// The Prometheus sink, when USE_PROMETHEUS.
  const std::shared_ptr<PrometheusSink>& prometheus() const noexcept { return prometheus_; }

  /// Starts the listeners: PROMETHEUS_ADDR (when USE_PROMETHEUS; throws `std::runtime_error`
  /// naming it when it cannot listen) and the debug listener on DEBUG_HOST:DEBUG_PORT (when
  /// it cannot listen, a line on stderr and no debug listener, as the reference).
  void start_listeners(std::function<std::shared_ptr<const RulesConfig>()> config);
  int prometheus_port() const noexcept { return prometheus_http_ ? prometheus_http_->port() : 0; }
  int debug_port() const noexcept { return debug_http_ ? debug_http_->port() : 0; }
  /// Stops the listeners, flushes the counters a last time and closes the sink.
  void stop();

 private:
  Settings settings_;
  std::shared_ptr<PrometheusSink> prometheus_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<GoStats> observer_;
  std::unique_ptr<HttpServer> prometheus_http_;
  std::unique_ptr<HttpServer> debug_http_;
};

}  // namespace ratelimit::server::stats
