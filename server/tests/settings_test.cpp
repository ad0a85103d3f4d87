// The server's settings table against the Go service's variables: every name it reads, with
// its default, parsed as it parses them (kelseyhightower/envconfig v1.4.0 over Go's strconv and
// time packages), and server/README.md showing the same table.

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "settings.hpp"

namespace {

namespace rs = ratelimit::server;

rs::Settings read_env(const std::map<std::string, std::string>& env,
                      const std::vector<std::string>& args = {}) {
  std::vector<std::string> names;
  for (const auto& [k, v] : env) names.push_back(k);
  return rs::read_settings(
      [&](const std::string& name) -> std::optional<std::string> {
        const auto it = env.find(name);
        if (it == env.end()) return std::nullopt;
        return it->second;
      },
      args, names);
}

/// Every variable of envoyproxy/ratelimit src/settings/settings.go at commit
/// f2fb15770f7fd1c88ca6c3a1b58ee513917ace96, in its order, with its `default:` tag (nullopt: no
/// tag), transcribed from the file's envconfig tags.
const std::vector<std::pair<std::string, std::optional<std::string>>> go_settings = {
    {"HOST", "0.0.0.0"},
    {"PORT", "8080"},
    {"DEBUG_HOST", "0.0.0.0"},
    {"DEBUG_PORT", "6070"},
    {"GRPC_UDS", ""},
    {"GRPC_HOST", "0.0.0.0"},
    {"GRPC_PORT", "8081"},
    {"GRPC_MAX_CONNECTION_AGE", "24h"},
    {"GRPC_MAX_CONNECTION_AGE_GRACE", "1h"},
    {"GRPC_SERVER_USE_TLS", "false"},
    {"GRPC_SERVER_TLS_CERT", ""},
    {"GRPC_SERVER_TLS_KEY", ""},
    {"GRPC_CLIENT_TLS_CACERT", ""},
    {"GRPC_CLIENT_TLS_SAN", ""},
    {"LOG_LEVEL", "WARN"},
    {"LOG_FORMAT", "text"},
    {"CONFIG_TYPE", "FILE"},
    {"FORCE_START_WITHOUT_INITIAL_CONFIG", "false"},
    {"CONFIG_GRPC_XDS_NODE_ID", "default"},
    {"CONFIG_GRPC_XDS_NODE_METADATA", ""},
    {"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"},
    {"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s"},
    {"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", ""},
    {"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false"},
    {"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", ""},
    {"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", ""},
    {"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ""},
    {"CONFIG_GRPC_XDS_SERVER_TLS_SAN", ""},
    {"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s"},
    {"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s"},
    {"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5"},
    {"XDS_CLIENT_BACKOFF_JITTER", "true"},
    {"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", ""},
    {"USE_DOG_STATSD", "false"},
    {"USE_DOG_STATSD_MOGRIFIERS", ""},
    {"USE_STATSD", "true"},
    {"STATSD_HOST", "localhost"},
    {"STATSD_PORT", "8125"},
    {"EXTRA_TAGS", ""},
    {"STATS_FLUSH_INTERVAL", "10s"},
    {"DISABLE_STATS", "false"},
    {"USE_PROMETHEUS", "false"},
    {"PROMETHEUS_ADDR", ":9090"},
    {"PROMETHEUS_PATH", "/metrics"},
    {"PROMETHEUS_MAPPER_YAML", ""},
    {"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "false"},
    {"RUNTIME_ROOT", "/srv/runtime_data/current"},
    {"RUNTIME_SUBDIRECTORY", std::nullopt},
    {"RUNTIME_APPDIRECTORY", "config"},
    {"RUNTIME_IGNOREDOTFILES", "false"},
    {"RUNTIME_WATCH_ROOT", "true"},
    {"EXPIRATION_JITTER_MAX_SECONDS", "300"},
    {"LOCAL_CACHE_SIZE_IN_BYTES", "0"},
    {"NEAR_LIMIT_RATIO", "0.8"},
    {"CACHE_KEY_PREFIX", ""},
    {"BACKEND_TYPE", "redis"},
    {"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false"},
    {"LIMIT_RESPONSE_HEADERS_ENABLED", "false"},
    {"LIMIT_LIMIT_HEADER", "RateLimit-Limit"},
    {"LIMIT_REMAINING_HEADER", "RateLimit-Remaining"},
    {"LIMIT_RESET_HEADER", "RateLimit-Reset"},
    {"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false"},
    {"REDIS_SOCKET_TYPE", "unix"},
    {"REDIS_TYPE", "SINGLE"},
    {"REDIS_URL", "/var/run/nutcracker/ratelimit.sock"},
    {"REDIS_POOL_SIZE", "10"},
    {"REDIS_AUTH", ""},
    {"REDIS_TLS", "false"},
    {"REDIS_TLS_CLIENT_CERT", ""},
    {"REDIS_TLS_CLIENT_KEY", ""},
    {"REDIS_TLS_CACERT", ""},
    {"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false"},
    {"REDIS_PIPELINE_WINDOW", "0"},
    {"REDIS_PIPELINE_LIMIT", "0"},
    {"REDIS_CLUSTER_PIPELINE_PARALLELISM", "1"},
    {"REDIS_PERSECOND", "false"},
    {"REDIS_PERSECOND_SOCKET_TYPE", "unix"},
    {"REDIS_PERSECOND_TYPE", "SINGLE"},
    {"REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock"},
    {"REDIS_PERSECOND_POOL_SIZE", "10"},
    {"REDIS_PERSECOND_AUTH", ""},
    {"REDIS_PERSECOND_TLS", "false"},
    {"REDIS_SENTINEL_AUTH", ""},
    {"REDIS_PERSECOND_SENTINEL_AUTH", ""},
    {"REDIS_PERSECOND_PIPELINE_WINDOW", "0"},
    {"REDIS_PERSECOND_PIPELINE_LIMIT", "0"},
    {"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "1"},
    {"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false"},
    {"REDIS_TIMEOUT", "10s"},
    {"REDIS_PERSECOND_TIMEOUT", "10s"},
    {"REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT"},
    {"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "WAIT"},
    {"REDIS_STARTUP_INITIAL_INTERVAL", "1s"},
    {"REDIS_STARTUP_MAX_INTERVAL", "30s"},
    {"REDIS_STARTUP_MAX_ELAPSED_TIME", "0"},
    {"MEMCACHE_HOST_PORT", ""},
    {"MEMCACHE_MAX_IDLE_CONNS", "2"},
    {"MEMCACHE_SRV", ""},
    {"MEMCACHE_SRV_REFRESH", "0"},
    {"MEMCACHE_TLS", "false"},
    {"MEMCACHE_TLS_CLIENT_CERT", ""},
    {"MEMCACHE_TLS_CLIENT_KEY", ""},
    {"MEMCACHE_TLS_CACERT", ""},
    {"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "false"},
    {"SHADOW_MODE", "false"},
    {"QUOTA_MODE", "false"},
    {"RESPONSE_DYNAMIC_METADATA", "false"},
    {"MERGE_DOMAIN_CONFIG", "false"},
    {"TRACING_ENABLED", "false"},
    {"TRACING_SERVICE_NAME", "RateLimit"},
    {"TRACING_SERVICE_NAMESPACE", ""},
    {"TRACING_SERVICE_INSTANCE_ID", ""},
    {"TRACING_EXPORTER_PROTOCOL", "http"},
    {"TRACING_SAMPLING_RATE", "1"},
};

/// Read by other code the Go service runs, each with where it is read.
const std::vector<std::string> go_other_names = {
    // lyft/gostats settings.go at 49e70f1b7932d146fecd991be04f8e1ad235452c, GetSettings (called
    // by NewTCPStatsdSink): USE_STATSD, STATSD_HOST and STATSD_PORT also, above.
    "STATSD_PROTOCOL", "GOSTATS_FLUSH_INTERVAL_SECONDS", "GOSTATS_LOGGING_SINK_DISABLED",
    // envoyproxy/ratelimit src/godogstats/mogrifier_map.go at f2fb157: envconfig.Process with the
    // prefix DOG_STATSD_MOGRIFIER_<name> for each name of USE_DOG_STATSD_MOGRIFIERS.
    "DOG_STATSD_MOGRIFIER_{NAME}_PATTERN", "DOG_STATSD_MOGRIFIER_{NAME}_TAGS",
    "DOG_STATSD_MOGRIFIER_{NAME}_NAME",
    // envoyproxy/ratelimit src/settings/settings.go before commit e9ce92c (introduced by
    // fc44670, "Pool On-Empty Behavior"): older releases.
    "REDIS_POOL_ON_EMPTY_WAIT_DURATION", "REDIS_PERSECOND_POOL_ON_EMPTY_WAIT_DURATION",
    // open-telemetry/opentelemetry-go (v1.43.0 in the Go service's go.mod), read when
    // TRACING_ENABLED=true (src/trace/trace.go): exporters/otlp/otlptrace/otlptracehttp (and
    // otlptracegrpc)/internal/otlpconfig/envconfig.go, namespace OTEL_EXPORTER_OTLP ...
    "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
    "OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CLIENT_KEY", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
    "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
    "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    // ... sdk/internal/env/env.go (the batch span processor and span limits) ...
    "OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT", "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    "OTEL_ATTRIBUTE_COUNT_LIMIT", "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_SPAN_EVENT_COUNT_LIMIT",
    "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", "OTEL_SPAN_LINK_COUNT_LIMIT",
    "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT",
    // ... sdk/trace/sampler_env.go, and sdk/resource/env.go (merged by sdk/trace/provider.go
    // WithResource: resource.Merge(resource.Environment(), r)).
    "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_SERVICE_NAME",
    // Set by Envoy Gateway's rate limit deployment; read by no Go version (ignored there).
    "GRPC_SERVER_TLS_CA_CERT"};

const rs::SettingRow* row_of(const std::string& name) {
  for (const auto& r : rs::settings_table())
    if (r.name == name) return &r;
  return nullptr;
}

std::string readme_table() {
  std::ifstream in(RATELIMIT_SERVER_README);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const std::string begin = "<!-- settings table: begin -->\n";
  const std::string end = "<!-- settings table: end -->";
  const auto b = text.find(begin);
  const auto e = text.find(end);
  if (b == std::string::npos || e == std::string::npos || e < b) return "(no table markers)";
  return text.substr(b + begin.size(), e - b - begin.size());
}

}  // namespace

TEST_CASE("Settings: every variable the Go service reads has a row, with Go's default",
          "[settings]") {
  for (const auto& [name, go_default] : go_settings) {
    INFO(name);
    const auto* r = row_of(name);
    REQUIRE(r != nullptr);
    CHECK(r->source == "settings.go");
    CHECK(r->has_default == go_default.has_value());
    if (go_default) CHECK(std::string(r->go_default) == *go_default);
  }
  for (const auto& name : go_other_names) {
    INFO(name);
    CHECK(row_of(name) != nullptr);
  }
  // Every row is one of those, or ours; none twice.
  std::set<std::string> seen;
  for (const auto& r : rs::settings_table()) {
    const std::string name(r.name);
    INFO(name);
    CHECK(seen.insert(name).second);
    const bool go = std::any_of(go_settings.begin(), go_settings.end(),
                                [&](const auto& p) { return p.first == name; }) ||
                    std::count(go_other_names.begin(), go_other_names.end(), name) > 0;
    CHECK((go || r.use == rs::SettingUse::ours));
  }
  // 114 of settings.go, 2 of older releases, 3 of gostats, 3 of godogstats, 32 of OpenTelemetry,
  // 1 of Envoy Gateway, 6 of ours (storage, all-or-nothing, shutdown grace; the check's trusted
  // proxies and actions file, the HTTP front's threads).
  CHECK(go_settings.size() == 114);
  CHECK(rs::settings_table().size() == 114 + 2 + 3 + 3 + 32 + 1 + 6);
}

TEST_CASE("Settings: server/README.md shows the code's table", "[settings]") {
  const std::string table = rs::settings_table_markdown();
  const bool same = readme_table() == table;
  if (!same) std::ofstream("settings_table.md") << table;  // to paste between the markers
  INFO(
      "server/README.md's table between its markers differs from the code's: the code's is "
      "written to settings_table.md in the test's working directory");
  CHECK(same);
}

TEST_CASE("Settings: Go's defaults with an empty environment", "[settings]") {
  const auto s = read_env({});
  CHECK(s.http_host == "0.0.0.0");
  CHECK(s.http_port == 8080);
  CHECK(s.grpc_host == "0.0.0.0");
  CHECK(s.grpc_port == 8081);
  CHECK(s.grpc_uds.empty());
  CHECK(s.grpc_max_connection_age == std::chrono::hours{24});
  CHECK(s.grpc_max_connection_age_grace == std::chrono::hours{1});
  // No REDIS_URL: Go's nutcracker socket, not counters in this process.
  CHECK(s.storage == "backend");
  CHECK(s.redis_socket_type == "unix");
  CHECK(s.redis_url == "/var/run/nutcracker/ratelimit.sock");
  CHECK(s.redis_type == "single");  // "SINGLE", read in any case
  CHECK(s.redis_pool_size == 10);
  CHECK(s.redis_timeout == std::chrono::seconds{10});
  CHECK(s.use_statsd);
  CHECK(s.near_limit_ratio == Approx(0.8));
  CHECK(s.limit_header == "RateLimit-Limit");
  CHECK(s.runtime_subdirectory.empty());
  CHECK(s.config_dir() == std::filesystem::path("/srv/runtime_data/current/config"));
  CHECK(s.xds_backoff_jitter);
  CHECK(s.xds_max_msg_size_bytes == 0);  // default:"" is the zero value
  CHECK(s.statsd_protocol == "tcp");
  CHECK(s.gostats_flush_interval_seconds == 5);
  CHECK(s.notes.empty());
}

TEST_CASE("Settings: values parse as Go's envconfig parses them", "[settings]") {
  // Durations: time.ParseDuration. 1h30m = 5400 s; 1.5s = 1500 ms; 150us = 150 000 ns;
  // 2h45m30.5s = 9930.5 s; "0" alone needs no unit.
  using namespace std::chrono;
  const auto age = [](const std::string& v) {
    return read_env({{"GRPC_MAX_CONNECTION_AGE", v}}).grpc_max_connection_age;
  };
  CHECK(age("1h30m") == seconds{5400});
  CHECK(age("1.5s") == milliseconds{1500});
  CHECK(age("150us") == nanoseconds{150'000});
  CHECK(age("150\xc2\xb5s") == nanoseconds{150'000});  // µs, U+00B5
  CHECK(age("2h45m30.5s") == milliseconds{9'930'500});
  CHECK(age("0") == nanoseconds{0});
  CHECK(age(".5m") == seconds{30});
  CHECK(age("+1m") == seconds{60});
  for (const std::string v : {"", "10", "1d", "s", "1..5s", "-", ".s", "1 s"}) {
    INFO(v);
    CHECK_THROWS_WITH(age(v), Catch::StartsWith("GRPC_MAX_CONNECTION_AGE = \"" + v + "\""));
  }
  // 2^63 ns is past time.Duration's range: 2562047h47m16.854775807s is its largest.
  CHECK(age("2562047h47m16.854775807s") == nanoseconds{INT64_MAX});
  CHECK_THROWS_WITH(age("2562048h"), Catch::Contains("out of range"));
  // Booleans: strconv.ParseBool's twelve spellings, nothing else.
  for (const std::string v : {"1", "t", "T", "TRUE", "true", "True"})
    CHECK(read_env({{"SHADOW_MODE", v}}).shadow_mode);
  for (const std::string v : {"0", "f", "F", "FALSE", "false", "False"})
    CHECK_FALSE(read_env({{"SHADOW_MODE", "1"}}, {"--shadow-mode=" + v}).shadow_mode);
  for (const std::string v : {"yes", "on", "tRUE", " true", ""})
    CHECK_THROWS_WITH(read_env({{"SHADOW_MODE", v}}),
                      Catch::StartsWith("SHADOW_MODE = \"" + v + "\": not a boolean"));
  // Integers: strconv.ParseInt(v, 0, 64): 0x1f = 31, 0o17 = 15, 017 = 15, 0b101 = 5, 1_000.
  const auto cache = [](const std::string& v) {
    return read_env({{"LOCAL_CACHE_SIZE_IN_BYTES", v}}).local_cache_bytes;
  };
  CHECK(cache("0x1f") == 31);
  CHECK(cache("0o17") == 15);
  CHECK(cache("017") == 15);
  CHECK(cache("0b101") == 5);
  CHECK(cache("1_000") == 1000);
  CHECK(cache("+7") == 7);
  for (const std::string v : {"", "08", "1_", "_1", "1__0", "1e3", "12a", "0x"}) {
    INFO(v);
    CHECK_THROWS_WITH(cache(v), Catch::StartsWith("LOCAL_CACHE_SIZE_IN_BYTES = \"" + v + "\""));
  }
  // The empty string overrides the default: text becomes empty, numbers fail.
  CHECK(read_env({{"RUNTIME_APPDIRECTORY", ""}}).runtime_appdirectory.empty());
  CHECK(read_env({{"REDIS_URL", ""}}).redis_url.empty());
  CHECK_THROWS_WITH(read_env({{"GRPC_PORT", ""}}), Catch::StartsWith("GRPC_PORT = \"\""));
  CHECK_THROWS_WITH(read_env({{"NEAR_LIMIT_RATIO", ""}}), Catch::StartsWith("NEAR_LIMIT_RATIO"));
  CHECK_THROWS_WITH(read_env({{"REDIS_TIMEOUT", ""}}), Catch::StartsWith("REDIS_TIMEOUT = \"\""));
  // gostats reads with os.Getenv: empty is its default.
  CHECK(read_env({{"GOSTATS_FLUSH_INTERVAL_SECONDS", ""}}).gostats_flush_interval_seconds == 5);
  CHECK_THROWS(read_env({{"GOSTATS_FLUSH_INTERVAL_SECONDS", "0x5"}}));  // Atoi: base 10
  // Maps k1:v1,k2:v2 (each item exactly one ':'); lists a,b; node metadata k=v.
  const auto tags = read_env({{"EXTRA_TAGS", "a:1,b:2"}}).extra_tags;
  CHECK(tags == std::map<std::string, std::string>{{"a", "1"}, {"b", "2"}});
  CHECK(read_env({{"EXTRA_TAGS", " "}}).extra_tags.empty());
  CHECK_THROWS_WITH(read_env({{"EXTRA_TAGS", "a:1:2"}}), Catch::Contains("invalid map item"));
  CHECK_THROWS_WITH(read_env({{"EXTRA_TAGS", "a"}}), Catch::Contains("invalid map item"));
  CHECK(read_env({{"MEMCACHE_HOST_PORT", "m1:11211,m2:11211"}}).memcache_host_port ==
        std::vector<std::string>{"m1:11211", "m2:11211"});
  CHECK(read_env({{"CONFIG_GRPC_XDS_NODE_METADATA", "k=v,k2=a=b,junk"}}).xds_node_metadata ==
        std::map<std::string, std::string>{{"k", "v"}, {"k2", "a=b"}});
  // Floats: strconv.ParseFloat.
  CHECK(read_env({{"TRACING_SAMPLING_RATE", ".25"}}).tracing_sampling_rate == 0.25);
  CHECK(read_env({{"NEAR_LIMIT_RATIO", "9e-1"}}).near_limit_ratio == Approx(0.9));
  CHECK_THROWS(read_env({{"NEAR_LIMIT_RATIO", "1e39"}}));  // past float32's range
  CHECK_THROWS(read_env({{"NEAR_LIMIT_RATIO", "0.8x"}}));
}

TEST_CASE("Settings: no variable is refused for its prefix; arguments are ignored", "[settings]") {
  // Kubernetes' service-link variables of a Service named redis, and of one named
  // ratelimit-server, and gRPC's own.
  const auto s = read_env({{"REDIS_SERVICE_HOST", "10.0.0.1"},
                           {"REDIS_SERVICE_PORT", "6379"},
                           {"REDIS_PORT", "tcp://10.0.0.1:6379"},
                           {"REDIS_PORT_6379_TCP", "tcp://10.0.0.1:6379"},
                           {"REDIS_PORT_6379_TCP_ADDR", "10.0.0.1"},
                           {"RATELIMIT_SERVER_SERVICE_HOST", "10.0.0.2"},
                           {"RATELIMIT_SERVER_PORT", "tcp://10.0.0.2:8081"},
                           {"RATELIMIT_SERVER_PORT_8081_TCP_PORT", "8081"},
                           {"STATSD_EXPORTER_SERVICE_HOST", "10.0.0.3"},
                           {"GRPC_VERBOSITY", "debug"},
                           {"CONFIG_MAP_NAME", "x"}},
                          {"/bin/ratelimit", "-config", "--no-such-flag=1", "--grpc-port=9001"});
  CHECK(s.grpc_port == 9001);
  // Each ignored argument gets a line, without what follows '=' (a value may be a secret).
  CHECK(std::count_if(s.notes.begin(), s.notes.end(),
                      [](const std::string& n) { return n.rfind("argument ", 0) == 0; }) == 3);
  CHECK(s.notes.size() == 3);  // the service links get none
  CHECK(std::none_of(s.notes.begin(), s.notes.end(),
                     [](const std::string& n) { return n.find("=1") != std::string::npos; }));
}

TEST_CASE("Settings: accepted, refused and ours", "[settings]") {
  // Accepted with a start-up line: Go internals that have an equivalent here.
  const auto s = read_env({{"REDIS_PIPELINE_WINDOW", "150us"},
                           {"REDIS_PIPELINE_LIMIT", "8"},
                           {"USE_STATSD", "false"},
                           {"REDIS_POOL_ON_EMPTY_BEHAVIOR", "CREATE"},
                           {"REDIS_POOL_ON_EMPTY_WAIT_DURATION", "1s"},
                           {"GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"},
                           {"TRACING_ENABLED", "true"},
                           {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318"},
                           {"BACKEND_TYPE", "redis"},
                           {"CONFIG_TYPE", "FILE"},
                           {"REDIS_PERSECOND", "false"}});
  CHECK(s.redis_pipeline_window == std::chrono::microseconds{150});
  for (const std::string name :
       {"REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        "REDIS_POOL_ON_EMPTY_WAIT_DURATION", "GRPC_SERVER_TLS_CA_CERT", "TRACING_ENABLED",
        "OTEL_EXPORTER_OTLP_ENDPOINT"}) {
    INFO(name);
    CHECK(std::count_if(s.notes.begin(), s.notes.end(), [&](const std::string& n) {
            return n.rfind(name + ": accepted; ", 0) == 0;
          }) == 1);
  }
  // USE_STATSD is honoured (the stats sinks), so it needs no line either.
  CHECK(s.notes.size() == 7);  // the variables at Go's default need no line
  // Refused by name until implemented: ignoring them would change answers.
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"MEMCACHE_SRV", "_mc._tcp.example"}, {"MEMCACHE_TLS", "true"}}) {
    INFO(name);
    CHECK_THROWS_WITH(read_env({{name, value}}),
                      Catch::StartsWith(name + " = \"" + value + "\": not implemented"));
  }
  CHECK(read_env({{"BACKEND_TYPE", ""}}).backend_type.empty());  // Go: "" is redis too
  // A value Go refuses too is named as such, not as unimplemented.
  CHECK_THROWS_WITH(read_env({{"CONFIG_TYPE", ""}}),
                    Catch::StartsWith("CONFIG_TYPE = \"\": expected FILE or GRPC_XDS_SOTW"));
  // Values Go refuses at start.
  CHECK_THROWS_WITH(read_env({{"BACKEND_TYPE", "dynamo"}}),
                    Catch::StartsWith("BACKEND_TYPE = \"dynamo\""));
  CHECK_THROWS_WITH(read_env({{"REDIS_TYPE", "ring"}}), Catch::StartsWith("REDIS_TYPE = \"ring\""));
  CHECK(read_env({{"REDIS_TYPE", "Cluster"}}).redis_type == "cluster");
  CHECK_THROWS_WITH(read_env({{"LOG_LEVEL", "verbose"}}), Catch::StartsWith("LOG_LEVEL"));
  CHECK(read_env({{"LOG_LEVEL", "debug"}, {"LOG_FORMAT", "logfmt"}}).log_level == "debug");
  CHECK_THROWS_WITH(read_env({{"GRPC_PORT", "70000"}}), Catch::StartsWith("GRPC_PORT = \"70000\""));
  // One stats sink, as runner.go: USE_STATSD is true by default.
  CHECK_THROWS_WITH(read_env({{"USE_PROMETHEUS", "true"}}),
                    Catch::Contains("more than one stats sink"));
  CHECK_THROWS_WITH(read_env({{"USE_DOG_STATSD", "true"}}),
                    Catch::Contains("more than one stats sink"));
  CHECK(read_env({{"USE_PROMETHEUS", "true"}, {"USE_STATSD", "false"}}).use_prometheus);
  CHECK(read_env({{"USE_PROMETHEUS", "true"}, {"DISABLE_STATS", "true"}}).use_prometheus);
  // REDIS_POOL_SIZE: any positive size.
  CHECK(read_env({{"REDIS_POOL_SIZE", "200"}}).redis_pool_size == 200);
  CHECK_THROWS_WITH(read_env({{"REDIS_POOL_SIZE", "0"}}), Catch::StartsWith("REDIS_POOL_SIZE"));
  // TLS without its files is refused, as Go fails to load the pair.
  CHECK_THROWS_WITH(read_env({{"GRPC_SERVER_USE_TLS", "true"}}),
                    Catch::StartsWith("GRPC_SERVER_USE_TLS = true"));
  // Ours: per-process counters only when asked; a misspelt name of ours is noted, not refused.
  CHECK(read_env({{"RATELIMIT_SERVER_STORAGE", "memory"}}).storage == "memory");
  CHECK_THROWS_WITH(read_env({{"RATELIMIT_SERVER_STORAGE", "disk"}}),
                    Catch::StartsWith("RATELIMIT_SERVER_STORAGE = \"disk\""));
  const auto typo = read_env({{"RATELIMIT_SERVER_ALL_OR_NOTHNG", "true"}});
  CHECK_FALSE(typo.all_or_nothing);
  CHECK(std::count(typo.notes.begin(), typo.notes.end(),
                   "RATELIMIT_SERVER_ALL_OR_NOTHNG: not a setting of this server, ignored") == 1);
}

TEST_CASE("Settings: all-or-nothing is ours, off by default, refused on a cluster", "[settings]") {
  CHECK_FALSE(read_env({}).all_or_nothing);
  CHECK(read_env({{"RATELIMIT_SERVER_ALL_OR_NOTHING", "true"}}).all_or_nothing);
  CHECK_FALSE(read_env({{"RATELIMIT_SERVER_ALL_OR_NOTHING", "true"}},
                       {"--ratelimit-server-all-or-nothing=false"})
                  .all_or_nothing);  // the flag wins
  CHECK_THROWS_WITH(read_env({{"RATELIMIT_SERVER_ALL_OR_NOTHING", "yes"}}),
                    Catch::StartsWith("RATELIMIT_SERVER_ALL_OR_NOTHING = \"yes\": not a boolean"));
  CHECK_THROWS_WITH(read_env({{"RATELIMIT_SERVER_ALL_OR_NOTHING", "true"},
                              {"REDIS_TYPE", "cluster"},
                              {"REDIS_URL", "127.0.0.1:7000"}}),
                    Catch::StartsWith("RATELIMIT_SERVER_ALL_OR_NOTHING = true: not with "
                                      "REDIS_TYPE = cluster"));
  CHECK_THROWS_WITH(
      read_env({{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"},
                {"RATELIMIT_SERVER_ALL_OR_NOTHING", "true"}}),
      Catch::StartsWith("RATELIMIT_SERVER_ALL_OR_NOTHING = true and "
                        "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT = true: choose one"));
  CHECK(read_env({}, {"--stop-cache-key-increment-when-overlimit=1"}).stop_increment_when_over);
}

#ifdef RATELIMIT_SERVER_HAVE_REDIS
TEST_CASE("Settings: the Redis options as Go's dialer sets them, and a short breaker",
          "[settings]") {
  using std::chrono::milliseconds;
  const auto o = rs::redis_options_of(read_env({{"REDIS_SOCKET_TYPE", "tcp"},
                                                {"REDIS_URL", "127.0.0.1:6380"},
                                                {"REDIS_AUTH", "user:secret"},
                                                {"REDIS_POOL_SIZE", "200"},
                                                {"REDIS_TIMEOUT", "2s"}}));
  CHECK(o.host == "127.0.0.1");
  CHECK(o.port == 6380);
  CHECK(o.username == "user");  // "user:password", cut at the first ':' as Go's createDialer
  CHECK(o.password == "secret");
  CHECK(o.pool_size == 64u);  // 200 > 64: connections are pipelined, 64 at most
  // REDIS_TIMEOUT bounds the dial and each command: 2 s = 2,000 ms.
  CHECK(o.connect_timeout == milliseconds{2'000});
  CHECK(o.command_timeout == milliseconds{2'000});
  // Go has no breaker (each call dials again), and every call a breaker refuses is an error
  // here: 10 ms after a failure, and a probe at most 100 ms apart while Redis stays down (the
  // library's defaults, 100 ms doubling to 2 s, refused calls for up to 2 s after a restart).
  CHECK(o.breaker_backoff == milliseconds{10});
  CHECK(o.breaker_max_backoff == milliseconds{100});
  // REDIS_TIMEOUT=0 has no bound in Go: 10 s = 10,000 ms here; the breaker is the same.
  const auto unbounded = rs::redis_options_of(
      read_env({{"REDIS_SOCKET_TYPE", "tcp"}, {"REDIS_URL", "h:1"}, {"REDIS_TIMEOUT", "0"}}));
  CHECK(unbounded.command_timeout == milliseconds{10'000});
  CHECK(unbounded.breaker_max_backoff == milliseconds{100});
  CHECK_THROWS_WITH(
      rs::redis_options_of(read_env({{"REDIS_SOCKET_TYPE", "tcp"}, {"REDIS_URL", "no-port"}})),
      Catch::Contains("REDIS_URL"));
}
#endif

TEST_CASE("Settings: the executable starts with a Go deployment's environment and any argv",
          "[settings]") {
  // As a manifest runs /bin/ratelimit: arguments of its own, Kubernetes' service links, Go
  // settings that map to nothing here. The start-up lines say what was ignored; the server
  // serves, and SIGTERM stops it with exit 0.
  int err[2];
  REQUIRE(::pipe(err) == 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  posix_spawn_file_actions_addclose(&actions, err[0]);
  std::vector<std::string> env{"RATELIMIT_SERVER_STORAGE=memory",
                               "GRPC_HOST=127.0.0.1",
                               "GRPC_PORT=0",
                               "HOST=127.0.0.1",
                               "PORT=0",
                               "RUNTIME_ROOT=/nonexistent",
                               "USE_STATSD=false",
                               "REDIS_PIPELINE_WINDOW=150us",
                               "REDIS_SERVICE_HOST=10.0.0.1",
                               "REDIS_PORT_6379_TCP=tcp://10.0.0.1:6379",
                               "LOG_LEVEL=debug"};
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string binary = RATELIMIT_SERVER_BINARY;
  std::string arg1 = "serve";
  std::string arg2 = "--config=/etc/ratelimit";
  char* argv[] = {binary.data(), arg1.data(), arg2.data(), nullptr};
  pid_t pid = 0;
  REQUIRE(::posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv, envp.data()) == 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(err[1]);
  FILE* out = ::fdopen(err[0], "r");
  char* line = nullptr;
  std::size_t cap = 0;
  std::string lines;
  bool serving = false;
  while (!serving && ::getline(&line, &cap, out) > 0) {
    lines += line;
    serving = std::string(line).find("gRPC on 127.0.0.1:") != std::string::npos;
  }
  std::free(line);
  INFO(lines);
  CHECK(serving);
  CHECK_THAT(lines, Catch::Contains("argument \"serve\" ignored"));
  CHECK_THAT(lines, Catch::Contains("argument \"--config\" ignored"));
  CHECK_THAT(lines, Catch::Contains("REDIS_PIPELINE_WINDOW: accepted"));
  CHECK_THAT(lines, !Catch::Contains("USE_STATSD"));  // honoured: no line
  CHECK_THAT(lines, !Catch::Contains("REDIS_SERVICE_HOST"));
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::fclose(out);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
