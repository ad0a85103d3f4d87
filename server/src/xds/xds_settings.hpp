#pragma once
/// @file xds/xds_settings.hpp
/// What the xDS config source reads of the settings (CONFIG_TYPE,
/// FORCE_START_WITHOUT_INITIAL_CONFIG, CONFIG_GRPC_XDS_* and XDS_CLIENT_*; their names and Go's
/// defaults are rows of the settings table, settings.cpp). The defaults below are Go's too.

#include <chrono>
#include <cstddef>
#include <map>
#include <string>

namespace ratelimit::server {

struct Settings;

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

/// The xDS settings of `settings` (read by `read_settings`, whose table has the variables and
/// Go's defaults). Throws `std::invalid_argument` naming the variable for
/// XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES below 0 or above 2^31 - 1.
XdsSettings xds_settings(const Settings& settings);

}  // namespace ratelimit::server
