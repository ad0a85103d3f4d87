#pragma once
/// @file plan.hpp
/// The first step of a call: where each descriptor lands (the rules' limit, its own override,
/// unlimited or none, as the reference's constructLimitsToCheck decides, src/service/
/// ratelimit.go) and the hits that go to the storage.

#include <grpcpp/support/status.h>

#include "call.hpp"
#include "service_settings.hpp"

namespace ratelimit::server {

/// Fills `call`'s `domain`, `plan` and `hits` from `request` under `call.served` (which may be
/// null: no configuration loaded). Errors as the reference gives them (a Go error that grpc-go
/// reports as UNKNOWN with its text): "rate limit domain must not be empty", "rate limit
/// descriptor list must not be empty", "no rate limit configuration loaded";
/// INVALID_ARGUMENT for a limit override of an unknown unit (where the reference's process
/// panics).
grpc::Status plan_call(const envoy::service::ratelimit::v3::RateLimitRequest& request,
                       const ServiceSettings& settings, Call& call);

}  // namespace ratelimit::server
