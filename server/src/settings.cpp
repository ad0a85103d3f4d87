#include "settings.hpp"

#include "ascii.hpp"
#include "counters.hpp"

#ifdef RATELIMIT_SERVER_HAVE_REDIS
#include <ratelimit/redis/cluster.hpp>
#include <ratelimit/redis/options.hpp>
#endif

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cfloat>
#include <clocale>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <utility>

namespace ratelimit::server {
namespace {

using P = SettingParse;
using U = SettingUse;
using S = Settings;

[[noreturn]] void bad(const std::string& name, const std::string& v, const std::string& why) {
  throw std::invalid_argument(name + " = \"" + v + "\": " + why);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool parse_bool(const std::string& name, const std::string& v) {
  // Go's strconv.ParseBool, which envconfig uses.
  if (v == "1" || v == "t" || v == "T" || v == "true" || v == "TRUE" || v == "True") return true;
  if (v == "0" || v == "f" || v == "F" || v == "false" || v == "FALSE" || v == "False")
    return false;
  bad(name, v,
      "not a boolean (true or false, as Go's strconv.ParseBool: 1 t T TRUE true True 0 "
      "f F FALSE false False)");
}

/// Go's strconv underscoreOK: underscores only between digits, or after a base prefix.
bool underscore_ok(std::string_view s) {
  char saw = '^';
  std::size_t i = 0;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  bool hex = false;
  if (s.size() >= 2 && s[0] == '0' &&
      (ascii_lower(s[1]) == 'b' || ascii_lower(s[1]) == 'o' || ascii_lower(s[1]) == 'x')) {
    i = 2;
    saw = '0';
    hex = ascii_lower(s[1]) == 'x';
  }
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (is_digit(c) || (hex && ascii_lower(c) >= 'a' && ascii_lower(c) <= 'f')) {
      saw = '0';
      continue;
    }
    if (c == '_') {
      if (saw != '0') return false;
      saw = '_';
      continue;
    }
    if (saw == '_') return false;
    saw = '!';
  }
  return saw != '_';
}

/// Go's strconv.ParseInt(v, base, 64) for base 0 (envconfig) or 10 (strconv.Atoi).
std::int64_t parse_int(const std::string& name, const std::string& v, int base) {
  const std::string why = base == 0 ? "not an integer (as Go's strconv.ParseInt: 42, -7, 0x2a, "
                                      "0o52, 052, 0b101010, 1_000)"
                                    : "not an integer (as Go's strconv.Atoi)";
  std::string_view s = v;
  if (s.empty()) bad(name, v, why);
  bool neg = false;
  if (s[0] == '+' || s[0] == '-') {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.empty()) bad(name, v, why);
  const bool base0 = base == 0;
  if (base0) {
    base = 10;
    if (s[0] == '0') {
      if (s.size() >= 3 && ascii_lower(s[1]) == 'b') {
        base = 2;
        s.remove_prefix(2);
      } else if (s.size() >= 3 && ascii_lower(s[1]) == 'o') {
        base = 8;
        s.remove_prefix(2);
      } else if (s.size() >= 3 && ascii_lower(s[1]) == 'x') {
        base = 16;
        s.remove_prefix(2);
      } else {
        base = 8;
        s.remove_prefix(1);
      }
    }
  }
  std::uint64_t n = 0;
  bool underscores = false;
  const std::uint64_t limit = neg ? (std::uint64_t{1} << 63) : (std::uint64_t{1} << 63) - 1;
  for (const char c : s) {
    if (c == '_' && base0) {
      underscores = true;
      continue;
    }
    int d = 0;
    if (is_digit(c))
      d = c - '0';
    else if (ascii_lower(c) >= 'a' && ascii_lower(c) <= 'z')
      d = ascii_lower(c) - 'a' + 10;
    else
      bad(name, v, why);
    if (d >= base) bad(name, v, why);
    if (n > (limit - static_cast<std::uint64_t>(d)) / static_cast<std::uint64_t>(base))
      bad(name, v, "out of range (a 64-bit integer)");
    n = n * static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(d);
  }
  if (underscores && !underscore_ok(v)) bad(name, v, why);
  if (neg)
    return n == (std::uint64_t{1} << 63) ? std::numeric_limits<std::int64_t>::min()
                                         : -static_cast<std::int64_t>(n);
  return static_cast<std::int64_t>(n);
}

/// Go's strconv.ParseFloat(v, bits): decimal or hexadecimal, Inf, NaN, underscores between
/// digits.
double parse_float(const std::string& name, const std::string& v, int bits) {
  const std::string why = "not a number (as Go's strconv.ParseFloat: 0.8, 1e-3, .5)";
  if (v.empty() || std::isspace(static_cast<unsigned char>(v.front())) ||
      std::isspace(static_cast<unsigned char>(v.back())))
    bad(name, v, why);
  std::string plain;
  for (const char c : v)
    if (c != '_') plain.push_back(c);
  if (plain.size() != v.size() && !underscore_ok(v)) bad(name, v, why);
  const std::string l = ascii_lower(plain);
  const std::string_view unsigned_part =
      (!l.empty() && (l[0] == '+' || l[0] == '-')) ? std::string_view(l).substr(1) : l;
  if (unsigned_part.substr(0, 3) == "nan" && unsigned_part != "nan") bad(name, v, why);
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(plain.c_str(), &end);
  if (end != plain.c_str() + plain.size()) bad(name, v, why);
  const bool infinite_text = unsigned_part == "inf" || unsigned_part == "infinity";
  if (!infinite_text &&
      (std::isinf(d) || (bits == 32 && std::isfinite(d) && std::fabs(d) > FLT_MAX)))
    bad(name, v, "out of range");
  return d;
}

}  // namespace

std::chrono::nanoseconds parse_go_duration(const std::string& name, const std::string& text) {
  // Go's time.ParseDuration: [-+]?([0-9]*(\.[0-9]*)?[a-z]+)+, or "0".
  const std::string why =
      "not a duration (as Go's time.ParseDuration: 150us, 1.5s, 1h30m, 10s; units ns us ms s m h)";
  std::string_view s = text;
  bool neg = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s == "0") return std::chrono::nanoseconds{0};
  if (s.empty()) bad(name, text, why);
  constexpr std::uint64_t top = std::uint64_t{1} << 63;
  std::uint64_t d = 0;
  while (!s.empty()) {
    if (!(s[0] == '.' || is_digit(s[0]))) bad(name, text, why);
    std::uint64_t v = 0;
    std::size_t i = 0;
    for (; i < s.size() && is_digit(s[i]); ++i) {
      if (v > top / 10) bad(name, text, "out of range");
      v = v * 10 + static_cast<std::uint64_t>(s[i] - '0');
      if (v > top) bad(name, text, "out of range");
    }
    const bool pre = i > 0;
    s.remove_prefix(i);
    std::uint64_t f = 0;
    double scale = 1;
    bool post = false;
    if (!s.empty() && s[0] == '.') {
      s.remove_prefix(1);
      bool overflow = false;
      std::size_t j = 0;
      for (; j < s.size() && is_digit(s[j]); ++j) {
        if (overflow) continue;
        if (f > (top - 1) / 10) {
          overflow = true;
          continue;
        }
        f = f * 10 + static_cast<std::uint64_t>(s[j] - '0');
        scale *= 10;
      }
      post = j > 0;
      s.remove_prefix(j);
    }
    if (!pre && !post) bad(name, text, why);
    std::size_t u = 0;
    while (u < s.size() && s[u] != '.' && !is_digit(s[u])) ++u;
    if (u == 0) bad(name, text, "a duration needs a unit (ns us ms s m h)");
    const std::string_view unit_name = s.substr(0, u);
    s.remove_prefix(u);
    std::uint64_t unit = 0;
    if (unit_name == "ns")
      unit = 1;
    else if (unit_name == "us" || unit_name == "\xc2\xb5s" || unit_name == "\xce\xbcs")
      unit = 1'000;
    else if (unit_name == "ms")
      unit = 1'000'000;
    else if (unit_name == "s")
      unit = 1'000'000'000;
    else if (unit_name == "m")
      unit = 60'000'000'000;
    else if (unit_name == "h")
      unit = 3'600'000'000'000;
    else
      bad(name, text, "unknown unit \"" + std::string(unit_name) + "\" (ns us ms s m h)");
    if (v > top / unit) bad(name, text, "out of range");
    v *= unit;
    if (f > 0) {
      v += static_cast<std::uint64_t>(static_cast<double>(f) * (static_cast<double>(unit) / scale));
      if (v > top) bad(name, text, "out of range");
    }
    d += v;
    if (d > top) bad(name, text, "out of range");
  }
  if (neg) {
    if (d == top) return std::chrono::nanoseconds{std::numeric_limits<std::int64_t>::min()};
    return std::chrono::nanoseconds{-static_cast<std::int64_t>(d)};
  }
  if (d > top - 1) bad(name, text, "out of range");
  return std::chrono::nanoseconds{static_cast<std::int64_t>(d)};
}

namespace {

std::vector<std::string> split(const std::string& v, char sep) {
  std::vector<std::string> out;
  std::string::size_type start = 0;
  while (true) {
    const auto at = v.find(sep, start);
    out.push_back(v.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) break;
    start = at + 1;
  }
  return out;
}

bool blank(const std::string& v) {
  return std::all_of(v.begin(), v.end(),
                     [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
}

// The table. Sources: envoyproxy/ratelimit src/settings/settings.go (envconfig tags), lyft/gostats
// settings.go (GetSettings, called by the statsd sink), the Go service's src/godogstats
// (mogrifiers), OpenTelemetry's Go SDK (read when TRACING_ENABLED=true), and older releases of
// settings.go.
constexpr std::string_view xds_only = "used with CONFIG_TYPE=GRPC_XDS_SOTW (see Rules over xDS)";
constexpr std::string_view persecond_only =
    "the per-second Redis's (REDIS_PERSECOND=true), mapped as the REDIS_ variable of that name";
constexpr std::string_view persecond_as_main =
    "the per-second Redis's (REDIS_PERSECOND=true), read as the REDIS_ variable of that name";
constexpr std::string_view memcache_tls_only =
    "used only with MEMCACHE_TLS=true, which this server refuses for now";
constexpr std::string_view stats_sent =
    "stats as the Go service emits them (server/README.md, Stats)";
constexpr std::string_view startup_wait =
    "no listener opens until the storage answers; waits back off as Go's (jpillora/backoff)";
constexpr std::string_view no_tracing =
    "tracing: this server exports no traces; accepted so that the environment starts";

const SettingRow rows[] = {
    // --- settings.go, in its order ---
    {"HOST", "0.0.0.0", true, P::text, &S::http_host, U::honoured, "settings.go",
     "HTTP listener's address (POST /json, GET /healthcheck, GET /metrics); IPv6 such as :: too"},
    {"PORT", "8080", true, P::integer, &S::http_port, U::honoured, "settings.go",
     "HTTP listener's port (0: a free port)"},
    {"DEBUG_HOST", "0.0.0.0", true, P::text, &S::debug_host, U::honoured, "settings.go",
     "the debug listener's address (/, /rlconfig, /stats; /debug/pprof/ answers 404)"},
    {"DEBUG_PORT", "6070", true, P::integer, &S::debug_port, U::honoured, "settings.go",
     "the debug listener's port"},
    {"GRPC_UDS", "", true, P::text, &S::grpc_uds, U::honoured, "settings.go",
     "set: gRPC listens on this unix socket path instead of GRPC_HOST:GRPC_PORT"},
    {"GRPC_HOST", "0.0.0.0", true, P::text, &S::grpc_host, U::honoured, "settings.go",
     "gRPC listener's address (0.0.0.0 and :: listen on IPv4 and IPv6, as Go)"},
    {"GRPC_PORT", "8081", true, P::integer, &S::grpc_port, U::honoured, "settings.go",
     "gRPC listener's port (0: a free port)"},
    {"GRPC_MAX_CONNECTION_AGE", "24h", true, P::duration, &S::grpc_max_connection_age, U::honoured,
     "settings.go", "a connection older than this (+/-10% jitter) is sent GOAWAY (0: never)"},
    {"GRPC_MAX_CONNECTION_AGE_GRACE", "1h", true, P::duration, &S::grpc_max_connection_age_grace,
     U::honoured, "settings.go",
     "after the GOAWAY, calls in flight get this long before the connection is closed"},
    {"GRPC_SERVER_USE_TLS", "false", true, P::boolean, &S::grpc_server_use_tls, U::honoured,
     "settings.go", "gRPC over TLS with GRPC_SERVER_TLS_CERT and _KEY"},
    {"GRPC_SERVER_TLS_CERT", "", true, P::text, &S::grpc_server_tls_cert, U::honoured,
     "settings.go", "the server's certificate chain (PEM), reloaded when the file changes"},
    {"GRPC_SERVER_TLS_KEY", "", true, P::text, &S::grpc_server_tls_key, U::honoured, "settings.go",
     "its private key (PEM), reloaded when the file changes"},
    {"GRPC_CLIENT_TLS_CACERT", "", true, P::text, &S::grpc_client_tls_cacert, U::honoured,
     "settings.go",
     "set (with TLS): clients must present a certificate from these CAs (PEM; reloaded)"},
    {"GRPC_CLIENT_TLS_SAN", "", true, P::text, &S::grpc_client_tls_san, U::honoured, "settings.go",
     "set (with GRPC_CLIENT_TLS_CACERT): the client certificate must carry this DNS or IP SAN"},
    {"LOG_LEVEL", "WARN", true, P::text, &S::log_level, U::mapped, "settings.go",
     "checked as Go's levels; this server writes its warnings and errors to stderr"},
    {"LOG_FORMAT", "text", true, P::text, &S::log_format, U::mapped, "settings.go",
     "this server's stderr lines are plain text"},
    {"CONFIG_TYPE", "FILE", true, P::text, &S::config_type, U::honoured, "settings.go",
     "FILE: the rules files of RUNTIME_ROOT; GRPC_XDS_SOTW: the rules over xDS"},
    {"FORCE_START_WITHOUT_INITIAL_CONFIG", "false", true, P::boolean,
     &S::force_start_without_initial_config, U::honoured, "settings.go", xds_only},
    {"CONFIG_GRPC_XDS_NODE_ID", "default", true, P::text, &S::xds_node_id, U::honoured,
     "settings.go", xds_only},
    {"CONFIG_GRPC_XDS_NODE_METADATA", "", true, P::pairs, &S::xds_node_metadata, U::honoured,
     "settings.go", xds_only},
    {"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", true, P::text, &S::xds_server_url,
     U::honoured, "settings.go", xds_only},
    {"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", true, P::duration,
     &S::xds_server_connect_retry_interval, U::honoured, "settings.go", xds_only},
    {"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", true, P::map,
     &S::xds_client_additional_headers, U::honoured, "settings.go", xds_only},
    {"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", true, P::boolean, &S::xds_server_use_tls,
     U::honoured, "settings.go", xds_only},
    {"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", true, P::text, &S::xds_client_tls_cert, U::honoured,
     "settings.go", xds_only},
    {"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", true, P::text, &S::xds_client_tls_key, U::honoured,
     "settings.go", xds_only},
    {"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", true, P::text, &S::xds_server_tls_cacert, U::honoured,
     "settings.go", xds_only},
    {"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", true, P::text, &S::xds_server_tls_san, U::honoured,
     "settings.go", xds_only},
    {"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", true, P::duration,
     &S::xds_backoff_initial_interval, U::honoured, "settings.go", xds_only},
    {"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", true, P::duration, &S::xds_backoff_max_interval,
     U::honoured, "settings.go", xds_only},
    {"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", true, P::number, &S::xds_backoff_random_factor,
     U::honoured, "settings.go", xds_only},
    {"XDS_CLIENT_BACKOFF_JITTER", "true", true, P::boolean, &S::xds_backoff_jitter, U::honoured,
     "settings.go", xds_only},
    {"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "", true, P::integer, &S::xds_max_msg_size_bytes,
     U::honoured, "settings.go", xds_only},
    {"USE_DOG_STATSD", "false", true, P::boolean, &S::use_dog_statsd, U::honoured, "settings.go",
     stats_sent},
    {"USE_DOG_STATSD_MOGRIFIERS", "", true, P::list, &S::dog_statsd_mogrifiers, U::honoured,
     "settings.go", stats_sent},
    {"USE_STATSD", "true", true, P::boolean, &S::use_statsd, U::honoured, "settings.go",
     stats_sent},
    {"STATSD_HOST", "localhost", true, P::text, &S::statsd_host, U::honoured, "settings.go",
     stats_sent},
    {"STATSD_PORT", "8125", true, P::integer, &S::statsd_port, U::honoured, "settings.go",
     stats_sent},
    {"EXTRA_TAGS", "", true, P::map, &S::extra_tags, U::honoured, "settings.go", stats_sent},
    {"STATS_FLUSH_INTERVAL", "10s", true, P::duration, &S::stats_flush_interval, U::honoured,
     "settings.go", stats_sent},
    {"DISABLE_STATS", "false", true, P::boolean, &S::disable_stats, U::honoured, "settings.go",
     stats_sent},
    {"USE_PROMETHEUS", "false", true, P::boolean, &S::use_prometheus, U::honoured, "settings.go",
     "the Go stats as Prometheus metrics on PROMETHEUS_ADDR, through statsd_exporter mappings"},
    {"PROMETHEUS_ADDR", ":9090", true, P::text, &S::prometheus_addr, U::honoured, "settings.go",
     "the Prometheus listener's address"},
    {"PROMETHEUS_PATH", "/metrics", true, P::text, &S::prometheus_path, U::honoured, "settings.go",
     "the Prometheus listener's path"},
    {"PROMETHEUS_MAPPER_YAML", "", true, P::text, &S::prometheus_mapper_yaml, U::honoured,
     "settings.go", "a statsd_exporter mapping file replacing the Go service's default one"},
    {"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "false", true, P::boolean,
     &S::prometheus_response_time_as_ms, U::honoured, "settings.go",
     "response times observed in milliseconds instead of seconds"},
    {"RUNTIME_ROOT", "/srv/runtime_data/current", true, P::text, &S::runtime_root, U::honoured,
     "settings.go",
     "rules files are read from RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY"},
    {"RUNTIME_SUBDIRECTORY", "", false, P::text, &S::runtime_subdirectory, U::honoured,
     "settings.go", "see RUNTIME_ROOT"},
    {"RUNTIME_APPDIRECTORY", "config", true, P::text, &S::runtime_appdirectory, U::honoured,
     "settings.go", "see RUNTIME_ROOT (its *.yaml and *.yml files, recursively)"},
    {"RUNTIME_IGNOREDOTFILES", "false", true, P::boolean, &S::runtime_ignore_dotfiles, U::honoured,
     "settings.go", "skip files and directories whose names start with a dot"},
    {"RUNTIME_WATCH_ROOT", "true", true, P::boolean, &S::runtime_watch_root, U::honoured,
     "settings.go", "the directory is polled every second either way"},
    {"EXPIRATION_JITTER_MAX_SECONDS", "300", true, P::integer, &S::expiration_jitter_max_seconds,
     U::honoured, "settings.go",
     "a Go-window key expires after its window plus a random [0, this) seconds"},
    {"LOCAL_CACHE_SIZE_IN_BYTES", "0", true, P::integer, &S::local_cache_bytes, U::honoured,
     "settings.go",
     "the over-limit cache: a counter over its limit answers OVER_LIMIT until its window ends "
     "without asking the storage"},
    {"NEAR_LIMIT_RATIO", "0.8", true, P::number32, &S::near_limit_ratio, U::mapped, "settings.go",
     "stats only (near-limit counts); answers are unchanged"},
    {"CACHE_KEY_PREFIX", "", true, P::text, &S::cache_key_prefix, U::honoured, "settings.go",
     "before every Go-window key, as the Go service's keys (server/README.md, Storage)"},
    {"BACKEND_TYPE", "redis", true, P::text, &S::backend_type, U::honoured, "settings.go",
     "redis (or empty), or memcache: the counters on MEMCACHE_HOST_PORT (server/README.md, "
     "Storage)"},
    {"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false", true, P::boolean,
     &S::stop_increment_when_over, U::honoured, "settings.go",
     "a call over its limits counts only the descriptors going over (server/README.md)"},
    {"LIMIT_RESPONSE_HEADERS_ENABLED", "false", true, P::boolean, &S::response_headers, U::honoured,
     "settings.go",
     "add the limit, remaining and reset headers of the descriptor closest to its limit"},
    {"LIMIT_LIMIT_HEADER", "RateLimit-Limit", true, P::text, &S::limit_header, U::honoured,
     "settings.go", "the limit header's name"},
    {"LIMIT_REMAINING_HEADER", "RateLimit-Remaining", true, P::text, &S::remaining_header,
     U::honoured, "settings.go", "the remaining header's name"},
    {"LIMIT_RESET_HEADER", "RateLimit-Reset", true, P::text, &S::reset_header, U::honoured,
     "settings.go", "the reset header's name (seconds)"},
    {"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", true, P::boolean,
     &S::healthy_with_config_only, U::honoured, "settings.go",
     "health is NOT_SERVING until a rules file has loaded"},
    {"REDIS_SOCKET_TYPE", "unix", true, P::text, &S::redis_socket_type, U::honoured, "settings.go",
     "tcp: REDIS_URL is host:port; unix: a socket path"},
    {"REDIS_TYPE", "SINGLE", true, P::text, &S::redis_type, U::honoured, "settings.go",
     "single; sentinel: REDIS_URL is master,host:port,...; cluster: host:port,... (any case)"},
    {"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", true, P::text, &S::redis_url, U::honoured,
     "settings.go", "where Redis is (see REDIS_SOCKET_TYPE and REDIS_TYPE)"},
    {"REDIS_POOL_SIZE", "10", true, P::integer, &S::redis_pool_size, U::honoured, "settings.go",
     "connections per node, any positive size (more than 64: 64; they are pipelined)"},
    {"REDIS_AUTH", "", true, P::text, &S::redis_auth, U::honoured, "settings.go",
     "password, or user:password (ACL)"},
    {"REDIS_TLS", "false", true, P::boolean, &S::redis_tls, U::honoured, "settings.go",
     "TLS to Redis"},
    {"REDIS_TLS_CLIENT_CERT", "", true, P::text, &S::redis_tls_client_cert, U::honoured,
     "settings.go", "client certificate (PEM) for mutual TLS to Redis"},
    {"REDIS_TLS_CLIENT_KEY", "", true, P::text, &S::redis_tls_client_key, U::honoured,
     "settings.go", "its private key (PEM)"},
    {"REDIS_TLS_CACERT", "", true, P::text, &S::redis_tls_cacert, U::honoured, "settings.go",
     "CAs (PEM) to trust for Redis (empty: the system's)"},
    {"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", true, P::boolean,
     &S::redis_tls_skip_hostname_verification, U::mapped, "settings.go",
     "the Redis certificate's chain and host name are both still verified"},
    {"REDIS_PIPELINE_WINDOW", "0", true, P::duration, &S::redis_pipeline_window, U::mapped,
     "settings.go",
     "commands are pipelined automatically: what is queued while a write is under way goes in "
     "the next one"},
    {"REDIS_PIPELINE_LIMIT", "0", true, P::integer, &S::redis_pipeline_limit, U::mapped,
     "settings.go", "commands are pipelined automatically (no limit to set)"},
    {"REDIS_CLUSTER_PIPELINE_PARALLELISM", "1", true, P::integer,
     &S::redis_cluster_pipeline_parallelism, U::mapped, "settings.go",
     "a cluster's nodes are written to in parallel, each pipelined"},
    {"REDIS_PERSECOND", "false", true, P::boolean, &S::redis_persecond, U::honoured, "settings.go",
     "true: limits of unit second on the Redis of REDIS_PERSECOND_URL"},
    {"REDIS_PERSECOND_SOCKET_TYPE", "unix", true, P::text, &S::redis_persecond_socket_type,
     U::honoured, "settings.go", persecond_as_main},
    {"REDIS_PERSECOND_TYPE", "SINGLE", true, P::text, &S::redis_persecond_type, U::honoured,
     "settings.go", persecond_as_main},
    {"REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock", true, P::text,
     &S::redis_persecond_url, U::honoured, "settings.go", persecond_as_main},
    {"REDIS_PERSECOND_POOL_SIZE", "10", true, P::integer, &S::redis_persecond_pool_size,
     U::honoured, "settings.go", persecond_as_main},
    {"REDIS_PERSECOND_AUTH", "", true, P::text, &S::redis_persecond_auth, U::honoured,
     "settings.go", persecond_as_main},
    {"REDIS_PERSECOND_TLS", "false", true, P::boolean, &S::redis_persecond_tls, U::honoured,
     "settings.go", persecond_as_main},
    {"REDIS_SENTINEL_AUTH", "", true, P::text, &S::redis_sentinel_auth, U::honoured, "settings.go",
     "the sentinels' password, or user:password"},
    {"REDIS_PERSECOND_SENTINEL_AUTH", "", true, P::text, &S::redis_persecond_sentinel_auth,
     U::honoured, "settings.go", persecond_as_main},
    {"REDIS_PERSECOND_PIPELINE_WINDOW", "0", true, P::duration, &S::redis_persecond_pipeline_window,
     U::mapped, "settings.go", persecond_only},
    {"REDIS_PERSECOND_PIPELINE_LIMIT", "0", true, P::integer, &S::redis_persecond_pipeline_limit,
     U::mapped, "settings.go", persecond_only},
    {"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "1", true, P::integer,
     &S::redis_persecond_cluster_pipeline_parallelism, U::mapped, "settings.go", persecond_only},
    {"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false", true, P::boolean,
     &S::redis_health_check_active_connection, U::honoured, "settings.go",
     "after start-up, a failed Redis call turns health NOT_SERVING until Redis answers again"},
    {"REDIS_TIMEOUT", "10s", true, P::duration, &S::redis_timeout, U::honoured, "settings.go",
     "the most a connection attempt, and a decision, waits on Redis (0, no bound in Go: 10s)"},
    {"REDIS_PERSECOND_TIMEOUT", "10s", true, P::duration, &S::redis_persecond_timeout, U::honoured,
     "settings.go", persecond_as_main},
    {"REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT", true, P::text, &S::redis_pool_on_empty_behavior,
     U::mapped, "settings.go",
     "decisions share pipelined connections and never wait for a free one; CREATE and ERROR "
     "(older releases) are accepted alike"},
    {"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "WAIT", true, P::text,
     &S::redis_persecond_pool_on_empty_behavior, U::mapped, "settings.go", persecond_only},
    {"REDIS_STARTUP_INITIAL_INTERVAL", "1s", true, P::duration, &S::redis_startup_initial_interval,
     U::honoured, "settings.go", startup_wait},
    {"REDIS_STARTUP_MAX_INTERVAL", "30s", true, P::duration, &S::redis_startup_max_interval,
     U::honoured, "settings.go", startup_wait},
    {"REDIS_STARTUP_MAX_ELAPSED_TIME", "0", true, P::duration, &S::redis_startup_max_elapsed_time,
     U::honoured, "settings.go", startup_wait},
    {"MEMCACHE_HOST_PORT", "", true, P::list, &S::memcache_host_port, U::honoured, "settings.go",
     "with BACKEND_TYPE=memcache: the servers, in order (a key on CRC-32 of it modulo their "
     "number)"},
    {"MEMCACHE_MAX_IDLE_CONNS", "2", true, P::integer, &S::memcache_max_idle_conns, U::mapped,
     "settings.go", "checked (>= 0); one pipelined connection per memcached, busy or idle"},
    {"MEMCACHE_SRV", "", true, P::text, &S::memcache_srv, U::default_only, "settings.go",
     "memcached found by DNS SRV: list them in MEMCACHE_HOST_PORT"},
    {"MEMCACHE_SRV_REFRESH", "0", true, P::duration, &S::memcache_srv_refresh, U::mapped,
     "settings.go", "used only with MEMCACHE_SRV, which this server refuses for now"},
    {"MEMCACHE_TLS", "false", true, P::boolean, &S::memcache_tls, U::default_only, "settings.go",
     "TLS to memcached"},
    {"MEMCACHE_TLS_CLIENT_CERT", "", true, P::text, &S::memcache_tls_client_cert, U::mapped,
     "settings.go", memcache_tls_only},
    {"MEMCACHE_TLS_CLIENT_KEY", "", true, P::text, &S::memcache_tls_client_key, U::mapped,
     "settings.go", memcache_tls_only},
    {"MEMCACHE_TLS_CACERT", "", true, P::text, &S::memcache_tls_cacert, U::mapped, "settings.go",
     memcache_tls_only},
    {"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "false", true, P::boolean,
     &S::memcache_tls_skip_hostname_verification, U::mapped, "settings.go", memcache_tls_only},
    {"SHADOW_MODE", "false", true, P::boolean, &S::shadow_mode, U::honoured, "settings.go",
     "statuses as they are, the overall code always OK"},
    {"QUOTA_MODE", "false", true, P::boolean, &S::quota_mode, U::honoured, "settings.go",
     "every descriptor that is not unlimited in quota mode"},
    {"RESPONSE_DYNAMIC_METADATA", "false", true, P::boolean, &S::response_dynamic_metadata,
     U::honoured, "settings.go", "the call's dynamic metadata, as Go's ratelimitToMetadata"},
    {"MERGE_DOMAIN_CONFIG", "false", true, P::boolean, &S::merge_domain_config, U::honoured,
     "settings.go", "two files of one domain are merged (else refused)"},
    {"TRACING_ENABLED", "false", true, P::boolean, &S::tracing_enabled, U::mapped, "settings.go",
     no_tracing},
    {"TRACING_SERVICE_NAME", "RateLimit", true, P::text, &S::tracing_service_name, U::mapped,
     "settings.go", no_tracing},
    {"TRACING_SERVICE_NAMESPACE", "", true, P::text, &S::tracing_service_namespace, U::mapped,
     "settings.go", no_tracing},
    {"TRACING_SERVICE_INSTANCE_ID", "", true, P::text, &S::tracing_service_instance_id, U::mapped,
     "settings.go", no_tracing},
    {"TRACING_EXPORTER_PROTOCOL", "http", true, P::text, &S::tracing_exporter_protocol, U::mapped,
     "settings.go", no_tracing},
    {"TRACING_SAMPLING_RATE", "1", true, P::number, &S::tracing_sampling_rate, U::mapped,
     "settings.go", no_tracing},
    // --- a variable Envoy Gateway sets, read by no Go version ---
    {"GRPC_SERVER_TLS_CA_CERT", "", false, P::text, &S::grpc_server_tls_ca_cert, U::mapped, "none",
     "ignored, as the Go service ignores it: only GRPC_CLIENT_TLS_CACERT makes client "
     "certificates required"},
    // --- older releases of settings.go ---
    {"REDIS_POOL_ON_EMPTY_WAIT_DURATION", "1s", true, P::duration,
     &S::redis_pool_on_empty_wait_duration, U::mapped, "older Go",
     "decisions share pipelined connections and never wait for a free one"},
    {"REDIS_PERSECOND_POOL_ON_EMPTY_WAIT_DURATION", "1s", true, P::duration,
     &S::redis_persecond_pool_on_empty_wait_duration, U::mapped, "older Go", persecond_only},
    // --- lyft/gostats (read by its statsd sink) ---
    {"STATSD_PROTOCOL", "tcp", true, P::gostats_text, &S::statsd_protocol, U::honoured, "gostats",
     stats_sent},
    {"GOSTATS_FLUSH_INTERVAL_SECONDS", "5", true, P::gostats_integer,
     &S::gostats_flush_interval_seconds, U::mapped, "gostats",
     "counters are flushed every STATS_FLUSH_INTERVAL, as the Go service flushes its store"},
    {"GOSTATS_LOGGING_SINK_DISABLED", "false", true, P::gostats_boolean,
     &S::gostats_logging_sink_disabled, U::mapped, "gostats",
     "no logging sink: with no statsd daemon the stats are dropped and counted"},
    // --- the Go service's godogstats: one set per name of USE_DOG_STATSD_MOGRIFIERS ---
    {"DOG_STATSD_MOGRIFIER_{NAME}_PATTERN",
     "",
     false,
     P::text,
     {},
     U::honoured,
     "godogstats",
     stats_sent},
    {"DOG_STATSD_MOGRIFIER_{NAME}_NAME",
     "",
     false,
     P::text,
     {},
     U::honoured,
     "godogstats",
     stats_sent},
    {"DOG_STATSD_MOGRIFIER_{NAME}_TAGS",
     "",
     false,
     P::map,
     {},
     U::honoured,
     "godogstats",
     stats_sent},
    // --- OpenTelemetry's Go SDK and OTLP trace exporters ---
    {"OTEL_EXPORTER_OTLP_ENDPOINT", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_EXPORTER_OTLP_INSECURE", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_EXPORTER_OTLP_TRACES_INSECURE", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_EXPORTER_OTLP_CERTIFICATE", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
     "",
     false,
     P::otel,
     {},
     U::mapped,
     "otel",
     no_tracing},
    {"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
     "",
     false,
     P::otel,
     {},
     U::mapped,
     "otel",
     no_tracing},
    {"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
     "",
     false,
     P::otel,
     {},
     U::mapped,
     "otel",
     no_tracing},
    {"OTEL_EXPORTER_OTLP_CLIENT_KEY", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_EXPORTER_OTLP_HEADERS", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_EXPORTER_OTLP_COMPRESSION", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
     "",
     false,
     P::otel,
     {},
     U::mapped,
     "otel",
     no_tracing},
    {"OTEL_EXPORTER_OTLP_TIMEOUT", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_BSP_SCHEDULE_DELAY", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_BSP_EXPORT_TIMEOUT", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_BSP_MAX_QUEUE_SIZE", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_ATTRIBUTE_COUNT_LIMIT", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
     "",
     false,
     P::otel,
     {},
     U::mapped,
     "otel",
     no_tracing},
    {"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_SPAN_EVENT_COUNT_LIMIT", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_SPAN_LINK_COUNT_LIMIT", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_LINK_ATTRIBUTE_COUNT_LIMIT", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_TRACES_SAMPLER", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_TRACES_SAMPLER_ARG", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_RESOURCE_ATTRIBUTES", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    {"OTEL_SERVICE_NAME", "", false, P::otel, {}, U::mapped, "otel", no_tracing},
    // --- ours ---
    {"RATELIMIT_SERVER_STORAGE", "backend", true, P::text, &S::storage, U::ours, "ours",
     "backend: the counters live where BACKEND_TYPE and REDIS_* say, as in Go; memory: in this "
     "process (each replica counts alone: for tests and single instances)"},
    {"RATELIMIT_SERVER_ALL_OR_NOTHING", "false", true, P::boolean, &S::all_or_nothing, U::ours,
     "ours",
     "count a call's descriptors only if every one is within its limit (server/README.md); "
     "not with REDIS_TYPE=cluster nor STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"},
    {"GRACEFUL_SHUTDOWN_SECONDS", "10", true, P::integer, &S::shutdown_grace_seconds, U::ours,
     "ours", "how long SIGTERM waits for the calls in flight, in seconds"},
    // The forward-auth check and the HTTP front (check/forward_auth.hpp, http_front.hpp).
    {"RATELIMIT_SERVER_TRUSTED_PROXIES", "", true, P::text, &S::trusted_proxies, U::ours, "ours",
     "comma-separated networks (127.0.0.1,10.0.0.0/8,::1) whose X-Forwarded-For entries the "
     "check skips to find the client; empty: the check's peer is the client"},
    {"RATELIMIT_SERVER_CHECK_ACTIONS", "", true, P::text, &S::check_actions, U::ours, "ours",
     "the actions file of /check/<domain> (Envoy's rate_limits actions per domain); empty: no "
     "domain is known to the check"},
    {"RATELIMIT_SERVER_HTTP_THREADS", "4", true, P::integer, &S::http_threads, U::ours, "ours",
     "the threads of each HTTP listener (1 to 256), whatever the number of connections"},
};

std::string_view parse_name(SettingParse p) {
  switch (p) {
    case P::text:
      return "text";
    case P::integer:
      return "integer";
    case P::boolean:
      return "boolean";
    case P::duration:
      return "duration";
    case P::number:
    case P::number32:
      return "number";
    case P::map:
      return "map k:v,k:v";
    case P::list:
      return "list a,b";
    case P::pairs:
      return "pairs k=v,k=v";
    case P::gostats_text:
      return "text (empty: default)";
    case P::gostats_integer:
      return "integer (empty: default)";
    case P::gostats_boolean:
      return "boolean (empty: default)";
    case P::otel:
      return "text (OpenTelemetry)";
  }
  return "text";
}

std::string_view use_name(SettingUse u) {
  switch (u) {
    case U::honoured:
      return "honoured";
    case U::mapped:
      return "accepted, noted at start";
    case U::default_only:
      return "Go's default only";
    case U::ours:
      return "ours";
  }
  return "";
}

bool is_template(const SettingRow& row) { return row.name.find('{') != std::string_view::npos; }

/// Parses `v` into the row's field of `s`; `label` names the variable or flag in errors.
void apply(const SettingRow& row, Settings& s, const std::string& label, const std::string& v) {
  std::visit(
      [&](auto field) {
        using F = decltype(field);
        if constexpr (std::is_same_v<F, std::monostate>) {
          (void)field;
        } else if constexpr (std::is_same_v<F, std::string Settings::*>) {
          s.*field = v;
        } else if constexpr (std::is_same_v<F, bool Settings::*>) {
          s.*field = parse_bool(label, v);
        } else if constexpr (std::is_same_v<F, std::int64_t Settings::*>) {
          s.*field = parse_int(label, v, row.parse == P::gostats_integer ? 10 : 0);
        } else if constexpr (std::is_same_v<F, double Settings::*>) {
          s.*field = parse_float(label, v, row.parse == P::number32 ? 32 : 64);
        } else if constexpr (std::is_same_v<F, std::chrono::nanoseconds Settings::*>) {
          s.*field = parse_go_duration(label, v);
        } else if constexpr (std::is_same_v<F, std::map<std::string, std::string> Settings::*>) {
          auto& m = s.*field;
          m.clear();
          if (blank(v)) return;
          for (const std::string& item : split(v, ',')) {
            if (row.parse == P::pairs) {
              const auto eq = item.find('=');
              if (eq != std::string::npos) m[item.substr(0, eq)] = item.substr(eq + 1);
              continue;
            }
            const auto parts = split(item, ':');
            if (parts.size() != 2) bad(label, v, "invalid map item \"" + item + "\" (k1:v1,k2:v2)");
            m[parts[0]] = parts[1];
          }
        } else if constexpr (std::is_same_v<F, std::vector<std::string> Settings::*>) {
          auto& l = s.*field;
          l.clear();
          if (!blank(v)) l = split(v, ',');
        }
      },
      row.field);
}

bool is_port(std::int64_t p) { return p >= 0 && p <= 65535; }

}  // namespace

std::span<const SettingRow> settings_table() { return rows; }

std::string settings_table_markdown() {
  const auto cell = [](std::string_view t) {
    std::string out;
    for (const char c : t) {
      if (c == '|')
        out += "\\|";
      else
        out.push_back(c);
    }
    return out;
  };
  std::string md =
      "| Variable | Go default | Parsed as | Here | What it does here | Read by |\n"
      "|---|---|---|---|---|---|\n";
  for (const SettingRow& r : rows) {
    md += "| `" + std::string(r.name) + "` | ";
    if (!r.has_default)
      md += "(unset)";
    else if (r.go_default.empty())
      md += "`\"\"`";
    else
      md += "`" + cell(r.go_default) + "`";
    md += " | " + std::string(parse_name(r.parse)) + " | " + std::string(use_name(r.use)) + " | " +
          cell(r.meaning) + " | " + std::string(r.source) + " |\n";
  }
  return md;
}

std::filesystem::path Settings::config_dir() const {
  std::filesystem::path p = runtime_root;
  if (!runtime_subdirectory.empty()) p /= runtime_subdirectory;
  if (!runtime_appdirectory.empty()) p /= runtime_appdirectory;
  return p;
}

Settings read_settings(const std::function<std::optional<std::string>(const std::string&)>& env,
                       const std::vector<std::string>& args,
                       const std::vector<std::string>& environment_names) {
  Settings s;
  // The flags of the table's names win over the environment; any other argument is ignored
  // (the Go service reads none: src/service_cmd/main.go).
  std::map<std::string, std::pair<std::string, std::string>, std::less<>>
      flags;  // name -> label, value
  for (const std::string& arg : args) {
    const auto eq = arg.find('=');
    bool used = false;
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      std::string name = arg.substr(2, eq - 2);
      for (char& c : name)
        c = c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      for (const SettingRow& r : rows)
        if (!is_template(r) && r.name == name) {
          flags[name] = {arg.substr(0, eq), arg.substr(eq + 1)};
          used = true;
        }
    }
    if (!used)
      s.notes.push_back("argument \"" + arg.substr(0, std::min<std::size_t>(eq, 80)) +
                        "\" ignored (the Go service reads no arguments; this server's flags are "
                        "--name=value of the variables in server/README.md)");
  }
  std::map<std::string, bool, std::less<>> set;  // the rows given a value, by name
  std::optional<std::string> not_implemented;    // the first default_only row off its default
  for (const SettingRow& r : rows) {
    if (is_template(r)) continue;
    const std::string name(r.name);
    std::optional<std::string> value;
    std::string label = name;
    if (const auto f = flags.find(name); f != flags.end()) {
      label = f->second.first;
      value = f->second.second;
    } else {
      value = env(name);
    }
    set[name] = value.has_value();
    const bool gostats = r.parse == P::gostats_text || r.parse == P::gostats_integer ||
                         r.parse == P::gostats_boolean;
    if (value && gostats && value->empty()) value.reset();  // gostats: empty means the default
    if (value) {
      if (r.parse != P::otel) apply(r, s, label, *value);
    } else if (r.has_default && !r.go_default.empty()) {
      apply(r, s, name, std::string(r.go_default));
    }
    if (r.use == U::mapped && set[name])
      s.notes.push_back(name + ": accepted; " + std::string(r.meaning));
    if (r.use == U::default_only) {
      // Refused away from Go's default: ignoring it would change the answers.
      const std::string inert = r.inert.empty() ? std::string(r.go_default) : std::string(r.inert);
      bool at_default = true;
      if (const auto* b = std::get_if<bool Settings::*>(&r.field))
        at_default = s.**b == parse_bool(name, std::string(r.go_default));
      else if (const auto* t = std::get_if<std::string Settings::*>(&r.field)) {
        const auto ok = split(inert, '|');
        at_default = std::find(ok.begin(), ok.end(), s.**t) != ok.end();
      }
      // Thrown after the checks below: a value Go itself refuses is named as such first.
      if (!at_default && !not_implemented)
        not_implemented = label + " = \"" + (value ? *value : std::string()) +
                          "\": not implemented by this server yet (" + std::string(r.meaning) +
                          "); refused rather than ignored, as it would change answers";
    }
  }
  // Our own misspelt names are noted, never refused: a Kubernetes Service named
  // ratelimit-server injects RATELIMIT_SERVER_SERVICE_HOST, RATELIMIT_SERVER_PORT_8081_TCP and
  // the like, which are not even noted.
  const auto service_link = [](const std::string& name) {
    if (name.find("_SERVICE_HOST") != std::string::npos ||
        name.find("_SERVICE_PORT") != std::string::npos)
      return true;
    const auto at = name.rfind("_PORT");
    return at != std::string::npos &&
           (at + 5 == name.size() ||
            (at + 6 < name.size() && name[at + 5] == '_' && is_digit(name[at + 6])));
  };
  for (const std::string& name : environment_names)
    if (name.rfind("RATELIMIT_SERVER_", 0) == 0 && !set.count(name) && !service_link(name))
      s.notes.push_back(name + ": not a setting of this server, ignored");

  // Values the Go service refuses at start.
  for (const auto& [name, port] : {std::pair<const char*, std::int64_t>{"PORT", s.http_port},
                                   {"GRPC_PORT", s.grpc_port},
                                   {"DEBUG_PORT", s.debug_port}})
    if (!is_port(port)) bad(name, std::to_string(port), "not a port (0 to 65535)");
  // The statsd port only matters to Go when a statsd sink is on.
  if ((s.use_statsd || s.use_dog_statsd) && !s.disable_stats && !is_port(s.statsd_port))
    bad("STATSD_PORT", std::to_string(s.statsd_port), "not a port (0 to 65535)");
  {
    const std::string l = ascii_lower(s.log_level);
    if (l != "panic" && l != "fatal" && l != "error" && l != "warn" && l != "warning" &&
        l != "info" && l != "debug" && l != "trace")
      bad("LOG_LEVEL", s.log_level,
          "not a log level (panic, fatal, error, warn, info, debug, trace)");
  }
  if (s.backend_type != "redis" && !s.backend_type.empty() && s.backend_type != "memcache")
    bad("BACKEND_TYPE", s.backend_type, "expected redis or memcache");
  if (s.expiration_jitter_max_seconds < 0)
    bad("EXPIRATION_JITTER_MAX_SECONDS", std::to_string(s.expiration_jitter_max_seconds),
        "must be >= 0");
  if (s.backend_type == "memcache" && s.storage == "backend") {
    if (s.memcache_host_port.empty())
      throw std::invalid_argument(
          "BACKEND_TYPE = memcache: MEMCACHE_HOST_PORT is empty (list the servers as "
          "host:port,host:port)");
    if (s.memcache_max_idle_conns < 0)
      bad("MEMCACHE_MAX_IDLE_CONNS", std::to_string(s.memcache_max_idle_conns), "must be >= 0");
    if (s.all_or_nothing)
      throw std::invalid_argument(
          "RATELIMIT_SERVER_ALL_OR_NOTHING = true: not with BACKEND_TYPE = memcache (memcached "
          "cannot count several keys all or nothing)");
    // As the Go service's memcache backend, which never reads it.
    if (s.stop_increment_when_over)
      s.notes.push_back(
          "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: no effect with BACKEND_TYPE=memcache, as in "
          "the Go service");
    s.stop_increment_when_over = false;
  }
  s.redis_persecond_type = ascii_lower(s.redis_persecond_type);
  if (s.redis_persecond) {
    if (s.redis_persecond_type != "single" && s.redis_persecond_type != "sentinel" &&
        s.redis_persecond_type != "cluster")
      bad("REDIS_PERSECOND_TYPE", s.redis_persecond_type, "expected single, sentinel or cluster");
    if (s.redis_persecond_socket_type != "tcp" && s.redis_persecond_socket_type != "tcp4" &&
        s.redis_persecond_socket_type != "tcp6" && s.redis_persecond_socket_type != "unix")
      bad("REDIS_PERSECOND_SOCKET_TYPE", s.redis_persecond_socket_type, "expected tcp or unix");
    if (s.redis_persecond_pool_size < 1)
      bad("REDIS_PERSECOND_POOL_SIZE", std::to_string(s.redis_persecond_pool_size),
          "expected a positive number of connections");
  }
  if (s.config_type != "FILE" && s.config_type != "GRPC_XDS_SOTW")
    bad("CONFIG_TYPE", s.config_type, "expected FILE or GRPC_XDS_SOTW");
  s.redis_type = ascii_lower(s.redis_type);
  if (s.redis_type != "single" && s.redis_type != "sentinel" && s.redis_type != "cluster")
    bad("REDIS_TYPE", s.redis_type, "expected single, sentinel or cluster");
  if (s.redis_socket_type != "tcp" && s.redis_socket_type != "tcp4" &&
      s.redis_socket_type != "tcp6" && s.redis_socket_type != "unix")
    bad("REDIS_SOCKET_TYPE", s.redis_socket_type, "expected tcp or unix");
  if (s.redis_pool_size < 1)
    bad("REDIS_POOL_SIZE", std::to_string(s.redis_pool_size),
        "expected a positive number of connections");
  if (s.redis_pool_size > 64)
    s.notes.push_back("REDIS_POOL_SIZE: " + std::to_string(s.redis_pool_size) +
                      " connections asked, 64 used (decisions are pipelined on them)");
  if (s.redis_type == "cluster" && s.redis_cluster_pipeline_parallelism < 0)
    bad("REDIS_CLUSTER_PIPELINE_PARALLELISM", std::to_string(s.redis_cluster_pipeline_parallelism),
        "must be >= 0");
  if (s.redis_timeout.count() < 0) bad("REDIS_TIMEOUT", "negative", "must be >= 0");
  if (s.grpc_max_connection_age.count() < 0 || s.grpc_max_connection_age_grace.count() < 0)
    throw std::invalid_argument(
        "GRPC_MAX_CONNECTION_AGE and GRPC_MAX_CONNECTION_AGE_GRACE: must not be negative");
  if (s.tracing_enabled && s.tracing_exporter_protocol != "http" &&
      s.tracing_exporter_protocol != "grpc" && !s.tracing_exporter_protocol.empty())
    bad("TRACING_EXPORTER_PROTOCOL", s.tracing_exporter_protocol, "expected http or grpc");
  // One stats sink, as src/service_cmd/runner/runner.go (DISABLE_STATS first).
  if (!s.disable_stats && static_cast<int>(s.use_dog_statsd) + static_cast<int>(s.use_statsd) +
                                  static_cast<int>(s.use_prometheus) >
                              1)
    throw std::invalid_argument(
        "USE_DOG_STATSD, USE_STATSD, USE_PROMETHEUS: unable to use more than one stats sink at "
        "the same time (USE_STATSD is true by default: set it to false with the others)");
  if (s.grpc_server_use_tls && (s.grpc_server_tls_cert.empty() || s.grpc_server_tls_key.empty()))
    throw std::invalid_argument(
        "GRPC_SERVER_USE_TLS = true: GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY must name the "
        "certificate and key files");
  if (s.grpc_server_use_tls && !s.grpc_client_tls_san.empty() && s.grpc_client_tls_cacert.empty())
    s.notes.push_back(
        "GRPC_CLIENT_TLS_SAN: no effect without GRPC_CLIENT_TLS_CACERT (client certificates are "
        "not asked for), as in the Go service");
  if (s.storage != "backend" && s.storage != "memory")
    bad("RATELIMIT_SERVER_STORAGE", s.storage, "expected backend or memory");
  if (s.storage == "memory")
    s.notes.push_back(
        "RATELIMIT_SERVER_STORAGE=memory: counters in this process; REDIS_* are not used, and "
        "each replica admits the full limit on its own");
  if (s.local_cache_bytes < 0 || s.local_cache_bytes > (std::int64_t{1} << 40))
    bad("LOCAL_CACHE_SIZE_IN_BYTES", std::to_string(s.local_cache_bytes),
        "not a size in bytes (0 to 2^40)");
  if (s.http_threads < 1 || s.http_threads > 256)
    bad("RATELIMIT_SERVER_HTTP_THREADS", std::to_string(s.http_threads), "must be 1 to 256");
  if (s.shutdown_grace_seconds < 0)
    bad("GRACEFUL_SHUTDOWN_SECONDS", std::to_string(s.shutdown_grace_seconds), "must be >= 0");
  if (not_implemented) throw std::invalid_argument(*not_implemented);
  // One script decides a call's counters all or nothing; on a cluster they would span slots,
  // and every call of several descriptors would fail.
  if (s.all_or_nothing && s.redis_type == "cluster" && s.storage == "backend")
    throw std::invalid_argument(
        "RATELIMIT_SERVER_ALL_OR_NOTHING = true: not with REDIS_TYPE = cluster (a call's "
        "counters live on several slots, which one all-or-nothing script cannot reach)");
  check_counting_modes(s.all_or_nothing, s.stop_increment_when_over);
  // The mogrifiers' own variables, named after each mogrifier (envconfig's prefix in upper case,
  // src/godogstats/mogrifier_map.go): the table's template rows describe them.
  if (s.use_dog_statsd) {
    const SettingRow* tags_row = nullptr;
    for (const SettingRow& r : rows)
      if (r.name == "EXTRA_TAGS") tags_row = &r;
    for (const std::string& label : s.dog_statsd_mogrifiers) {
      std::string prefix = "DOG_STATSD_MOGRIFIER_" + label + "_";
      for (char& c : prefix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      Settings::DogMogrifier m{
          label, env(prefix + "PATTERN").value_or(""), env(prefix + "NAME").value_or(""), {}};
      if (m.pattern.empty()) bad(prefix + "PATTERN", "", "missing for the mogrifier " + label);
      if (m.name.empty()) bad(prefix + "NAME", "", "missing for the mogrifier " + label);
      if (const auto tags = env(prefix + "TAGS"); tags && tags_row != nullptr) {
        Settings parsed;
        apply(*tags_row, parsed, prefix + "TAGS", *tags);
        m.tags = std::move(parsed.extra_tags);
      }
      s.dog_statsd_mogrifier_sets.push_back(std::move(m));
    }
  }
  return s;
}

namespace {

#ifdef RATELIMIT_SERVER_HAVE_REDIS
/// "host:port" as the reference's REDIS_URL writes it.
std::pair<std::string, int> host_port(const std::string& name, const std::string& v) {
  const auto colon = v.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw std::invalid_argument(name + " = \"" + v + "\": expected host:port");
  std::int64_t port = 0;
  try {
    port = parse_int(name, v.substr(colon + 1), 10);
  } catch (const std::invalid_argument&) {
    port = 0;
  }
  if (port < 1 || port > 65535)
    throw std::invalid_argument(name + " = \"" + v + "\": expected host:port (port 1 to 65535)");
  // "[::1]:6379": the address without its brackets.
  std::string host = v.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return {host, static_cast<int>(port)};
}

/// The options of the Redis `s` names; `prefix` names its variables in errors ("REDIS_", or
/// "REDIS_PERSECOND_" for `per_second_view`'s).
RedisOptions redis_options(const Settings& s, const std::string& prefix = "REDIS_") {
  const std::string url_name = prefix + "URL";
  RedisOptions o;
  if (s.redis_type == "sentinel") {
    // "master,host:port,host:port", as the reference's REDIS_URL for sentinel.
    std::vector<std::string> parts;
    std::string::size_type start = 0;
    while (start <= s.redis_url.size()) {
      const auto comma = s.redis_url.find(',', start);
      parts.push_back(s.redis_url.substr(
          start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    if (parts.size() < 2)
      throw std::invalid_argument(url_name + " = \"" + s.redis_url + "\": " + prefix +
                                  "TYPE=sentinel expects master,host:port,...");
    o.sentinel.master_name = parts[0];
    for (std::size_t i = 1; i < parts.size(); ++i) {
      (void)host_port(url_name, parts[i]);
      o.sentinel.sentinels.push_back(parts[i]);
    }
  } else if (s.redis_type == "cluster") {
    // The seeds are read by make_counters.
  } else if (s.redis_socket_type == "unix") {
    o.unix_socket = s.redis_url;
  } else {
    std::tie(o.host, o.port) = host_port(url_name, s.redis_url);
  }
  // "password" or "user:password", as Go's createDialer cuts it.
  const auto auth = [](const std::string& a) -> std::pair<std::string, std::string> {
    const auto colon = a.find(':');
    if (colon == std::string::npos) return {"", a};
    return {a.substr(0, colon), a.substr(colon + 1)};
  };
  if (!s.redis_auth.empty()) std::tie(o.username, o.password) = auth(s.redis_auth);
  if (!s.redis_sentinel_auth.empty())
    std::tie(o.sentinel.username, o.sentinel.password) = auth(s.redis_sentinel_auth);
  o.tls.enabled = s.redis_tls;
  o.tls.ca_file = s.redis_tls_cacert;
  o.tls.cert_file = s.redis_tls_client_cert;
  o.tls.key_file = s.redis_tls_client_key;
  o.pool_size = static_cast<std::size_t>(std::clamp<std::int64_t>(s.redis_pool_size, 1, 64));
  // Go's REDIS_TIMEOUT bounds the dial and each read and write; 0 (no bound in Go) is 10 s.
  const auto timeout =
      s.redis_timeout.count() == 0
          ? std::chrono::milliseconds{10'000}
          : std::max(std::chrono::milliseconds{1},
                     std::chrono::duration_cast<std::chrono::milliseconds>(s.redis_timeout));
  o.connect_timeout = timeout;
  o.command_timeout = timeout;
  // Go has no circuit breaker: a call on a broken connection fails and the next one dials
  // again. Every call the breaker refuses is an error here, so it opens briefly: a dropped
  // connection costs at most 10 ms of refused calls, and once Redis answers again the next
  // probe is at most 100 ms away (the library's 100 ms doubling to 2 s refused the first
  // calls for up to 2 s after a restart). Not shorter: a cluster client re-reads the slot map
  // at most once per back-off after a node fails.
  o.breaker_backoff = std::chrono::milliseconds{10};
  o.breaker_max_backoff = std::chrono::milliseconds{100};
  o.key_prefix = "ratelimit_server:";
  return o;
}
#endif

}  // namespace

#ifdef RATELIMIT_SERVER_HAVE_REDIS
RedisOptions redis_options_of(const Settings& settings) { return redis_options(settings); }
#endif

#ifdef RATELIMIT_SERVER_HAVE_REDIS
namespace {

/// The per-second Redis's settings in the main Redis's fields (REDIS_PERSECOND_* read as the
/// REDIS_ ones; the TLS files are shared, as in the Go service).
Settings per_second_view(const Settings& s) {
  Settings p = s;
  p.redis_url = s.redis_persecond_url;
  p.redis_socket_type = s.redis_persecond_socket_type;
  p.redis_type = s.redis_persecond_type;
  p.redis_auth = s.redis_persecond_auth;
  p.redis_sentinel_auth = s.redis_persecond_sentinel_auth;
  p.redis_tls = s.redis_persecond_tls;
  p.redis_pool_size = s.redis_persecond_pool_size;
  p.redis_timeout = s.redis_persecond_timeout;
  return p;
}

/// "host:port,host:port": the seeds of a cluster, as the reference's REDIS_URL for a cluster.
RedisClusterOptions cluster_options(const Settings& s, const std::string& prefix) {
  RedisClusterOptions c;
  c.seeds.clear();
  std::string::size_type start = 0;
  while (start <= s.redis_url.size()) {
    const auto comma = s.redis_url.find(',', start);
    std::string seed =
        s.redis_url.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    (void)host_port(prefix + "URL", seed);
    c.seeds.push_back(std::move(seed));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  c.redis = redis_options(s, prefix);
  return c;
}

}  // namespace
#endif

std::shared_ptr<Counters> make_counters(const Settings& s, std::shared_ptr<Listener> listener) {
  GoKeyOptions go{s.cache_key_prefix, s.expiration_jitter_max_seconds};
  if (s.storage == "memory") return make_memory_counters(std::move(go));
  if (s.backend_type == "memcache") {
    MemcacheOptions m;
    m.servers = s.memcache_host_port;
    m.max_idle_conns = static_cast<int>(std::min<std::int64_t>(s.memcache_max_idle_conns, 1024));
    return make_memcache_counters(std::move(m), std::move(go));
  }
#ifdef RATELIMIT_SERVER_HAVE_REDIS
  PerSecondRedis per_second;
  if (s.redis_persecond) {
    const Settings p = per_second_view(s);
    if (p.redis_type == "cluster")
      per_second.cluster =
          std::make_shared<RedisClusterOptions>(cluster_options(p, "REDIS_PERSECOND_"));
    else
      per_second.redis = std::make_shared<RedisOptions>(redis_options(p, "REDIS_PERSECOND_"));
  }
  if (s.redis_type != "cluster")
    return make_redis_counters(redis_options(s), std::move(listener), std::move(go),
                               std::move(per_second));
  return make_redis_cluster_counters(cluster_options(s, "REDIS_"), std::move(listener),
                                     std::move(go), std::move(per_second));
#else
  (void)listener;
  throw std::invalid_argument(
      "REDIS_URL: this build of the server has no Redis storage "
      "(hiredis or OpenSSL was not found)");
#endif
}

std::vector<std::filesystem::path> rules_files(const std::filesystem::path& dir,
                                               bool ignore_dotfiles) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return out;
  for (auto it = std::filesystem::recursive_directory_iterator(
           dir, std::filesystem::directory_options::follow_directory_symlink, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const auto& p = it->path();
    const std::string name = p.filename().string();
    if (ignore_dotfiles && !name.empty() && name[0] == '.') {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec)) continue;
    const auto ext = p.extension().string();
    if (ext == ".yaml" || ext == ".yml") out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ratelimit::server
