#pragma once
/// @file redis/detail/connection.hpp
/// What every connection to a Redis node shares: the node's address, the settings a connection
/// opens with, the failure type, an owned hiredis reply and a command's arguments. The
/// connections themselves belong to the I/O thread (redis/detail/io_loop.hpp).

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../options.hpp"

namespace ratelimit::detail {

/// A Redis server's address: host and TCP port, or (port 0) a Unix domain socket path in host.
struct RedisNode {
  std::string host;
  int port = 6379;

  bool is_unix() const noexcept { return port == 0; }
  std::string address() const { return is_unix() ? host : host + ":" + std::to_string(port); }
  friend bool operator==(const RedisNode&, const RedisNode&) = default;
};

/// What every connection to a node is opened with.
struct RedisConnectionSettings {
  std::chrono::milliseconds connect_timeout{200};
  std::chrono::milliseconds command_timeout{100};
  std::string password;
  int db = 0;
  std::string username;  ///< ACL user for AUTH (empty: the default user)
  RedisTlsOptions tls;   ///< TLS for the connections (see redis/detail/tls.hpp)
  /// Called on the I/O thread with the node's `maxmemory_policy` (INFO memory) on every new
  /// connection; none: the policy is not read. An error reply (INFO refused by the ACL) is
  /// ignored.
  std::function<void(const RedisNode&, const std::string&)> on_eviction_policy;
  /// Called on the I/O thread when a connection becomes ready, with how long its TCP connect
  /// (name resolution included), TLS handshake (0 without TLS) and the whole took; none: not
  /// timed. Must be quick and not throw (what it throws is swallowed).
  std::function<void(const RedisNode&, std::chrono::nanoseconds connect,
                     std::chrono::nanoseconds tls, std::chrono::nanoseconds ready)>
      on_connected;
};

/// A failure to reach Redis or to get a usable reply.
class RedisError : public std::runtime_error {
 public:
  RedisError(RedisFailureKind kind, const std::string& message, std::size_t replies_read = 0)
      : std::runtime_error(message), kind_(kind), replies_read_(replies_read) {}
  /// A failure that says nothing about the node: the decision's own budget ran out before it
  /// reached the node (building a huge key, say), or every pooled connection was busy. The
  /// breaker must not count it.
  static RedisError not_the_node(RedisFailureKind kind, const std::string& message) {
    RedisError e(kind, message);
    e.node_fault_ = false;
    return e;
  }
  RedisFailureKind kind() const noexcept { return kind_; }
  /// False for a failure made by not_the_node.
  bool node_fault() const noexcept { return node_fault_; }
  /// How many replies of a pipeline arrived before it failed (0: none of it is known to have
  /// run, unless the server died after running it).
  std::size_t replies_read() const noexcept { return replies_read_; }

 private:
  RedisFailureKind kind_;
  std::size_t replies_read_;
  bool node_fault_ = true;
};

struct RedisReplyDeleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
/// An owned hiredis reply.
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

/// One command: its arguments, binary-safe.
using RedisCommand = std::vector<std::string>;

}  // namespace ratelimit::detail
