#pragma once
/// @file redis_options.hpp
/// Forwarding header kept for existing code: includes ratelimit/redis/options.hpp.

#include "redis/options.hpp"
