#pragma once
/// @file http.hpp
/// Entry header for HTTP 429 responses: `rate_limit_headers` (RateLimit-*, Retry-After) from a
/// `Decision`, and `QuotaPolicy`. Dependency-free; also included by `ratelimit/ratelimit.hpp`.

#include "http/headers.hpp"
