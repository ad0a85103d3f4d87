#pragma once
/// @file redis/detail/commands.hpp
/// The Redis commands the client itself sends, as an ACL names them (lower case; a subcommand
/// as `command|sub`). With `ratelimit::lua::required_commands` (generated from the scripts) this
/// is everything a restricted user needs: docs/redis.md "Permissions (ACL)" lists exactly their
/// union, and tests/redis/acl_test.cpp checks that list against these constants and decides every
/// limiter as a user granted nothing more. A command sent anywhere in redis/ must be named here.
/// AUTH needs no permission, so it is not listed; nor are the sentinels' own commands (they
/// have their own credentials: `RedisOptions::sentinel`).
/// Thread safety: constants.

#include <array>
#include <string_view>

namespace ratelimit::detail {

/// Sent for every storage: EVALSHA (each decision), EVAL (a script the node is not known to
/// hold: its first use there by this process, again after NOSCRIPT: a `SCRIPT FLUSH`, a restart
/// or a failover), DEL (`reset`).
inline constexpr std::array<std::string_view, 3> redis_client_commands = {"evalsha", "eval", "del"};

/// Sent on each new connection only when `RedisOptions::db` is not 0.
inline constexpr std::string_view redis_select_command = "select";

/// Sent only to Redis Cluster: the slot map, and the ASKING before a redirected request.
inline constexpr std::array<std::string_view, 2> redis_cluster_commands = {"cluster|slots",
                                                                           "asking"};

/// Sent only by a warm-up (`RedisStorage::warm_up`, `RedisOptions::warm_up`, and the far
/// storages' `warm_up`): SCRIPT LOAD of each script. A user refused it gets false from the
/// warm-up, nothing more: each script's first use on a node then goes as EVAL.
inline constexpr std::string_view redis_warm_up_command = "script|load";

/// Sent once per node to read its eviction policy (`INFO memory`); a user refused it only
/// skips that check.
inline constexpr std::string_view redis_info_command = "info";

}  // namespace ratelimit::detail
