// TLS on Redis Cluster. Three primaries of the test's own serve TLS (the cluster bus
// too: tls-cluster yes), so CLUSTER SLOTS names their TLS ports; a RedisClusterStorage with TLS
// options learns the map over TLS, verifies every node's certificate, and decides exactly on
// each node. A storage trusting another CA is refused by every node.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

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

  // Warmed up at construction, a storage loads every algorithm's script on every primary (it
  // learns the map first), so its first decision on any node names the script (EVALSHA): no
  // EVAL, no NOSCRIPT, whichever node a key lands on. Counted by each node (INFO
  // commandstats, on its plain port).
  const auto calls = [&](const std::string& command, const char* field) {
    std::int64_t sum = 0;
    for (const auto& n : nodes) {
      const std::string info = rltest::reply_text(
          rltest::RedisAdmin(n->server.endpoint()).run({"INFO", "commandstats"}).get());
      const auto at = info.find("cmdstat_" + command + ":");
      if (at == std::string::npos) continue;
      const auto f = info.find(std::string(field) + "=", at);
      sum += std::stoll(info.substr(f + std::strlen(field) + 1));
    }
    return sum;
  };
  const std::int64_t loads_before = calls("script|load", "calls");
  auto warm_options = o;
  warm_options.redis.warm_up = true;
  warm_options.redis.key_prefix = rltest::unique_prefix("tlscluster-warm");
  ratelimit::RedisClusterStorage warm(warm_options);
  // One SCRIPT LOAD per algorithm of the registry on each of the 3 primaries.
  CHECK(calls("script|load", "calls") - loads_before ==
        3 * static_cast<std::int64_t>(ratelimit::Algorithms::size));
  const std::int64_t eval_before = calls("eval", "calls");
  const std::int64_t failed_before = calls("evalsha", "failed_calls");
  ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::RedisStorage> warm_bucket(
      {3, ratelimit::per_hour(3)}, warm, clock);
  for (int k = 0; k < 30; ++k)
    CHECK(warm_bucket.try_acquire("k" + std::to_string(k)).remaining == 2);  // 3 - 1
  CHECK(calls("eval", "calls") == eval_before);
  CHECK(calls("evalsha", "failed_calls") == failed_before);
  CHECK(warm.stats().script_loads == 0);

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

// A newcomer pointed a cluster storage at a standalone Redis: it decided normally and nothing
// told them. Seeds that are separate servers would each keep their own limits, so the storage
// now says so once (a warning naming the seed and Redis's answer), and asks for a map at most
// every 100 ms instead of beside every decision.
TEST_CASE("A cluster storage on a standalone Redis warns once and asks for the map sparingly",
          "[redis][cluster]") {
  rltest::ThrowawayRedis server;
  const auto e = server.endpoint();
  rltest::FailureLog log;
  ratelimit::RedisClusterOptions o;
  o.seeds = {e.host + ":" + std::to_string(e.port)};
  o.redis.key_prefix = rltest::unique_prefix("standalone-seed");
  o.redis.on_failure = log.callback();
  ratelimit::RedisClusterStorage storage(o);
  ratelimit::ManualClock clock;
  // Capacity 50, no refill on the manual clock (which never moves): 50 of 200 admitted.
  ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::RedisStorage> bucket(
      {50, ratelimit::per_hour(50)}, storage, clock);
  const auto start = std::chrono::steady_clock::now();
  int admitted = 0, degraded = 0;
  for (int i = 0; i < 200; ++i) {
    const ratelimit::Decision d = bucket.try_acquire("k");
    admitted += d.allowed ? 1 : 0;
    degraded += d.degraded ? 1 : 0;
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(degraded == 0);
  CHECK(admitted == 50);
  const auto reports = log.snapshot();
  REQUIRE(log.count(ratelimit::RedisFailureKind::warning) == 1);
  const auto warning = std::find_if(reports.begin(), reports.end(), [](const auto& f) {
    return f.kind == ratelimit::RedisFailureKind::warning;
  });
  CHECK(rltest::contains_nocase(warning->message, o.seeds.front()));
  CHECK(rltest::contains_nocase(warning->message, "not a Redis Cluster node"));
  // One ask at the first decision, then at most one per 100 ms of the loop, plus one that may
  // be under way as it ends.
  rltest::RedisAdmin admin(e);
  const auto info = admin.run({"INFO", "commandstats"});
  const std::string stats(info->str, info->len);
  const auto at = stats.find("cmdstat_cluster|slots:calls=");
  REQUIRE(at != std::string::npos);
  const long long asks =
      std::stoll(stats.substr(at + std::string("cmdstat_cluster|slots:calls=").size()));
  CHECK(asks <= 2 + elapsed / 100ms);
}
