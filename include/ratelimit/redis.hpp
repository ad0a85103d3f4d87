#pragma once
/// @file redis.hpp
/// Forwarding header kept for existing code: includes ratelimit/redis/storage.hpp,
/// ratelimit/redis/batch.hpp.

#include "redis/batch.hpp"
#include "redis/storage.hpp"
