#pragma once
/// @file required_commands.hpp
/// GENERATED from the redis.call and redis.pcall commands of every script by
/// cmake/embed_lua.cmake (regenerated with the scripts: see any script's header).
/// Thread safety: constant.

#include <array>
#include <string_view>

namespace ratelimit::lua {

/// Every Redis command the scripts call, as an ACL names it (lower case), sorted, each
/// once: what a restricted user needs to run them, beside the client's own commands.
inline constexpr std::array<std::string_view, 23> required_commands = {
    "decrby",
    "del",
    "exists",
    "get",
    "hget",
    "hgetall",
    "hincrby",
    "incrby",
    "pexpire",
    "pttl",
    "sadd",
    "scard",
    "set",
    "srandmember",
    "srem",
    "time",
    "zadd",
    "zcount",
    "zincrby",
    "zrange",
    "zrangebyscore",
    "zrem",
    "zremrangebyscore",
};

}  // namespace ratelimit::lua
