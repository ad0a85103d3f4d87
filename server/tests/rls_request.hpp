// What the server's tests share to ask the service: a request built from plain descriptors, and
// the two ways to send it (over real gRPC, or to the Service's non-blocking call, waited on).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/client_context.h>

#include "rls.grpc.pb.h"
#include "service.hpp"

namespace rltest {

/// One descriptor of a request: its entries, and optionally its own limit or hits.
struct RlsDescriptor {
  std::vector<std::pair<std::string, std::string>> entries;
  std::int64_t override_rpu = -1;  ///< >= 0: a RateLimitOverride of this many per override_unit
  int override_unit = 1;           ///< the override's unit, as on the wire (1 = SECOND)
  std::int64_t hits = -1;          ///< >= 0: the descriptor's own hits_addend
};

/// The request for `domain` with `descriptors` and the request's `hits_addend` (0: unset).
inline envoy::service::ratelimit::v3::RateLimitRequest rls_request(
    const std::string& domain, const std::vector<RlsDescriptor>& descriptors,
    std::uint32_t hits_addend = 0) {
  envoy::service::ratelimit::v3::RateLimitRequest req;
  req.set_domain(domain);
  req.set_hits_addend(hits_addend);
  for (const RlsDescriptor& d : descriptors) {
    auto* out = req.add_descriptors();
    for (const auto& [k, v] : d.entries) {
      auto* e = out->add_entries();
      e->set_key(k);
      e->set_value(v);
    }
    if (d.override_rpu >= 0) {
      out->mutable_limit()->set_requests_per_unit(static_cast<std::uint32_t>(d.override_rpu));
      out->mutable_limit()->set_unit(static_cast<envoy::type::v3::RateLimitUnit>(d.override_unit));
    }
    if (d.hits >= 0) out->mutable_hits_addend()->set_value(static_cast<std::uint64_t>(d.hits));
  }
  return req;
}

/// How long a test waits for one answer: long enough for a machine busy with builds and
/// sanitizers; a test never measures it.
inline constexpr std::chrono::seconds rls_patience{60};

/// `req` sent over gRPC through `stub`: the status and the response.
inline std::pair<grpc::Status, envoy::service::ratelimit::v3::RateLimitResponse> rls_call(
    envoy::service::ratelimit::v3::RateLimitService::Stub& stub,
    const envoy::service::ratelimit::v3::RateLimitRequest& req) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + rls_patience);
  envoy::service::ratelimit::v3::RateLimitResponse res;
  grpc::Status st = stub.ShouldRateLimit(&ctx, req, &res);
  return {std::move(st), std::move(res)};
}

/// `req` given to the service's non-blocking call, as the gRPC server gives it, and waited on;
/// nullopt if no answer came within rls_patience.
inline std::optional<grpc::Status> rls_call_async(
    ratelimit::server::Service& service, const envoy::service::ratelimit::v3::RateLimitRequest& req,
    envoy::service::ratelimit::v3::RateLimitResponse& res) {
  // Shared with the callback, which may outlive a wait that gave up.
  struct Waiting {
    std::mutex m;
    std::condition_variable cv;
    std::optional<grpc::Status> status;
  };
  auto w = std::make_shared<Waiting>();
  service.should_rate_limit_async(req, res, [w](grpc::Status st) {
    const std::lock_guard lock(w->m);
    w->status = std::move(st);
    w->cv.notify_all();
  });
  std::unique_lock lock(w->m);
  w->cv.wait_for(lock, rls_patience, [&] { return w->status.has_value(); });
  return w->status;
}

}  // namespace rltest
