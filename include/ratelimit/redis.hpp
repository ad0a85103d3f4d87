#pragma once
/// @file redis.hpp
/// Entry header for shared limits in Redis: `RedisStorage` (one server, Sentinel, TLS, a Unix
/// socket), `RedisClusterStorage`, `RedisBatch` and their options. Target `ratelimit::redis`
/// (Debian libhiredis-dev, libssl-dev). Rule sets on Redis: include this and `ratelimit/rules.hpp`.

#include "redis/batch.hpp"
#include "redis/cluster.hpp"
#include "redis/options.hpp"
#include "redis/storage.hpp"
