#pragma once
/// @file grpc_server.hpp
/// The gRPC front of the service: envoy.service.ratelimit.v3.RateLimitService on grpc++'s
/// callback API, with the standard health service (grpc.health.v1.Health).

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/server.h>

#include "service.hpp"
#include "settings.hpp"

namespace ratelimit::server {

/// How the gRPC server listens: the Go service's GRPC_* settings.
/// Thread safety: a plain value.
struct GrpcTransport {
  std::string host = "0.0.0.0";  ///< an IPv4 or IPv6 address or a name; "::" and "0.0.0.0": all
  int port = 8081;               ///< 0..65535 (0: a free port)
  std::string unix_socket;       ///< when set, the only listener: this unix socket path
  /// A connection is sent GOAWAY after this (+/-10% jitter); 0: never.
  std::chrono::milliseconds max_connection_age{std::chrono::hours{24}};
  /// Then closed this much later, calls in flight or not; 0: never.
  std::chrono::milliseconds max_connection_age_grace{std::chrono::hours{1}};
  bool tls = false;            ///< serve TLS with `cert_file` and `key_file` (PEM)
  std::string cert_file;       ///< the certificate chain, read again when it changes
  std::string key_file;        ///< its private key, read again when it changes
  std::string client_ca_file;  ///< when set: a client certificate from these CAs is required
  /// With `client_ca_file`: the client certificate must carry this DNS name (or IP address)
  /// among its SANs, matched as Go's x509 matches a host name ("*.a.b" covers one label).
  std::string client_san;
  /// How often the certificate files are checked for changes, >= 1 s.
  std::chrono::seconds reload_interval{1};

  /// The transport that `settings` describe (GRPC_HOST, GRPC_PORT, GRPC_UDS,
  /// GRPC_MAX_CONNECTION_AGE[_GRACE], GRPC_SERVER_USE_TLS, GRPC_SERVER_TLS_CERT/_KEY,
  /// GRPC_CLIENT_TLS_CACERT, GRPC_CLIENT_TLS_SAN).
  static GrpcTransport from(const Settings& settings);
  /// What it listens on, for messages: "host:port" ("[::]:8081") or "unix:/path".
  std::string address() const;
};

/// A running gRPC server answering ShouldRateLimit from a `Service`.
/// Thread safety: `port` is safe from many threads; `shutdown` once, from one thread.
class GrpcServer {
 public:
  /// Listens on `address` ("host:port"; port 0 picks a free one), without TLS and without a
  /// connection age, and starts serving. Throws `std::runtime_error` naming the address when
  /// it cannot listen.
  GrpcServer(std::shared_ptr<Service> service, const std::string& address);
  /// Listens as `transport` says and starts serving. Throws `std::invalid_argument` naming the
  /// variable for a certificate file that cannot be read, `std::runtime_error` naming the
  /// address when it cannot listen.
  GrpcServer(std::shared_ptr<Service> service, const GrpcTransport& transport);
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  /// The port listened on (0 on a unix socket).
  int port() const noexcept { return port_; }
  /// What the health service (grpc.health.v1.Health) reports for every service name.
  void set_serving(bool serving);
  /// Stops accepting calls, answers the calls in flight (cancelled after `grace`), and
  /// reports NOT_SERVING on the health service meanwhile.
  void shutdown(std::chrono::milliseconds grace = std::chrono::seconds{5});

 private:
  struct Handler;
  void start(const GrpcTransport& transport, bool plain_address, const std::string& address);
  std::shared_ptr<Service> service_;
  std::unique_ptr<Handler> handler_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool down_ = false;
};

}  // namespace ratelimit::server
