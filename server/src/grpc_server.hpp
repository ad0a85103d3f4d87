#pragma once
/// @file grpc_server.hpp
/// The gRPC front of the service: envoy.service.ratelimit.v3.RateLimitService on grpc++'s
/// callback API, with the standard health service (grpc.health.v1.Health).

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/server.h>

#include "service.hpp"

namespace ratelimit::server {

/// A running gRPC server answering ShouldRateLimit from a `Service`.
/// Thread safety: `port` is safe from many threads; `shutdown` once, from one thread.
class GrpcServer {
 public:
  /// Listens on `address` ("host:port"; port 0 picks a free one) and starts serving. Throws
  /// `std::runtime_error` naming the address when it cannot listen.
  GrpcServer(std::shared_ptr<Service> service, const std::string& address);
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  /// The port listened on.
  int port() const noexcept { return port_; }
  /// What the health service (grpc.health.v1.Health) reports for the service name "ratelimit"
  /// (`Health::service_name`, the reference's); the empty name stays SERVING, as grpc-go's
  /// health server keeps it, and any other name is NOT_FOUND. "ratelimit" starts NOT_SERVING.
  void set_serving(bool serving);
  /// Stops accepting calls, answers the calls in flight (cancelled after `grace`); the health
  /// service reports NOT_SERVING meanwhile (grpc++'s shutdown turns every name NOT_SERVING).
  void shutdown(std::chrono::milliseconds grace = std::chrono::seconds{5});

 private:
  struct Handler;
  std::shared_ptr<Service> service_;
  std::unique_ptr<Handler> handler_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool down_ = false;
};

}  // namespace ratelimit::server
