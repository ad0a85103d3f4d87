#pragma once
/// @file stats/runtime.hpp
/// The stats of a running server, made from its settings: the store and its sink (statsd,
/// DogStatsD, the Prometheus listener, or none), the observer the service reports to, and the
/// debug listener.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ratelimit/rules.hpp>

#include "http_server.hpp"
#include "settings.hpp"
#include "stats/go_stats.hpp"
#include "stats/prometheus_sink.hpp"
#include "stats/service_hook.hpp"
#include "stats/store.hpp"

namespace ratelimit::server::stats {

/// What the stats are asked for: the reference's variables (server/README.md, "Stats"), apart
/// from how the settings read them (`options_from`).
struct Options {
  bool disable_stats = false;                        ///< DISABLE_STATS: no sink
  bool use_statsd = true;                            ///< USE_STATSD
  bool use_dog_statsd = false;                       ///< USE_DOG_STATSD
  bool use_prometheus = false;                       ///< USE_PROMETHEUS
  std::string statsd_host = "localhost";             ///< STATSD_HOST
  int statsd_port = 8125;                            ///< STATSD_PORT
  bool statsd_udp = false;                           ///< STATSD_PROTOCOL=udp
  std::chrono::milliseconds flush_interval{10'000};  ///< STATS_FLUSH_INTERVAL (>= 1 ms)
  std::map<std::string, std::string> extra_tags;     ///< EXTRA_TAGS
  /// USE_DOG_STATSD_MOGRIFIERS with each one's DOG_STATSD_MOGRIFIER_<NAME>_{PATTERN,NAME,TAGS}.
  struct Mogrifier {
    std::string label, pattern, name;
    std::map<std::string, std::string> tags;
  };
  std::vector<Mogrifier> mogrifiers;
  std::string prometheus_addr = ":9090";        ///< PROMETHEUS_ADDR
  std::string prometheus_path = "/metrics";     ///< PROMETHEUS_PATH
  std::string prometheus_mapper_yaml;           ///< PROMETHEUS_MAPPER_YAML
  bool prometheus_response_time_as_ms = false;  ///< PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS
  std::string debug_host = "0.0.0.0";           ///< DEBUG_HOST
  int debug_port = 6070;                        ///< DEBUG_PORT (0: a free port)
  float near_limit_ratio = 0.8F;                ///< NEAR_LIMIT_RATIO
};

/// The stats options of the server's settings.
Options options_from(const Settings& settings);

/// Owns the stats' threads and listeners. Thread safety: `observer` from any thread; `start_*`
/// and `stop` from one.
class Runtime {
 public:
  /// Makes the sink the settings ask for and starts flushing every STATS_FLUSH_INTERVAL.
  /// Throws `std::invalid_argument` naming the variable for a bad mapping file or mogrifier.
  explicit Runtime(Options options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const std::shared_ptr<GoStats>& observer() const noexcept { return observer_; }
  const std::shared_ptr<Store>& store() const noexcept { return store_; }
  /// Whether the stats go somewhere (statsd, DogStatsD or the Prometheus listener): false with
  /// DISABLE_STATS or every sink off, when only the debug listener's /stats shows them.
  bool has_sink() const noexcept { return store_->sink() != nullptr; }
  /// The service's per-descriptor hook (`ServiceSettings::observer`) reporting to `observer()`
  /// when the stats go somewhere (`has_sink`); else empty, so that no call builds a stat name
  /// per counted descriptor for nothing.
  DescriptorObserver descriptor_observer() const;
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
  Options settings_;
  std::shared_ptr<PrometheusSink> prometheus_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<GoStats> observer_;
  std::unique_ptr<HttpServer> prometheus_http_;
  std::unique_ptr<HttpServer> debug_http_;
};

}  // namespace ratelimit::server::stats
