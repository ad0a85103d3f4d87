#pragma once
/// @file rules.hpp
/// Entry header for rules as code: rules files in the Envoy rate limit service's format
/// (`Rules`, `RulesConfig`), `RuleSet` and `RateLimitService`. Target `ratelimit::rules`
/// (Debian libyaml-cpp-dev). On Redis, include `ratelimit/redis.hpp` too.
///
/// The parts, one concept each: rules/rule.hpp (a limit and a match), rules/load.hpp (the file
/// format and loading), rules/match.hpp (the two matchings), rules/rules.hpp (`Rules`),
/// rules/result.hpp (what a decision gives), rules/rule_set.hpp (`RuleSet`, the engine),
/// rules/config.hpp (several files, several domains), rules/service.hpp (`RateLimitService`).

#include "rules/config.hpp"
#include "rules/request.hpp"
#include "rules/result.hpp"
#include "rules/rule.hpp"
#include "rules/rule_set.hpp"
#include "rules/rules.hpp"
#include "rules/service.hpp"
