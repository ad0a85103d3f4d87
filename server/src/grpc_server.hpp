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
  /// What the health service (grpc.health.v1.Health) reports for every service name.
  void set_serving(bool serving);
  /// Stops accepting calls, answers the calls in flight (cancelled after `grace`), and
  /// reports NOT_SERVING on the health service meanwhile.
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
