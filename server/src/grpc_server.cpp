#include "grpc_server.hpp"

#include <stdexcept>

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "health.hpp"
#include "rls.grpc.pb.h"

namespace ratelimit::server {

namespace pb = envoy::service::ratelimit::v3;

struct GrpcServer::Handler final : pb::RateLimitService::CallbackService {
  explicit Handler(std::shared_ptr<server::Service> s) : service(std::move(s)) {}
  // The call is finished when the storage answers (at once in process; on the storage's I/O
  // thread on Redis), so no gRPC thread waits for Redis.
  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* context,
                                            const pb::RateLimitRequest* request,
                                            pb::RateLimitResponse* response) override {
    auto* reactor = context->DefaultReactor();
    service->should_rate_limit_async(*request, *response,
                                     [reactor](grpc::Status st) { reactor->Finish(st); });
    return reactor;
  }
  std::shared_ptr<server::Service> service;
};

GrpcServer::GrpcServer(std::shared_ptr<Service> service, const std::string& address)
    : service_(std::move(service)), handler_(std::make_unique<Handler>(service_)) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(handler_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) throw std::runtime_error("GRPC_PORT: cannot listen on " + address);
  set_serving(false);  // as the reference's HealthChecker starts while Redis is unconfirmed
}

void GrpcServer::set_serving(bool serving) {
  if (auto* health = server_->GetHealthCheckService())
    health->SetServingStatus(Health::service_name, serving);
}

GrpcServer::~GrpcServer() { shutdown(std::chrono::milliseconds{0}); }

void GrpcServer::shutdown(std::chrono::milliseconds grace) {
  if (down_) return;
  down_ = true;
  set_serving(false);
  server_->Shutdown(std::chrono::system_clock::now() + grace);
  server_->Wait();
}

}  // namespace ratelimit::server
