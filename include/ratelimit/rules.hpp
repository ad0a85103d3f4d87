#pragma once
/// @file rules.hpp
/// Entry header for rules as code: rules files in the Envoy rate limit service's format
/// (`Rules`, `RulesConfig`), `RuleSet` and `RateLimitService`. Target `ratelimit::rules`
/// (Debian libyaml-cpp-dev). On Redis, include `ratelimit/redis.hpp` too.

#include "rules/config.hpp"
#include "rules/rules.hpp"
#include "rules/service.hpp"
