#include "settings.hpp"

#include "counters.hpp"

#ifdef RATELIMIT_SERVER_HAVE_REDIS
#include <ratelimit/redis/cluster.hpp>
#include <ratelimit/redis/options.hpp>
#endif

#include <algorithm>
#include <cctype>
#include <map>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <utility>

namespace ratelimit::server {
namespace {

bool parse_bool(const std::string& name, const std::string& v) {
  // Go's strconv.ParseBool, which the reference's envconfig uses.
  if (v == "1" || v == "t" || v == "T" || v == "true" || v == "TRUE" || v == "True") return true;
  if (v == "0" || v == "f" || v == "F" || v == "false" || v == "FALSE" || v == "False")
    return false;
  throw std::invalid_argument(name + " = \"" + v + "\": not a boolean (true or false)");
}

int parse_port(const std::string& name, const std::string& v) {
  std::size_t used = 0;
  int port = -1;
  try {
    port = std::stoi(v, &used);
  } catch (const std::exception&) {
  }
  if (used != v.size() || port < 0 || port > 65535)
    throw std::invalid_argument(name + " = \"" + v + "\": not a port (0 to 65535)");
  return port;
}

/// Go's time.ParseDuration: a sequence of decimal numbers with a unit each ("300ms", "1h30m",
/// "1.5s"; units ns, us, µs, ms, s, m, h), optionally signed, or "0".
std::chrono::nanoseconds parse_go_duration(const std::string& name, const std::string& v) {
  const auto bad = [&] {
    return std::invalid_argument(name + " = \"" + v +
                                 "\": not a Go duration (e.g. 500ms, 1s, 1h30m)");
  };
  std::size_t i = 0;
  bool negative = false;
  if (i < v.size() && (v[i] == '-' || v[i] == '+')) negative = v[i++] == '-';
  if (v.substr(i) == "0") return std::chrono::nanoseconds{0};
  if (i == v.size()) throw bad();
  long double total = 0;
  while (i < v.size()) {
    const std::size_t start = i;
    while (i < v.size() && (std::isdigit(static_cast<unsigned char>(v[i])) || v[i] == '.')) ++i;
    if (i == start) throw bad();
    long double number = 0;
    try {
      std::size_t used = 0;
      number = std::stold(v.substr(start, i - start), &used);
      if (used != i - start) throw bad();
    } catch (const std::invalid_argument&) {
      throw bad();
    }
    const std::size_t unit_start = i;
    while (i < v.size() && !std::isdigit(static_cast<unsigned char>(v[i])) && v[i] != '.') ++i;
    const std::string unit = v.substr(unit_start, i - unit_start);
    long double scale = 0;
    if (unit == "ns")
      scale = 1;
    else if (unit == "us" || unit == "\u00b5s" || unit == "\u03bcs")
      scale = 1e3L;
    else if (unit == "ms")
      scale = 1e6L;
    else if (unit == "s")
      scale = 1e9L;
    else if (unit == "m")
      scale = 60e9L;
    else if (unit == "h")
      scale = 3600e9L;
    else
      throw bad();
    total += number * scale;
  }
  if (total > 9.2e18L) throw bad();
  const auto ns = static_cast<std::int64_t>(total);
  return std::chrono::nanoseconds{negative ? -ns : ns};
}

/// envconfig's map form: "k1:v1,k2:v2" (empty: no entry).
std::map<std::string, std::string> parse_map(const std::string& name, const std::string& v) {
  std::map<std::string, std::string> out;
  std::size_t start = 0;
  while (start < v.size()) {
    auto comma = v.find(',', start);
    if (comma == std::string::npos) comma = v.size();
    const std::string pair = v.substr(start, comma - start);
    const auto colon = pair.find(':');
    if (colon == std::string::npos)
      throw std::invalid_argument(name + " = \"" + v + "\": \"" + pair +
                                  "\" is not key:value (expected k1:v1,k2:v2)");
    out[pair.substr(0, colon)] = pair.substr(colon + 1);
    start = comma + 1;
  }
  return out;
}

/// A setting of ours: how to store its value.
using Apply = void (*)(Settings&, const std::string& name, const std::string& value);

const std::map<std::string, Apply, std::less<>>& ours() {
  static const std::map<std::string, Apply, std::less<>> table{
      {"GRPC_HOST", [](Settings& s, const std::string&, const std::string& v) { s.grpc_host = v; }},
      {"GRPC_PORT", [](Settings& s, const std::string& n,
                       const std::string& v) { s.grpc_port = parse_port(n, v); }},
      {"HOST", [](Settings& s, const std::string&, const std::string& v) { s.http_host = v; }},
      {"PORT", [](Settings& s, const std::string& n,
                  const std::string& v) { s.http_port = parse_port(n, v); }},
      {"RUNTIME_ROOT",
       [](Settings& s, const std::string&, const std::string& v) { s.runtime_root = v; }},
      {"RUNTIME_SUBDIRECTORY",
       [](Settings& s, const std::string&, const std::string& v) { s.runtime_subdirectory = v; }},
      {"RUNTIME_APPDIRECTORY",
       [](Settings& s, const std::string&, const std::string& v) { s.runtime_appdirectory = v; }},
      {"RUNTIME_WATCH_ROOT", [](Settings& s, const std::string& n,
                                const std::string& v) { s.runtime_watch_root = parse_bool(n, v); }},
      {"RUNTIME_IGNOREDOTFILES",
       [](Settings& s, const std::string& n, const std::string& v) {
         s.runtime_ignore_dotfiles = parse_bool(n, v);
       }},
      {"MERGE_DOMAIN_CONFIG",
       [](Settings& s, const std::string& n, const std::string& v) {
         s.merge_domain_config = parse_bool(n, v);
       }},
      {"SHADOW_MODE", [](Settings& s, const std::string& n,
                         const std::string& v) { s.shadow_mode = parse_bool(n, v); }},
      {"RESPONSE_HEADERS_ENABLED",
       [](Settings& s, const std::string& n, const std::string& v) {
         s.response_headers = parse_bool(n, v);
       }},
      {"HEADER_RATELIMIT_LIMIT",
       [](Settings& s, const std::string&, const std::string& v) { s.limit_header = v; }},
      {"HEADER_RATELIMIT_REMAINING",
       [](Settings& s, const std::string&, const std::string& v) { s.remaining_header = v; }},
      {"HEADER_RATELIMIT_RESET",
       [](Settings& s, const std::string&, const std::string& v) { s.reset_header = v; }},
      {"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
       [](Settings& s, const std::string& n, const std::string& v) {
         s.healthy_with_config_only = parse_bool(n, v);
       }},
      {"LOG_LEVEL", [](Settings& s, const std::string&, const std::string& v) { s.log_level = v; }},
      {"LOG_FORMAT",
       [](Settings&, const std::string& n, const std::string& v) {
         if (v != "text" && v != "json")
           throw std::invalid_argument(n + " = \"" + v + "\": expected text or json");
       }},
      {"REDIS_URL", [](Settings& s, const std::string&, const std::string& v) { s.redis_url = v; }},
      {"REDIS_SOCKET_TYPE",
       [](Settings& s, const std::string& n, const std::string& v) {
         if (v != "tcp" && v != "unix")
           throw std::invalid_argument(n + " = \"" + v + "\": expected tcp or unix");
         s.redis_socket_type = v;
       }},
      {"REDIS_TYPE",
       [](Settings& s, const std::string& n, const std::string& v) {
         std::string lower = v;
         for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
         if (lower != "single" && lower != "sentinel" && lower != "cluster")
           throw std::invalid_argument(n + " = \"" + v +
                                       "\": expected single, sentinel or cluster");
         s.redis_type = lower;
       }},
      {"REDIS_AUTH",
       [](Settings& s, const std::string&, const std::string& v) { s.redis_auth = v; }},
      {"REDIS_TLS", [](Settings& s, const std::string& n,
                       const std::string& v) { s.redis_tls = parse_bool(n, v); }},
      {"REDIS_TLS_CACERT",
       [](Settings& s, const std::string&, const std::string& v) { s.redis_tls_cacert = v; }},
      {"REDIS_TLS_CLIENT_CERT",
       [](Settings& s, const std::string&, const std::string& v) { s.redis_tls_client_cert = v; }},
      {"REDIS_TLS_CLIENT_KEY",
       [](Settings& s, const std::string&, const std::string& v) { s.redis_tls_client_key = v; }},
      {"REDIS_POOL_SIZE",
       [](Settings& s, const std::string& n, const std::string& v) {
         const int size = parse_port(n, v);
         if (size < 1 || size > 64)
           throw std::invalid_argument(n + " = " + v + ": must be 1 to 64");
         s.redis_pool_size = size;
       }},
      // The reference's switches, accepted at the values this server implements.
      {"BACKEND_TYPE",
       [](Settings&, const std::string& n, const std::string& v) {
         if (v != "redis")
           throw std::invalid_argument(n + " = \"" + v +
                                       "\": this server implements only redis (with REDIS_URL "
                                       "unset, the counters stay in this process)");
       }},
      // Stats (stats/): the reference's variables.
      {"USE_STATSD", [](Settings& s, const std::string& n,
                        const std::string& v) { s.use_statsd = parse_bool(n, v); }},
      {"STATSD_HOST", [](Settings& s, const std::string&, const std::string& v) { s.statsd_host = v; }},
      {"STATSD_PORT", [](Settings& s, const std::string& n,
                         const std::string& v) { s.statsd_port = parse_port(n, v); }},
      {"STATSD_PROTOCOL",
       [](Settings& s, const std::string& n, const std::string& v) {
         if (v != "tcp" && v != "udp")
           throw std::invalid_argument(n + " = \"" + v + "\": expected tcp or udp");
         s.statsd_udp = v == "udp";
       }},
      {"STATS_FLUSH_INTERVAL",
       [](Settings& s, const std::string& n, const std::string& v) {
         const auto d = parse_go_duration(n, v);
         if (d < std::chrono::milliseconds{1})
           throw std::invalid_argument(n + " = \"" + v + "\": must be at least 1ms");
         s.stats_flush_interval = std::chrono::duration_cast<std::chrono::milliseconds>(d);
       }},
      // gostats' own setting: like the reference, which flushes its counters every
      // STATS_FLUSH_INTERVAL, this server checks it and goes by STATS_FLUSH_INTERVAL.
      {"GOSTATS_FLUSH_INTERVAL_SECONDS",
       [](Settings&, const std::string& n, const std::string& v) { (void)parse_port(n, v); }},
      {"EXTRA_TAGS", [](Settings& s, const std::string& n,
                        const std::string& v) { s.extra_tags = parse_map(n, v); }},
      {"DISABLE_STATS", [](Settings& s, const std::string& n,
                           const std::string& v) { s.disable_stats = parse_bool(n, v); }},
      {"USE_DOG_STATSD", [](Settings& s, const std::string& n,
                            const std::string& v) { s.use_dog_statsd = parse_bool(n, v); }},
      {"USE_DOG_STATSD_MOGRIFIERS",
       [](Settings& s, const std::string&, const std::string& v) {
         s.dog_statsd_mogrifiers.clear();
         std::size_t start = 0;
         while (start < v.size()) {
           auto comma = v.find(',', start);
           if (comma == std::string::npos) comma = v.size();
           if (comma > start) s.dog_statsd_mogrifiers.push_back({v.substr(start, comma - start), {}, {}, {}});
           start = comma + 1;
         }
       }},
      {"USE_PROMETHEUS", [](Settings& s, const std::string& n,
                            const std::string& v) { s.use_prometheus = parse_bool(n, v); }},
      {"PROMETHEUS_ADDR",
       [](Settings& s, const std::string&, const std::string& v) { s.prometheus_addr = v; }},
      {"PROMETHEUS_PATH",
       [](Settings& s, const std::string& n, const std::string& v) {
         if (v.empty() || v[0] != '/')
           throw std::invalid_argument(n + " = \"" + v + "\": expected a path starting with /");
         s.prometheus_path = v;
       }},
      {"PROMETHEUS_MAPPER_YAML",
       [](Settings& s, const std::string&, const std::string& v) { s.prometheus_mapper_yaml = v; }},
      {"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
       [](Settings& s, const std::string& n, const std::string& v) {
         s.prometheus_response_time_as_ms = parse_bool(n, v);
       }},
      {"DEBUG_HOST", [](Settings& s, const std::string&, const std::string& v) { s.debug_host = v; }},
      {"DEBUG_PORT", [](Settings& s, const std::string& n,
                        const std::string& v) { s.debug_port = parse_port(n, v); }},
      {"LOCAL_CACHE_SIZE_IN_BYTES",
       [](Settings& s, const std::string& n, const std::string& v) {
         std::size_t used = 0;
         long long bytes = -1;
         try {
           bytes = std::stoll(v, &used);
         } catch (const std::exception&) {
         }
         if (used != v.size() || bytes < 0 || bytes > (1LL << 40))
           throw std::invalid_argument(n + " = \"" + v + "\": not a size in bytes (0 to 2^40)");
         s.local_cache_bytes = static_cast<std::size_t>(bytes);
       }},
      {"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
       [](Settings& s, const std::string& n, const std::string& v) {
         s.stop_increment_when_over = parse_bool(n, v);
       }},
      {"RATELIMIT_SERVER_ALL_OR_NOTHING",
       [](Settings& s, const std::string& n, const std::string& v) {
         s.all_or_nothing = parse_bool(n, v);
       }},
      // --- Answers and health as the reference's (service, health, start-up wait) ---
      {"LIMIT_RESPONSE_HEADERS_ENABLED",
       [](Settings& s, const std::string& n, const std::string& v) {
         s.response_headers = parse_bool(n, v);
       }},
      {"LIMIT_LIMIT_HEADER",
       [](Settings& s, const std::string&, const std::string& v) { s.limit_header = v; }},
      {"LIMIT_REMAINING_HEADER",
       [](Settings& s, const std::string&, const std::string& v) { s.remaining_header = v; }},
      {"LIMIT_RESET_HEADER",
       [](Settings& s, const std::string&, const std::string& v) { s.reset_header = v; }},
      {"RESPONSE_DYNAMIC_METADATA",
       [](Settings& s, const std::string& n, const std::string& v) {
         s.response_dynamic_metadata = parse_bool(n, v);
       }},
      {"QUOTA_MODE", [](Settings& s, const std::string& n,
                        const std::string& v) { s.quota_mode = parse_bool(n, v); }},
      {"NEAR_LIMIT_RATIO",
       [](Settings& s, const std::string& n, const std::string& v) {
         std::size_t used = 0;
         float ratio = -1;
         try {
           ratio = std::stof(v, &used);
         } catch (const std::exception&) {
         }
         if (used != v.size() || !(ratio >= 0 && ratio <= 1))
           throw std::invalid_argument(n + " = \"" + v + "\": not a ratio (0 to 1)");
         s.near_limit_ratio = ratio;
       }},
      {"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
       [](Settings& s, const std::string& n, const std::string& v) {
         s.redis_health_check_active_connection = parse_bool(n, v);
       }},
      {"REDIS_STARTUP_INITIAL_INTERVAL",
       [](Settings& s, const std::string& n, const std::string& v) {
         s.startup.initial_interval = parse_go_duration(n, v);
       }},
      {"REDIS_STARTUP_MAX_INTERVAL",
       [](Settings& s, const std::string& n, const std::string& v) {
         s.startup.max_interval = parse_go_duration(n, v);
       }},
      {"REDIS_STARTUP_MAX_ELAPSED_TIME",
       [](Settings& s, const std::string& n, const std::string& v) {
         s.startup.max_elapsed = parse_go_duration(n, v);
       }},
      // --- end of answers and health ---
      {"GRACEFUL_SHUTDOWN_SECONDS",
       [](Settings& s, const std::string& n, const std::string& v) {
         s.shutdown_grace = std::chrono::seconds{parse_port(n, v)};
       }},
  };
  return table;
}

/// Prefixes of the reference's variables: such a variable that is not ours is refused rather
/// than silently ignored.
/// (gRPC's own GRPC_VERBOSITY, GRPC_TRACE and the like stay gRPC's: only the reference's
/// GRPC_SERVER_*, GRPC_CLIENT_* and GRPC_MAX_CONNECTION_* are its settings.)
constexpr std::string_view reference_prefixes[] = {"REDIS_",
                                                   "RUNTIME_",
                                                   "MEMCACHE_",
                                                   "STATSD_",
                                                   "DEBUG_",
                                                   "TRACING_",
                                                   "GOSTATS_",
                                                   "HEADER_RATELIMIT_",
                                                   "GRPC_SERVER_",
                                                   "GRPC_CLIENT_",
                                                   "GRPC_MAX_CONNECTION_",
                                                   "CONFIG_"};

/// The prefix of this server's own variables (not the reference's): an unknown one is refused.
constexpr std::string_view own_prefix = "RATELIMIT_SERVER_";

bool has_reference_prefix(std::string_view name) {
  return std::any_of(std::begin(reference_prefixes), std::end(reference_prefixes),
                     [&](std::string_view p) { return name.substr(0, p.size()) == p; });
}

}  // namespace

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
  const auto& table = ours();
  for (const std::string& name : environment_names) {
    const auto it = table.find(name);
    if (it == table.end()) {
      if (name.rfind(own_prefix, 0) == 0)
        throw std::invalid_argument(name + ": not a setting of this server (its own are " +
                                    std::string(own_prefix) +
                                    "ALL_OR_NOTHING and those of server/README.md)");
      if (has_reference_prefix(name))
        throw std::invalid_argument(
            name +
            ": a setting of Envoy's rate limit service that this server does not "
            "implement (see server/README.md for the ones it does)");
      continue;
    }
    if (const auto v = env(name)) it->second(s, name, *v);
  }
  for (const std::string& arg : args) {
    if (arg.rfind("--", 0) != 0 || arg.find('=') == std::string::npos)
      throw std::invalid_argument("argument \"" + arg + "\": expected --name=value");
    const auto eq = arg.find('=');
    std::string name = arg.substr(2, eq - 2);
    for (char& c : name) c = c == '-' ? '_' : static_cast<char>(std::toupper(c));
    const auto it = table.find(name);
    if (it == table.end())
      throw std::invalid_argument("flag " + arg.substr(0, eq) + ": not a setting of this server");
    it->second(s, "--" + arg.substr(2, eq - 2), arg.substr(eq + 1));
  }
  // One script decides a call's counters all or nothing; on a cluster they would span slots,
  // and every call of several descriptors would fail.
  if (s.all_or_nothing && s.redis_type == "cluster" && !s.redis_url.empty())
    throw std::invalid_argument(
        "RATELIMIT_SERVER_ALL_OR_NOTHING = true: not with REDIS_TYPE = cluster (a call's "
        "counters live on several slots, which one all-or-nothing script cannot reach)");
  check_counting_modes(s.all_or_nothing, s.stop_increment_when_over);
  // The reference's stats sinks (src/service_cmd/runner/runner.go): one at most, unless
  // DISABLE_STATS; USE_STATSD is on by default, so another sink needs USE_STATSD=false.
  if (!s.disable_stats && int{s.use_statsd} + int{s.use_dog_statsd} + int{s.use_prometheus} > 1)
    throw std::invalid_argument(
        "USE_STATSD, USE_DOG_STATSD, USE_PROMETHEUS: only one stats sink at a time (USE_STATSD "
        "is true by default: set USE_STATSD=false to use another)");
  for (Settings::Mogrifier& m : s.dog_statsd_mogrifiers) {
    // envconfig's names: the prefix in upper case (src/godogstats/mogrifier_map.go).
    std::string prefix = "DOG_STATSD_MOGRIFIER_" + m.label + "_";
    for (char& c : prefix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    m.pattern = env(prefix + "PATTERN").value_or("");
    m.name = env(prefix + "NAME").value_or("");
    if (m.pattern.empty())
      throw std::invalid_argument(prefix + "PATTERN: missing for the mogrifier " + m.label);
    if (m.name.empty())
      throw std::invalid_argument(prefix + "NAME: missing for the mogrifier " + m.label);
    if (const auto tags = env(prefix + "TAGS")) m.tags = parse_map(prefix + "TAGS", *tags);
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
  const int port = parse_port(name, v.substr(colon + 1));
  if (port == 0) throw std::invalid_argument(name + " = \"" + v + "\": port 0");
  return {v.substr(0, colon), port};
}

RedisOptions redis_options(const Settings& s) {
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
      throw std::invalid_argument("REDIS_URL = \"" + s.redis_url +
                                  "\": REDIS_TYPE=sentinel expects master,host:port,...");
    o.sentinel.master_name = parts[0];
    for (std::size_t i = 1; i < parts.size(); ++i) {
      (void)host_port("REDIS_URL", parts[i]);
      o.sentinel.sentinels.push_back(parts[i]);
    }
  } else if (s.redis_type == "cluster") {
    // The seeds are read by make_counters.
  } else if (s.redis_socket_type == "unix") {
    o.unix_socket = s.redis_url;
  } else {
    std::tie(o.host, o.port) = host_port("REDIS_URL", s.redis_url);
  }
  if (!s.redis_auth.empty()) {
    const auto colon = s.redis_auth.find(':');
    if (colon == std::string::npos) {
      o.password = s.redis_auth;
    } else {
      o.username = s.redis_auth.substr(0, colon);
      o.password = s.redis_auth.substr(colon + 1);
    }
  }
  o.tls.enabled = s.redis_tls;
  o.tls.ca_file = s.redis_tls_cacert;
  o.tls.cert_file = s.redis_tls_client_cert;
  o.tls.key_file = s.redis_tls_client_key;
  o.pool_size = static_cast<std::size_t>(s.redis_pool_size);
  o.key_prefix = "ratelimit_server:";
  return o;
}
#endif

}  // namespace

std::shared_ptr<Counters> make_counters(const Settings& s, std::shared_ptr<Listener> listener) {
  if (s.redis_url.empty()) return make_memory_counters();
#ifdef RATELIMIT_SERVER_HAVE_REDIS
  RedisOptions o = redis_options(s);
  if (s.redis_type != "cluster") return make_redis_counters(std::move(o), std::move(listener));
  // "host:port,host:port": the seeds of the cluster, as the reference's REDIS_URL for a cluster.
  RedisClusterOptions c;
  c.seeds.clear();
  std::string::size_type start = 0;
  while (start <= s.redis_url.size()) {
    const auto comma = s.redis_url.find(',', start);
    std::string seed =
        s.redis_url.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    (void)host_port("REDIS_URL", seed);
    c.seeds.push_back(std::move(seed));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  c.redis = std::move(o);
  return make_redis_cluster_counters(std::move(c), std::move(listener));
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
