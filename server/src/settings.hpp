#pragma once
/// @file settings.hpp
/// The server's settings: every environment variable the reference Go service
/// (envoyproxy/ratelimit) reads, in one table (`settings_table`), parsed as the Go service
/// parses them (kelseyhightower/envconfig), with its defaults, plus a few of our own. Each may
/// also be given as a flag `--name=value` (the variable's name in lower case with '-' for '_',
/// e.g. `--grpc-port=8081`), which wins. Variables that are in no row are ignored silently
/// (Kubernetes' service-link variables such as REDIS_PORT_6379_TCP among them).

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#ifdef RATELIMIT_SERVER_HAVE_REDIS
#include <ratelimit/redis/options.hpp>
#endif

namespace ratelimit::server {

/// Everything the server reads at start. Start from `read_settings` (with an empty
/// environment for the defaults): a default-constructed value holds zeros, not Go's defaults,
/// which live in `settings_table` only. Durations are as Go's time.Duration (nanoseconds).
/// Thread safety: a plain value.
struct Settings {
  // --- listeners ------------------------------------------------------------------------------
  std::string http_host;      ///< HOST
  std::int64_t http_port{};   ///< PORT (HTTP /json, /healthcheck, /metrics; 0: a free port)
  std::string debug_host;     ///< DEBUG_HOST
  std::int64_t debug_port{};  ///< DEBUG_PORT
  std::string grpc_uds;       ///< GRPC_UDS: when set, gRPC listens on this unix socket path only
  std::string grpc_host;      ///< GRPC_HOST ("::" and other IPv6 addresses too)
  std::int64_t grpc_port{};   ///< GRPC_PORT (0: a free port)
  std::chrono::nanoseconds grpc_max_connection_age{};        ///< GRPC_MAX_CONNECTION_AGE
  std::chrono::nanoseconds grpc_max_connection_age_grace{};  ///< GRPC_MAX_CONNECTION_AGE_GRACE
  bool grpc_server_use_tls{};                                ///< GRPC_SERVER_USE_TLS
  std::string grpc_server_tls_cert;     ///< GRPC_SERVER_TLS_CERT (PEM chain, reloaded on change)
  std::string grpc_server_tls_key;      ///< GRPC_SERVER_TLS_KEY (PEM, reloaded on change)
  std::string grpc_client_tls_cacert;   ///< GRPC_CLIENT_TLS_CACERT: set, client certs required
  std::string grpc_client_tls_san;      ///< GRPC_CLIENT_TLS_SAN: the client cert must carry it
  std::string grpc_server_tls_ca_cert;  ///< GRPC_SERVER_TLS_CA_CERT: read by no Go version
  std::string log_level;                ///< LOG_LEVEL (logrus names)
  std::string log_format;               ///< LOG_FORMAT

  // --- where the rules come from -----------------------------------------------------------
  std::string config_type;                               ///< CONFIG_TYPE: FILE or GRPC_XDS_SOTW
  bool force_start_without_initial_config{};             ///< FORCE_START_WITHOUT_INITIAL_CONFIG
  std::string xds_node_id;                               ///< CONFIG_GRPC_XDS_NODE_ID
  std::map<std::string, std::string> xds_node_metadata;  ///< CONFIG_GRPC_XDS_NODE_METADATA
  std::string xds_server_url;                            ///< CONFIG_GRPC_XDS_SERVER_URL
  /// CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL
  std::chrono::nanoseconds xds_server_connect_retry_interval{};
  /// CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS
  std::map<std::string, std::string> xds_client_additional_headers;
  bool xds_server_use_tls{};                                ///< CONFIG_GRPC_XDS_SERVER_USE_TLS
  std::string xds_client_tls_cert;                          ///< CONFIG_GRPC_XDS_CLIENT_TLS_CERT
  std::string xds_client_tls_key;                           ///< CONFIG_GRPC_XDS_CLIENT_TLS_KEY
  std::string xds_server_tls_cacert;                        ///< CONFIG_GRPC_XDS_SERVER_TLS_CACERT
  std::string xds_server_tls_san;                           ///< CONFIG_GRPC_XDS_SERVER_TLS_SAN
  std::chrono::nanoseconds xds_backoff_initial_interval{};  ///< XDS_CLIENT_BACKOFF_INITIAL_INTERVAL
  std::chrono::nanoseconds xds_backoff_max_interval{};      ///< XDS_CLIENT_BACKOFF_MAX_INTERVAL
  double xds_backoff_random_factor{};                       ///< XDS_CLIENT_BACKOFF_RANDOM_FACTOR
  bool xds_backoff_jitter{};                                ///< XDS_CLIENT_BACKOFF_JITTER
  std::int64_t xds_max_msg_size_bytes{};  ///< XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES (0: gRPC's)
  std::string runtime_root;               ///< RUNTIME_ROOT
  std::string runtime_subdirectory;       ///< RUNTIME_SUBDIRECTORY
  std::string runtime_appdirectory;       ///< RUNTIME_APPDIRECTORY
  bool runtime_ignore_dotfiles{};         ///< RUNTIME_IGNOREDOTFILES
  bool runtime_watch_root{};              ///< RUNTIME_WATCH_ROOT
  bool merge_domain_config{};             ///< MERGE_DOMAIN_CONFIG

  // --- stats -----------------------------------------------------------------------------------
  bool use_dog_statsd{};                           ///< USE_DOG_STATSD
  std::vector<std::string> dog_statsd_mogrifiers;  ///< USE_DOG_STATSD_MOGRIFIERS
  /// One DogStatsD mogrifier per name of USE_DOG_STATSD_MOGRIFIERS (with USE_DOG_STATSD), from
  /// DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and _TAGS (src/godogstats/mogrifier_map.go).
  struct DogMogrifier {
    std::string label, pattern, name;
    std::map<std::string, std::string> tags;
  };
  std::vector<DogMogrifier> dog_statsd_mogrifier_sets;  ///< filled by `read_settings`
  bool use_statsd{};                                    ///< USE_STATSD
  std::string statsd_host;                              ///< STATSD_HOST
  std::int64_t statsd_port{};                           ///< STATSD_PORT
  std::string statsd_protocol;                          ///< STATSD_PROTOCOL (gostats)
  std::int64_t gostats_flush_interval_seconds{};    ///< GOSTATS_FLUSH_INTERVAL_SECONDS (gostats)
  bool gostats_logging_sink_disabled{};             ///< GOSTATS_LOGGING_SINK_DISABLED (gostats)
  std::map<std::string, std::string> extra_tags;    ///< EXTRA_TAGS
  std::chrono::nanoseconds stats_flush_interval{};  ///< STATS_FLUSH_INTERVAL
  bool disable_stats{};                             ///< DISABLE_STATS
  bool use_prometheus{};                            ///< USE_PROMETHEUS
  std::string prometheus_addr;                      ///< PROMETHEUS_ADDR
  std::string prometheus_path;                      ///< PROMETHEUS_PATH
  std::string prometheus_mapper_yaml;               ///< PROMETHEUS_MAPPER_YAML
  bool prometheus_response_time_as_ms{};            ///< PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS
  bool tracing_enabled{};                           ///< TRACING_ENABLED
  std::string tracing_service_name;                 ///< TRACING_SERVICE_NAME
  std::string tracing_service_namespace;            ///< TRACING_SERVICE_NAMESPACE
  std::string tracing_service_instance_id;          ///< TRACING_SERVICE_INSTANCE_ID
  std::string tracing_exporter_protocol;            ///< TRACING_EXPORTER_PROTOCOL
  double tracing_sampling_rate{};                   ///< TRACING_SAMPLING_RATE

  // --- answers -----------------------------------------------------------------------------
  std::int64_t expiration_jitter_max_seconds{};  ///< EXPIRATION_JITTER_MAX_SECONDS
  std::int64_t local_cache_bytes{};  ///< LOCAL_CACHE_SIZE_IN_BYTES (the over-limit cache)
  double near_limit_ratio{};         ///< NEAR_LIMIT_RATIO (Go: float32)
  std::string cache_key_prefix;      ///< CACHE_KEY_PREFIX
  std::string backend_type;          ///< BACKEND_TYPE: redis ("" too) or memcache
  /// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: see `ServiceSettings::stop_increment_when_over`.
  bool stop_increment_when_over{};
  bool response_headers{};       ///< LIMIT_RESPONSE_HEADERS_ENABLED
  std::string limit_header;      ///< LIMIT_LIMIT_HEADER
  std::string remaining_header;  ///< LIMIT_REMAINING_HEADER
  std::string reset_header;      ///< LIMIT_RESET_HEADER
  /// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: unhealthy until a rules file loaded.
  bool healthy_with_config_only{};
  bool shadow_mode{};                ///< SHADOW_MODE
  bool quota_mode{};                 ///< QUOTA_MODE
  bool response_dynamic_metadata{};  ///< RESPONSE_DYNAMIC_METADATA

  // --- Redis -----------------------------------------------------------------------------------
  std::string redis_socket_type;  ///< REDIS_SOCKET_TYPE: tcp or unix (Go's default: unix)
  std::string redis_type;         ///< REDIS_TYPE: single, sentinel or cluster (any case)
  /// REDIS_URL: "host:port" (tcp), a socket path (unix), "master,host:port,..." (sentinel) or
  /// "host:port,..." (cluster seeds). Go's default: /var/run/nutcracker/ratelimit.sock.
  std::string redis_url;
  std::int64_t redis_pool_size{};               ///< REDIS_POOL_SIZE (connections; > 64 uses 64)
  std::string redis_auth;                       ///< REDIS_AUTH: "password" or "user:password"
  bool redis_tls{};                             ///< REDIS_TLS
  std::string redis_tls_client_cert;            ///< REDIS_TLS_CLIENT_CERT
  std::string redis_tls_client_key;             ///< REDIS_TLS_CLIENT_KEY
  std::string redis_tls_cacert;                 ///< REDIS_TLS_CACERT: CA bundle (PEM)
  bool redis_tls_skip_hostname_verification{};  ///< REDIS_TLS_SKIP_HOSTNAME_VERIFICATION
  std::chrono::nanoseconds redis_pipeline_window{};   ///< REDIS_PIPELINE_WINDOW
  std::int64_t redis_pipeline_limit{};                ///< REDIS_PIPELINE_LIMIT
  std::int64_t redis_cluster_pipeline_parallelism{};  ///< REDIS_CLUSTER_PIPELINE_PARALLELISM
  bool redis_persecond{};                             ///< REDIS_PERSECOND
  std::string redis_persecond_socket_type;            ///< REDIS_PERSECOND_SOCKET_TYPE
  std::string redis_persecond_type;                   ///< REDIS_PERSECOND_TYPE
  std::string redis_persecond_url;                    ///< REDIS_PERSECOND_URL
  std::int64_t redis_persecond_pool_size{};           ///< REDIS_PERSECOND_POOL_SIZE
  std::string redis_persecond_auth;                   ///< REDIS_PERSECOND_AUTH
  bool redis_persecond_tls{};                         ///< REDIS_PERSECOND_TLS
  std::string redis_sentinel_auth;                    ///< REDIS_SENTINEL_AUTH
  std::string redis_persecond_sentinel_auth;          ///< REDIS_PERSECOND_SENTINEL_AUTH
  std::chrono::nanoseconds redis_persecond_pipeline_window{};  ///< REDIS_PERSECOND_PIPELINE_WINDOW
  std::int64_t redis_persecond_pipeline_limit{};               ///< REDIS_PERSECOND_PIPELINE_LIMIT
  /// REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM
  std::int64_t redis_persecond_cluster_pipeline_parallelism{};
  bool redis_health_check_active_connection{};         ///< REDIS_HEALTH_CHECK_ACTIVE_CONNECTION
  std::chrono::nanoseconds redis_timeout{};            ///< REDIS_TIMEOUT
  std::chrono::nanoseconds redis_persecond_timeout{};  ///< REDIS_PERSECOND_TIMEOUT
  std::string redis_pool_on_empty_behavior;            ///< REDIS_POOL_ON_EMPTY_BEHAVIOR
  std::string redis_persecond_pool_on_empty_behavior;  ///< REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR
  /// REDIS_POOL_ON_EMPTY_WAIT_DURATION (older Go releases)
  std::chrono::nanoseconds redis_pool_on_empty_wait_duration{};
  /// REDIS_PERSECOND_POOL_ON_EMPTY_WAIT_DURATION (older Go releases)
  std::chrono::nanoseconds redis_persecond_pool_on_empty_wait_duration{};
  std::chrono::nanoseconds redis_startup_initial_interval{};  ///< REDIS_STARTUP_INITIAL_INTERVAL
  std::chrono::nanoseconds redis_startup_max_interval{};      ///< REDIS_STARTUP_MAX_INTERVAL
  /// REDIS_STARTUP_MAX_ELAPSED_TIME (0: wait for Redis for ever)
  std::chrono::nanoseconds redis_startup_max_elapsed_time{};

  // --- memcached -------------------------------------------------------------------------------
  std::vector<std::string> memcache_host_port;      ///< MEMCACHE_HOST_PORT
  std::int64_t memcache_max_idle_conns{};           ///< MEMCACHE_MAX_IDLE_CONNS
  std::string memcache_srv;                         ///< MEMCACHE_SRV
  std::chrono::nanoseconds memcache_srv_refresh{};  ///< MEMCACHE_SRV_REFRESH
  bool memcache_tls{};                              ///< MEMCACHE_TLS
  std::string memcache_tls_client_cert;             ///< MEMCACHE_TLS_CLIENT_CERT
  std::string memcache_tls_client_key;              ///< MEMCACHE_TLS_CLIENT_KEY
  std::string memcache_tls_cacert;                  ///< MEMCACHE_TLS_CACERT
  bool memcache_tls_skip_hostname_verification{};   ///< MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION

  // --- ours ------------------------------------------------------------------------------------
  /// RATELIMIT_SERVER_STORAGE: "backend" (the storage BACKEND_TYPE and REDIS_* name, as Go) or
  /// "memory" (counters in this process: each replica counts on its own).
  std::string storage;
  /// GRACEFUL_SHUTDOWN_SECONDS: how long SIGTERM waits for the calls in flight, in seconds.
  std::int64_t shutdown_grace_seconds{};
  /// RATELIMIT_SERVER_ALL_OR_NOTHING: see `ServiceSettings::all_or_nothing`.
  bool all_or_nothing{};
  /// RATELIMIT_SERVER_TRUSTED_PROXIES: comma-separated networks whose X-Forwarded-For entries
  /// the check skips to find the client (check/forward_auth.hpp); empty: the peer is the client.
  std::string trusted_proxies;
  /// RATELIMIT_SERVER_CHECK_ACTIONS: the actions file of /check/<domain> (check/actions.hpp);
  /// empty: every domain is unknown to the check (404). Re-read when it changes.
  std::string check_actions;
  /// RATELIMIT_SERVER_HTTP_THREADS: the threads of each HTTP listener (1 to 256).
  std::int64_t http_threads{};

  /// One line per setting that is accepted but maps to something else here, per ignored
  /// argument, and so on: what the server prints at start (without the values, which may be
  /// secrets). Filled by `read_settings`.
  std::vector<std::string> notes;

  /// The directory of rules files: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
  std::filesystem::path config_dir() const;
};

/// How a value is parsed, as the Go code that reads the variable parses it.
enum class SettingParse {
  text,             ///< as it is
  integer,          ///< strconv.ParseInt(v, 0, 64): 10, 0x1f, 0o17, 017, 0b11, 1_000, a sign
  boolean,          ///< strconv.ParseBool: 1 t T TRUE true True 0 f F FALSE false False
  duration,         ///< time.ParseDuration: 150us, 1h30m, 1.5s, -2m, 0; ns us µs ms s m h
  number,           ///< strconv.ParseFloat(v, 64)
  number32,         ///< strconv.ParseFloat(v, 32)
  map,              ///< envconfig's map: "k1:v1,k2:v2" (each item exactly one ':')
  list,             ///< envconfig's slice: "a,b"
  pairs,            ///< "k=v,k2=v2" (items without '=' skipped, as Go's xDS client does)
  gostats_text,     ///< lyft/gostats envOr: "" means the default
  gostats_integer,  ///< lyft/gostats envInt (strconv.Atoi): "" means the default
  gostats_boolean,  ///< lyft/gostats envBool: "" means the default
  otel,             ///< read by OpenTelemetry's Go SDK only when TRACING_ENABLED=true
};

/// What this server does with a variable (the table's last columns).
enum class SettingUse {
  /// Read and acted on as the Go service acts on it.
  honoured,
  /// Accepted at any value; when set, one start-up line says what it maps to here (it tunes
  /// the Go service's internals, its stats or its tracing, and decides nothing).
  mapped,
  /// Not implemented yet and ignoring it would change answers: accepted at Go's default (or
  /// `SettingRow::inert`), any other value refused at start, by name.
  default_only,
  /// A setting of this server, not of the Go service.
  ours,
};

/// Where a parsed value goes (a member of `Settings`; none: only checked and noted).
using SettingField =
    std::variant<std::monostate, std::string Settings::*, bool Settings::*,
                 std::int64_t Settings::*, double Settings::*, std::chrono::nanoseconds Settings::*,
                 std::map<std::string, std::string> Settings::*,
                 std::vector<std::string> Settings::*>;

/// One variable. Thread safety: immutable.
struct SettingRow {
  std::string_view name;  ///< the environment variable (a name with {NAME} is a template)
  /// Go's `default:` tag, used when the variable is unset; `has_default` false: no tag (the
  /// zero value; an unset variable is then not parsed).
  std::string_view go_default;
  bool has_default;
  SettingParse parse;
  SettingField field;
  SettingUse use;
  /// Where Go reads it: "settings.go", "gostats", "godogstats", "otel", "older Go", or "ours".
  std::string_view source;
  /// What this server does with it: the README's words, and the start-up line of a `mapped`
  /// variable that is set.
  std::string_view meaning;
  /// For `default_only`: the values (as written, '|'-separated) that leave the answers as
  /// they are, when not only `go_default` (e.g. BACKEND_TYPE "redis|").
  std::string_view inert = {};
};

/// Every row, in the order of the README's table.
std::span<const SettingRow> settings_table();

/// The table as server/README.md shows it (a Markdown table, one row per variable).
std::string settings_table_markdown();

/// Reads the settings from `env(name)` (nullopt when unset) and `args` (the arguments without
/// the program name: flags `--name=value` of the table's names win over the environment; any
/// other argument is ignored with a note, as the Go service reads no arguments).
/// `environment_names` (every variable set) is used only to note our own misspelt names.
/// Throws `std::invalid_argument` naming the variable (or flag) and value: a value that does
/// not parse as Go parses it (an empty number, boolean or duration included), a value Go
/// refuses at start (an unknown BACKEND_TYPE, CONFIG_TYPE, REDIS_TYPE, LOG_LEVEL; two stats
/// sinks), a `default_only` variable away from its default, TLS without its files, and
/// RATELIMIT_SERVER_ALL_OR_NOTHING with REDIS_TYPE=cluster or with
/// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
Settings read_settings(const std::function<std::optional<std::string>(const std::string&)>& env,
                       const std::vector<std::string>& args,
                       const std::vector<std::string>& environment_names);

/// Go's time.ParseDuration: nanoseconds, or `std::invalid_argument` naming `name` and `text`.
std::chrono::nanoseconds parse_go_duration(const std::string& name, const std::string& text);

class Counters;
}  // namespace ratelimit::server
namespace ratelimit {
class Listener;
}
namespace ratelimit::server {

/// The counters the settings ask for: in this process with RATELIMIT_SERVER_STORAGE=memory,
/// else on memcached (BACKEND_TYPE=memcache) or Redis (REDIS_URL, Go's default the nutcracker
/// socket; the per-second limits on REDIS_PERSECOND_URL with REDIS_PERSECOND=true), each
/// Go-window key under CACHE_KEY_PREFIX. Throws
/// `std::invalid_argument` naming the variable for a Redis setting that is invalid or that
/// this build cannot serve (no Redis storage). `listener`, when set, hears of the Redis
/// storage's errors (see `make_redis_counters`).
std::shared_ptr<Counters> make_counters(const Settings& settings,
                                        std::shared_ptr<Listener> listener = nullptr);

#ifdef RATELIMIT_SERVER_HAVE_REDIS
/// The options of the Redis that REDIS_URL, REDIS_SOCKET_TYPE, REDIS_TYPE, REDIS_AUTH,
/// REDIS_TLS*, REDIS_POOL_SIZE and REDIS_TIMEOUT name (as `make_counters` builds them; a
/// cluster's seeds are its own). Throws `std::invalid_argument` naming the variable.
RedisOptions redis_options_of(const Settings& settings);
#endif

/// The rules files of `dir` (recursively: *.yaml and *.yml, dotfiles skipped when asked), sorted.
std::vector<std::filesystem::path> rules_files(const std::filesystem::path& dir,
                                               bool ignore_dotfiles);

}  // namespace ratelimit::server
