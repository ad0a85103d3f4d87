// Issue 13: TLS on Redis Cluster. Three primaries of the test's own serve TLS (the cluster bus
// too: tls-cluster yes), so CLUSTER SLOTS names their TLS ports; a RedisClusterStorage with TLS
// options learns the map over TLS, verifies every node's certificate, and decides exactly on
// each node. A storage trusting another CA is refused by every node.
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/manual_clock.hpp>
#include <ratelimit/redis_cluster.hpp>
#include <ratelimit/token_bucket.hpp>

#include "redis_admin.hpp"
#include "servers.hpp"
#include "support/expect.hpp"

using namespace std::chrono_literals;

namespace {

/// One cluster node serving TLS on a port of its own (plain port kept for the test's own
/// commands), its bus on an explicit port (the default, port + 10000, may not exist).
struct TlsClusterNode {
  explicit TlsClusterNode(const rltest::TempDir& dir)
      : tls_port(rltest::free_loopback_port()),
        bus_port(rltest::free_loopback_port()),
        server({"--cluster-enabled", "yes", "--cluster-config-file",
                dir.file("nodes-" + std::to_string(tls_port) + ".conf"), "--cluster-port",
                std::to_string(bus_port), "--cluster-node-timeout", "5000", "--tls-port",
                std::to_string(tls_port), "--tls-cert-file", rltest::tls_certs().file("server.crt"),
                "--tls-key-file", rltest::tls_certs().file("server.key"),
                // The bus authenticates the connecting node by its client certificate.
                "--tls-client-cert-file", rltest::tls_certs().file("client.crt"),
                "--tls-client-key-file", rltest::tls_certs().file("client.key"),
                "--tls-ca-cert-file", rltest::tls_certs().file("ca.crt"), "--tls-auth-clients",
                "no", "--tls-cluster", "yes"}) {}
  int tls_port;
  int bus_port;
  rltest::ThrowawayRedis server;
};

}  // namespace

TEST_CASE("TLS on Redis Cluster: the map is learned over TLS and every node is verified",
          "[redis][tls][cluster]") {
  rltest::TempDir dir;
  std::vector<std::unique_ptr<TlsClusterNode>> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(std::make_unique<TlsClusterNode>(dir));
  // Slots in three ranges, one per node; the first node meets the others.
  const char* ranges[3][2] = {{"0", "5460"}, {"5461", "10922"}, {"10923", "16383"}};
  for (int i = 0; i < 3; ++i)
    rltest::RedisAdmin(nodes[i]->server.endpoint())
        .run({"CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]});
  rltest::RedisAdmin first(nodes[0]->server.endpoint());
  for (int i = 1; i < 3; ++i)
    first.run({"CLUSTER", "MEET", "127.0.0.1", std::to_string(nodes[i]->server.endpoint().port),
               std::to_string(nodes[i]->bus_port)});
  const bool ok = rltest::poll_until(
      [&] {
        for (const auto& n : nodes) {
          auto r = rltest::RedisAdmin(n->server.endpoint()).run({"CLUSTER", "INFO"});
          if (rltest::reply_text(r.get()).find("cluster_state:ok") == std::string::npos)
            return false;
        }
        return true;
      },
      30s);
  REQUIRE(ok);

  ratelimit::RedisClusterOptions o;
  o.seeds = {"127.0.0.1:" + std::to_string(nodes[0]->tls_port)};
  o.redis.key_prefix = rltest::unique_prefix("tlscluster");
  o.redis.tls.enabled = true;
  o.redis.tls.ca_file = rltest::tls_certs().file("ca.crt");
  o.redis.failure_policy = ratelimit::FailurePolicy::fail_closed;
  o.redis.command_timeout = 5s;
  o.redis.connect_timeout = 5s;
  rltest::FailureLog log;
  o.redis.on_failure = log.callback();
  ratelimit::RedisClusterStorage storage(o);
  ratelimit::ManualClock clock;
  ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::RedisStorage> bucket(
      {3, ratelimit::per_hour(3)}, storage, clock);
  // 30 keys spread over the slots: each first request of a fresh bucket of 3 leaves 2, and the
  // decisions land on more than one node (all three, with overwhelming likelihood).
  std::set<std::string> seen_nodes;
  for (int k = 0; k < 30; ++k) {
    const std::string key = "k" + std::to_string(k);
    const ratelimit::Decision d = bucket.try_acquire(key);
    CHECK_FALSE(d.degraded);
    CHECK(d.remaining == 2);
    seen_nodes.insert(storage.node_of<ratelimit::TokenBucketModel>("", key));
  }
  CHECK(seen_nodes.size() >= 2);
  std::set<std::string> tls_addresses;
  for (const auto& n : nodes) tls_addresses.insert("127.0.0.1:" + std::to_string(n->tls_port));
  for (const auto& address : seen_nodes) CHECK(tls_addresses.count(address) == 1);
  CHECK(storage.stats().degraded_decisions == 0);

  // Trusting another CA, no node is accepted: every decision degraded, reported as connect.
  auto wrong = o;
  wrong.redis.tls.ca_file = rltest::tls_certs().file("other-ca.crt");
  rltest::FailureLog wrong_log;
  wrong.redis.on_failure = wrong_log.callback();
  wrong.redis.command_timeout = 1s;
  ratelimit::RedisClusterStorage refused(wrong);
  ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::RedisStorage> refused_bucket(
      {3, ratelimit::per_hour(3)}, refused, clock);
  const ratelimit::Decision d = refused_bucket.try_acquire("k0");
  CHECK(d.degraded);
  CHECK_FALSE(d.allowed);
  const auto reports = wrong_log.snapshot();
  REQUIRE_FALSE(reports.empty());
  CHECK(rltest::contains_nocase(reports.front().message, "certificate"));
}
