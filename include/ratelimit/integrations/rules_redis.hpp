#pragma once
/// @file integrations/rules_redis.hpp
/// Rule sets on Redis: `RuleSet<RedisStorage>` (or `RuleSet<RedisClusterStorage>`) decides
/// every limit that matches a request in one Lua script (`RedisStorage::decide_all`), so the
/// request is admitted by all of them or spends nothing anywhere, whichever service instance
/// decides it. Link `ratelimit::rules` and `ratelimit::redis`.
///
///     ratelimit::RuleSet<ratelimit::RedisStorage> set(ratelimit::Rules::from_file("rules.yaml"),
///                                                     ratelimit::RedisStorage(options));
///     auto d = set.decide({{"api_key", key}, {"path", "/login"}});
///
/// `RateLimitService<RedisStorage>` serves Envoy's descriptor-list requests for several
/// domains the same way. Nothing here is specific to rules: a rule set only asks the storage for
/// `decide_all` (several rounds for a descriptor-list request whose shadow- or quota-mode limits
/// deny: see `RuleSet::decide(const RateLimitRequest&)`). This
/// header is the one include for both layers (the path `ratelimit/rules_redis.hpp` forwards to
/// it).
///
/// Keys: the Redis storage's encoding (redis/detail/keys.hpp),
/// `<key_prefix>{<tag>}<algorithm tag>2:<rule id>[:<counter key>]`, where the tag is the
/// client's value for a per-client rule and the counter key for a shared one; a counter key
/// equal to its tag is not repeated, so such a counter is exactly what a limiter named
/// `Rule::id` decides for that key.

#include "../redis/batch.hpp"
#include "../redis/cluster.hpp"
#include "../redis/storage.hpp"
#include "../rules/rules.hpp"
#include "../rules/service.hpp"
