#pragma once
/// @file rules_redis.hpp
/// Forwarding header kept for existing code: includes ratelimit/integrations/rules_redis.hpp.

#include "integrations/rules_redis.hpp"
