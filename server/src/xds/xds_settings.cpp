#include "xds/xds_settings.hpp"

#include <cctype>
#include <cstdint>
#include <limits>
#include <stdexcept>

#include "ascii.hpp"
#include "settings.hpp"

namespace ratelimit::server {

XdsSettings xds_settings(const Settings& s) {
  XdsSettings x;
  x.use_xds = s.config_type == "GRPC_XDS_SOTW";
  x.force_start = s.force_start_without_initial_config;
  x.node_id = s.xds_node_id;
  x.node_metadata = s.xds_node_metadata;
  x.server_url = s.xds_server_url;
  x.connect_retry_interval = s.xds_server_connect_retry_interval;
  // gRPC metadata keys are lower case (Go's metadata.New lower-cases them too).
  for (const auto& [name, value] : s.xds_client_additional_headers) {
    x.additional_headers[ascii_lower(name)] = value;
  }
  x.use_tls = s.xds_server_use_tls;
  x.client_cert = s.xds_client_tls_cert;
  x.client_key = s.xds_client_tls_key;
  x.server_ca = s.xds_server_tls_cacert;
  x.server_san = s.xds_server_tls_san;
  x.backoff_initial = s.xds_backoff_initial_interval;
  x.backoff_max = s.xds_backoff_max_interval;
  x.backoff_factor = s.xds_backoff_random_factor;
  x.backoff_jitter = s.xds_backoff_jitter;
  if (s.xds_max_msg_size_bytes < 0 ||
      s.xds_max_msg_size_bytes > std::numeric_limits<std::int32_t>::max())
    throw std::invalid_argument(
        "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES = " + std::to_string(s.xds_max_msg_size_bytes) +
        ": not a size in bytes (0, gRPC's default of 4 MiB, to "
        "2147483647)");
  x.max_message_bytes = static_cast<std::size_t>(s.xds_max_msg_size_bytes);
  return x;
}

}  // namespace ratelimit::server
