#pragma once
/// @file redis_cluster.hpp
/// Forwarding header kept for existing code: includes ratelimit/redis/cluster.hpp,
/// ratelimit/redis/batch.hpp.

#include "redis/batch.hpp"
#include "redis/cluster.hpp"
