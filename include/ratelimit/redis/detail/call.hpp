#pragma once
/// @file redis/detail/call.hpp
/// What the Redis client (redis/detail/client.hpp) runs and returns: a call for one client key,
/// its result, one node with its breaker; the options the client checks, and the failure
/// kinds' names for monitoring.

#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../../core/detail/validate.hpp"
#include "../options.hpp"
#include "breaker.hpp"
#include "connection.hpp"
#include "io_node.hpp"
#include "script.hpp"

namespace ratelimit::detail {

/// One command for one client key: a script call (script != nullptr: EVALSHA script keys argv)
/// or a plain command (argv, e.g. DEL; keys only route it).
struct RedisCall {
  const RedisScript* script = nullptr;
  std::vector<std::string> keys;
  std::vector<std::string> argv;
};

/// A call's outcome: a reply that is not an error, or the failure.
struct RedisResult {
  RedisReplyPtr reply;
  std::optional<RedisFailure> failure;
};

/// One node: its connections (on the client's I/O thread) and its breaker (failure policy and
/// back-off are per node, so in a cluster a dead primary does not degrade the other slots).
struct RedisNodeClient {
  /// `probe_budget`: the longest one call can take (its timeout plus the timer's slack).
  RedisNodeClient(IoNode* io_node, std::chrono::milliseconds backoff,
                  std::chrono::milliseconds max_backoff, std::chrono::nanoseconds probe_budget)
      : io(io_node), breaker(backoff, max_backoff, probe_budget) {}
  const RedisNode& address() const noexcept { return io->address(); }
  IoNode* io;
  CircuitBreaker breaker;
  /// The scripts this node holds, as far as this process knows (EVAL or EVALSHA).
  KnownScripts scripts;
  /// Forgets every script once the node lost a connection since the last look: a restarted
  /// server's script cache is empty, and EVALSHA there would cost a NOSCRIPT round trip. A
  /// race with a reply on the new connection only sends one script in full once more.
  void check_connections() noexcept {
    const std::uint64_t lost = io->connections_lost();
    if (lost == lost_seen_.load(std::memory_order_relaxed)) return;
    lost_seen_.store(lost, std::memory_order_relaxed);
    scripts.forgot_all();
  }

 private:
  std::atomic<std::uint64_t> lost_seen_{0};
};

/// Checks the options the client itself reads (the breaker's back-offs). Throws
/// std::invalid_argument naming the field and value.
inline void check_redis_options(const RedisOptions& o) {
  using std::chrono::milliseconds;
  if (o.host.empty() && o.unix_socket.empty() && o.sentinel.sentinels.empty())
    throw std::invalid_argument("host = \"\": must not be empty");
  if (o.unix_socket.size() >= 108)
    invalid("unix_socket (length)", static_cast<std::int64_t>(o.unix_socket.size()),
            "must be under 108 bytes (sockaddr_un)");
  if (o.tls.enabled && o.tls.cert_file.empty() != o.tls.key_file.empty())
    throw std::invalid_argument("tls.cert_file = \"" + o.tls.cert_file + "\", tls.key_file = \"" +
                                o.tls.key_file + "\": give both or neither");
  if (!o.sentinel.sentinels.empty() && o.sentinel.master_name.empty())
    throw std::invalid_argument("sentinel.master_name = \"\": required with sentinels");
  if (o.port < 1 || o.port > 65535) invalid("port", o.port, "must be in [1, 65535]");
  if (o.db < 0) invalid("db", o.db, "must be >= 0");
  if (o.key_prefix.find_first_of("{}") != std::string::npos)
    throw std::invalid_argument("key_prefix = \"" + o.key_prefix +
                                "\": must not contain '{' or '}' (the key's hash tag follows)");
  if (o.connect_timeout < milliseconds{1})
    invalid("connect_timeout (ms)", o.connect_timeout.count(), "must be >= 1");
  if (o.command_timeout < milliseconds{1})
    invalid("command_timeout (ms)", o.command_timeout.count(), "must be >= 1");
  if (o.pool_size < 1 || o.pool_size > 64)
    invalid("pool_size", static_cast<std::int64_t>(o.pool_size), "must be in [1, 64]");
  if (o.max_in_flight < 1 || o.max_in_flight > 10'000'000)
    invalid("max_in_flight", static_cast<std::int64_t>(o.max_in_flight),
            "must be in [1, 10000000]");
  if (o.max_in_flight_bytes < (std::size_t{1} << 20))
    invalid("max_in_flight_bytes", static_cast<std::int64_t>(o.max_in_flight_bytes),
            "must be >= 1 MiB (1048576)");
  if (o.over_limit_cache.capacity < 1 || o.over_limit_cache.capacity > 100'000'000)
    invalid("over_limit_cache.capacity", static_cast<std::int64_t>(o.over_limit_cache.capacity),
            "must be in [1, 100000000]");
  if (o.fallback_divisor < 1 || o.fallback_divisor > 1'000'000)
    invalid("fallback_divisor", o.fallback_divisor, "must be in [1, 1000000]");
  if (o.ttl_margin < milliseconds{0} || o.ttl_margin > std::chrono::hours{24 * 366})
    invalid("ttl_margin (ms)", o.ttl_margin.count(), "must be in [0, 366 days]");
  if (o.breaker_backoff < milliseconds{1} || o.breaker_backoff > std::chrono::hours{1})
    invalid("breaker_backoff (ms)", o.breaker_backoff.count(), "must be in [1 ms, 1 h]");
  if (o.breaker_max_backoff < o.breaker_backoff || o.breaker_max_backoff > std::chrono::hours{1})
    invalid("breaker_max_backoff (ms)", o.breaker_max_backoff.count(),
            "must be in [breaker_backoff, 1 h]");
}

/// The name of a failure kind, for monitoring (`StorageErrorEvent::kind`).
constexpr std::string_view failure_kind_name(RedisFailureKind k) noexcept {
  switch (k) {
    case RedisFailureKind::connect:
      return "connect";
    case RedisFailureKind::timeout:
      return "timeout";
    case RedisFailureKind::io:
      return "io";
    case RedisFailureKind::reply:
      return "reply";
    case RedisFailureKind::protocol:
      return "protocol";
    case RedisFailureKind::pool_exhausted:
      return "pool_exhausted";
    case RedisFailureKind::circuit_open:
      return "circuit_open";
    case RedisFailureKind::overloaded:
      return "overloaded";
    case RedisFailureKind::warning:
      return "warning";
  }
  return "unknown";
}

}  // namespace ratelimit::detail
