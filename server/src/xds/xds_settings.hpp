#pragma once
/// @file xds/xds_settings.hpp
/// The settings of the xDS config source, named and defaulted as the reference service
/// (envoyproxy/ratelimit, src/settings/settings.go) names and defaults them: CONFIG_TYPE,
/// FORCE_START_WITHOUT_INITIAL_CONFIG, CONFIG_GRPC_XDS_* and XDS_CLIENT_*.

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ratelimit::server {

/// Where the rules come from and how the xDS client reaches its management server.
/// Thread safety: a plain value.
struct XdsSettings {
  /// CONFIG_TYPE: false for FILE (the rules directory, the default), true for GRPC_XDS_SOTW.
  bool use_xds = false;
  /// FORCE_START_WITHOUT_INITIAL_CONFIG: serve before the first configuration arrived (calls
  /// are then answered UNKNOWN "no rate limit configuration loaded"). Without it, no listener
  /// opens until the first configuration response was handled.
  bool force_start = false;
  /// CONFIG_GRPC_XDS_NODE_ID: the node id the management server picks the snapshot by.
  std::string node_id = "default";
  /// CONFIG_GRPC_XDS_NODE_METADATA: "key=value,key=value", each a string field of the node's
  /// metadata; an entry without '=' is skipped, as the reference skips it.
  std::map<std::string, std::string> node_metadata;
  /// CONFIG_GRPC_XDS_SERVER_URL: the management server, "host:port" (a gRPC target).
  std::string server_url = "localhost:18000";
  /// CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL (Go duration, default 3s): while the
  /// management server cannot be reached, a new connection is tried after this interval
  /// with +-50 % jitter (linear, as go-grpc-middleware's BackoffLinearWithJitter(interval, 0.5)).
  std::chrono::nanoseconds connect_retry_interval = std::chrono::seconds{3};
  /// CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: "name:value,name:value", sent as gRPC metadata
  /// on the stream (names lower-cased, as Go's metadata.New does).
  std::map<std::string, std::string> additional_headers;
  /// CONFIG_GRPC_XDS_SERVER_USE_TLS: TLS to the management server.
  bool use_tls = false;
  /// CONFIG_GRPC_XDS_CLIENT_TLS_CERT / _KEY: a client certificate chain and key (PEM files) for
  /// mutual TLS; used when both are set.
  std::string client_cert;
  std::string client_key;
  /// CONFIG_GRPC_XDS_SERVER_TLS_CACERT: a CA bundle (PEM file) trusted besides the system's.
  std::string server_ca;
  /// CONFIG_GRPC_XDS_SERVER_TLS_SAN: the name the server's certificate must carry, instead of
  /// the host of the URL.
  std::string server_san;
  /// XDS_CLIENT_BACKOFF_INITIAL_INTERVAL (default 10s), _MAX_INTERVAL (60s), _RANDOM_FACTOR
  /// (0.5), _JITTER (true): the wait before reconnecting after the stream broke, as
  /// jpillora/backoff computes it (see `GoBackoff`).
  std::chrono::nanoseconds backoff_initial = std::chrono::seconds{10};
  std::chrono::nanoseconds backoff_max = std::chrono::seconds{60};
  double backoff_factor = 0.5;
  bool backoff_jitter = true;
  /// XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: the largest response accepted; 0 keeps gRPC's default
  /// (4 MiB).
  std::size_t max_message_bytes = 0;
};

/// Whether `name` (a variable, e.g. "CONFIG_TYPE") is one of `XdsSettings`'.
bool is_xds_setting(std::string_view name);

/// Reads `XdsSettings` from `env(name)` (nullopt when unset) and from the flags among `args`
/// (`--config-type=GRPC_XDS_SOTW`; flags of other settings are left alone). Throws
/// `std::invalid_argument` naming the variable and value: a duration that is not a Go duration
/// ("10s", "1m30s", "250ms"), a number or boolean that does not parse, a header entry without
/// ':', CONFIG_TYPE other than FILE or GRPC_XDS_SOTW, a negative message size.
XdsSettings read_xds_settings(
    const std::function<std::optional<std::string>(const std::string&)>& env,
    const std::vector<std::string>& args);

/// Go's time.ParseDuration: "300ms", "-1.5h", "2h45m", "0"; units ns, us (or µs), ms, s, m,
/// h. Throws `std::invalid_argument` "NAME = "TEXT": ..." otherwise, or past +-292 years.
std::chrono::nanoseconds parse_go_duration(const std::string& name, const std::string& text);

}  // namespace ratelimit::server
