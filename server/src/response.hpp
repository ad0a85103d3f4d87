#pragma once
/// @file response.hpp
/// The last step of a call: the response as the reference's shouldRateLimitWorker builds it
/// (src/service/ratelimit.go) from the counted decisions (src/limiter/base_limiter.go,
/// GetResponseDescriptorStatus): the statuses, the overall code (OVER_LIMIT iff a descriptor
/// not in quota mode is over, or every quota-mode one is; OK under SHADOW_MODE), the
/// LIMIT_RESPONSE_HEADERS_ENABLED headers, and the RESPONSE_DYNAMIC_METADATA struct. Each
/// decided descriptor's `DescriptorResult` goes to `ServiceSettings::observer` here.

#include "call.hpp"
#include "service_settings.hpp"

namespace ratelimit::server {

/// Writes `call`'s answer into `*call.response` (its decisions are in `call.decisions`).
void build_response(const Call& call, const ServiceSettings& settings);

}  // namespace ratelimit::server
