#pragma once
/// @file settings.hpp
/// The server's settings, named as the reference service (envoyproxy/ratelimit, src/settings)
/// names its environment variables; each may also be given as a flag `--name=value` (the
/// variable's name in lower case with '-' for '_', e.g. `--grpc-port=8081`), which wins.

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "startup.hpp"

namespace ratelimit::server {

/// Everything the server reads at start. Thread safety: a plain value.
struct Settings {
  std::string grpc_host = "0.0.0.0";  ///< GRPC_HOST
  int grpc_port = 8081;               ///< GRPC_PORT (0: a free port)
  std::string http_host = "0.0.0.0";  ///< HOST
  int http_port = 8080;               ///< PORT (HTTP /json and /healthcheck; 0: a free port)
  std::string runtime_root = "/srv/runtime_data/current";  ///< RUNTIME_ROOT
  std::string runtime_subdirectory;                        ///< RUNTIME_SUBDIRECTORY
  std::string runtime_appdirectory = "config";             ///< RUNTIME_APPDIRECTORY
  bool runtime_watch_root = true;                          ///< RUNTIME_WATCH_ROOT
  bool runtime_ignore_dotfiles = false;                    ///< RUNTIME_IGNOREDOTFILES
  bool merge_domain_config = false;                        ///< MERGE_DOMAIN_CONFIG
  bool shadow_mode = false;                                ///< SHADOW_MODE
  /// LIMIT_RESPONSE_HEADERS_ENABLED (also the older name RESPONSE_HEADERS_ENABLED)
  bool response_headers = false;
  std::string limit_header = "RateLimit-Limit";          ///< LIMIT_LIMIT_HEADER
  std::string remaining_header = "RateLimit-Remaining";  ///< LIMIT_REMAINING_HEADER
  std::string reset_header = "RateLimit-Reset";          ///< LIMIT_RESET_HEADER
  /// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: unhealthy until a rules file loaded.
  bool healthy_with_config_only = false;
  std::size_t local_cache_bytes = 0;  ///< LOCAL_CACHE_SIZE_IN_BYTES (the over-limit cache)
  /// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: see `ServiceSettings::stop_increment_when_over`.
  bool stop_increment_when_over = false;
  std::string log_level = "WARN";  ///< LOG_LEVEL
  /// REDIS_URL: "host:port" (REDIS_SOCKET_TYPE=tcp), a socket path (unix), or for
  /// REDIS_TYPE=sentinel "master,host:port,...", cluster "host:port,..." (seeds); empty keeps the
  /// counters in this process.
  std::string redis_url;
  std::string redis_socket_type = "tcp";             ///< REDIS_SOCKET_TYPE: tcp or unix
  std::string redis_type = "single";                 ///< REDIS_TYPE: single, sentinel or cluster
  std::string redis_auth;                            ///< REDIS_AUTH: "password" or "user:password"
  bool redis_tls = false;                            ///< REDIS_TLS
  std::string redis_tls_cacert;                      ///< REDIS_TLS_CACERT: CA bundle (PEM)
  std::string redis_tls_client_cert;                 ///< REDIS_TLS_CLIENT_CERT
  std::string redis_tls_client_key;                  ///< REDIS_TLS_CLIENT_KEY
  int redis_pool_size = 2;                           ///< REDIS_POOL_SIZE (connections)
  std::chrono::milliseconds shutdown_grace{10'000};  ///< GRACEFUL_SHUTDOWN_SECONDS (ours)
  /// RATELIMIT_SERVER_ALL_OR_NOTHING (ours): see `ServiceSettings::all_or_nothing`.
  bool all_or_nothing = false;

  // --- stats, as the reference's (server/README.md, "Stats"; stats/) ---------------------------
  bool use_statsd = true;                 ///< USE_STATSD (the reference's default: on)
  std::string statsd_host = "localhost";  ///< STATSD_HOST
  int statsd_port = 8125;                 ///< STATSD_PORT
  bool statsd_udp = false;                ///< STATSD_PROTOCOL: tcp (default) or udp
  /// STATS_FLUSH_INTERVAL (a Go duration, e.g. "10s"): how often counters are flushed.
  std::chrono::milliseconds stats_flush_interval{10'000};
  std::map<std::string, std::string> extra_tags;  ///< EXTRA_TAGS: "k1:v1,k2:v2"
  bool disable_stats = false;                     ///< DISABLE_STATS: no sink at all
  bool use_dog_statsd = false;                    ///< USE_DOG_STATSD
  /// One DogStatsD mogrifier as the environment gives it: USE_DOG_STATSD_MOGRIFIERS lists the
  /// names, DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and _TAGS ("k:v,...") each one's parts.
  struct Mogrifier {
    std::string label, pattern, name;
    std::map<std::string, std::string> tags;
  };
  std::vector<Mogrifier> dog_statsd_mogrifiers;
  bool use_prometheus = false;                  ///< USE_PROMETHEUS
  std::string prometheus_addr = ":9090";        ///< PROMETHEUS_ADDR ("host:port", host optional)
  std::string prometheus_path = "/metrics";     ///< PROMETHEUS_PATH
  std::string prometheus_mapper_yaml;           ///< PROMETHEUS_MAPPER_YAML: a mapping file
  bool prometheus_response_time_as_ms = false;  ///< PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS
  std::string debug_host = "0.0.0.0";           ///< DEBUG_HOST
  int debug_port = 6070;                        ///< DEBUG_PORT (0: a free port)
  // --- Answers and health as the reference's (service, health, start-up wait) ---
  bool response_dynamic_metadata = false;  ///< RESPONSE_DYNAMIC_METADATA
  bool quota_mode = false;                 ///< QUOTA_MODE (global quota mode)
  float near_limit_ratio = 0.8F;           ///< NEAR_LIMIT_RATIO (stats only, as the reference)
  /// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: the storage's connections move the health after
  /// start-up (see `StorageHealthListener`).
  bool redis_health_check_active_connection = false;
  /// REDIS_STARTUP_INITIAL_INTERVAL, REDIS_STARTUP_MAX_INTERVAL, REDIS_STARTUP_MAX_ELAPSED_TIME.
  StartupSettings startup;
  // --- end of answers and health ---

  /// The directory of rules files: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
  std::filesystem::path config_dir() const;
};

/// Reads the settings from `env(name)` (nullopt when unset) and `args` (the flags, without the
/// program name). Throws `std::invalid_argument` naming the variable or flag: a value that does
/// not parse, a flag that is not a setting, or a setting of the reference service that this
/// server does not implement (e.g. BACKEND_TYPE=memcache, USE_STATSD=true), or any variable
/// with one of the reference's prefixes (REDIS_, RUNTIME_, MEMCACHE_, STATSD_, GRPC_,
/// HEADER_RATELIMIT_) or our own (RATELIMIT_SERVER_) that is not one of ours. All-or-nothing
/// with REDIS_TYPE=cluster is refused (a call's counters span slots, which one script cannot),
/// and with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true (each says which descriptors a call
/// over its limits counts, differently).
Settings read_settings(const std::function<std::optional<std::string>(const std::string&)>& env,
                       const std::vector<std::string>& args,
                       const std::vector<std::string>& environment_names);

class Counters;
}  // namespace ratelimit::server
namespace ratelimit {
class Listener;
}
namespace ratelimit::server {

/// The counters the settings ask for: on Redis when REDIS_URL is set, else in this process.
/// Throws `std::invalid_argument` naming the variable for a Redis setting that is invalid or
/// that this build cannot serve (no Redis storage).
/// `listener`, when set, hears of the Redis storage's errors (see `make_redis_counters`).
std::shared_ptr<Counters> make_counters(const Settings& settings,
                                        std::shared_ptr<Listener> listener = nullptr);

/// The rules files of `dir` (recursively: *.yaml and *.yml, dotfiles skipped when asked), sorted.
std::vector<std::filesystem::path> rules_files(const std::filesystem::path& dir,
                                               bool ignore_dotfiles);

}  // namespace ratelimit::server
