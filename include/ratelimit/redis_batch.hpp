#pragma once
/// @file redis_batch.hpp
/// Forwarding header kept for existing code: includes ratelimit/redis/batch.hpp.

#include "redis/batch.hpp"
