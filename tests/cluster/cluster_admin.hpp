#pragma once
/// @file cluster_admin.hpp
/// What the cluster tests do to the cluster behind the library's back: read its topology,
/// move a slot, kill a primary. Plain commands on connections of their own.

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "redis/blocking_connection.hpp"

#include "support/cluster_backend.hpp"

namespace rltest {

using ratelimit::detail::RedisNode;

/// A connection to one node with a throwing command helper.
class Admin {
 public:
  explicit Admin(const RedisNode& node) : node_(node), conn_(open(node)) {}

  /// Runs one command; throws std::runtime_error on an error reply.
  ratelimit::detail::RedisReplyPtr run(const std::vector<std::string>& cmd) {
    auto replies = conn_.pipeline({cmd});
    if (replies.front()->type == REDIS_REPLY_ERROR)
      throw std::runtime_error(node_.address() + ": " + cmd.front() + ": " +
                               std::string(replies.front()->str, replies.front()->len));
    return std::move(replies.front());
  }

  /// A command whose reply is text (bulk, verbatim or status).
  std::string text(const std::vector<std::string>& cmd) {
    auto r = run(cmd);
    return std::string(r->str, r->len);
  }

  const RedisNode& node() const { return node_; }

 private:
  static rltest::BlockingConnection open(const RedisNode& node) {
    ratelimit::detail::RedisConnectionSettings s;
    s.connect_timeout = std::chrono::seconds{2};
    s.command_timeout = std::chrono::seconds{10};
    return rltest::BlockingConnection::open(node, s);
  }
  RedisNode node_;
  rltest::BlockingConnection conn_;
};

/// One line of CLUSTER NODES.
struct ClusterNodeInfo {
  std::string id;
  RedisNode address;
  bool primary = false;
  bool failed = false;  ///< flagged fail or fail?
  std::string primary_id;
  bool has_slots = false;
};

/// The topology as the seed node sees it.
inline std::vector<ClusterNodeInfo> cluster_nodes(const RedisNode& from) {
  Admin a(from);
  std::istringstream lines(a.text({"CLUSTER", "NODES"}));
  std::vector<ClusterNodeInfo> nodes;
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    ClusterNodeInfo n;
    std::string addr, flags, master, skip;
    if (!(f >> n.id >> addr >> flags >> master)) continue;
    for (int i = 0; i < 4; ++i) f >> skip;  // ping-sent pong-recv epoch link-state
    std::string slot;
    n.has_slots = static_cast<bool>(f >> slot);
    addr = addr.substr(0, addr.find('@'));
    n.address = ratelimit::detail::parse_redis_node(addr, "node");
    n.primary = flags.find("master") != std::string::npos;
    n.failed = flags.find("fail") != std::string::npos;
    if (!n.primary) n.primary_id = master;
    nodes.push_back(n);
  }
  return nodes;
}

inline RedisNode seed_node() { return ratelimit::detail::parse_redis_node(cluster_seed(), "seed"); }

/// Live primaries that serve slots.
inline std::vector<ClusterNodeInfo> live_primaries() {
  std::vector<ClusterNodeInfo> out;
  for (const auto& n : cluster_nodes(seed_node()))
    if (n.primary && !n.failed && n.has_slots) out.push_back(n);
  return out;
}

/// Keys of `node` whose names start with `prefix` (SCAN, so it is fine on a busy node).
inline std::int64_t count_keys(const RedisNode& node, const std::string& prefix) {
  Admin a(node);
  std::string cursor = "0";
  std::int64_t n = 0;
  do {
    auto r = a.run({"SCAN", cursor, "MATCH", prefix + "*", "COUNT", "1000"});
    cursor = std::string(r->element[0]->str, r->element[0]->len);
    n += static_cast<std::int64_t>(r->element[1]->elements);
  } while (cursor != "0");
  return n;
}

inline pid_t pid_of(const RedisNode& node) {
  Admin a(node);
  const std::string info = a.text({"INFO", "server"});
  const auto at = info.find("process_id:");
  if (at == std::string::npos) throw std::runtime_error("no process_id in INFO");
  return static_cast<pid_t>(std::stol(info.substr(at + 11)));
}

}  // namespace rltest
