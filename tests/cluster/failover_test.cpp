// Failover: a primary is killed mid-run. Decisions for its keys are degraded
// per the failure policy until its replica takes over (cluster-node-timeout, set low by
// scripts/redis_cluster.sh), then exact again on the same storage, with the state the replica
// had; keys on the other primaries are never affected. Waiting for the promotion polls the
// cluster in real time; nothing asserts how long it took.
#include <signal.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

#include "cluster_admin.hpp"
#include "support/expect.hpp"

using namespace std::chrono_literals;
using ratelimit::FixedWindow;
using ratelimit::ManualClock;
using ratelimit::RedisClusterStorage;
using rltest::admitted;

TEST_CASE(
    "A killed primary's keys degrade per policy until its replica takes over, then are "
    "exact again; other keys are unaffected",
    "[cluster][failover][fixed_window]") {
  auto closed_options = rltest::test_cluster_options("failover");
  closed_options.redis.connect_timeout = 300ms;
  closed_options.redis.command_timeout = 500ms;
  auto open_options = closed_options;
  open_options.redis.failure_policy = ratelimit::FailurePolicy::fail_open;
  RedisClusterStorage closed(closed_options);
  RedisClusterStorage open(open_options);  // same keys (same prefix), the other policy
  ManualClock clock;
  clock.set(100s);  // frozen
  using FW = FixedWindow<ManualClock, RedisClusterStorage>;
  FW fw_closed(ratelimit::Rate{5, 1h}, closed, clock, "fo");
  FW fw_open(ratelimit::Rate{5, 1h}, open, clock, "fo");

  // The victim: a primary that is not the seed (later test processes need the seed alive).
  const auto seed = rltest::seed_node();
  const auto primaries = rltest::live_primaries();
  REQUIRE(primaries.size() >= 3);
  // It must have a live replica to take over: a cluster fresh from scripts/redis_cluster.sh has
  // one per primary (this test uses one up, so a second run needs a fresh cluster).
  const auto nodes = rltest::cluster_nodes(seed);
  rltest::ClusterNodeInfo victim;
  for (const auto& p : primaries) {
    bool has_replica = false;
    for (const auto& n : nodes) has_replica = has_replica || (n.primary_id == p.id && !n.failed);
    if (!(p.address == seed) && has_replica) victim = p;
  }
  INFO("no primary but the seed has a live replica: start a fresh cluster");
  REQUIRE(!victim.id.empty());

  // One key on the victim, one on each other primary.
  std::string on_victim;
  std::vector<std::string> elsewhere;
  std::set<std::string> other_nodes;
  for (int k = 0; k < 200 && (on_victim.empty() || other_nodes.size() < primaries.size() - 1);
       ++k) {
    const std::string key = "fo-" + std::to_string(k);
    const std::string node = closed.node_of<ratelimit::FixedWindowModel>("fo", key);
    if (node == victim.address.address()) {
      if (on_victim.empty()) on_victim = key;
    } else if (other_nodes.insert(node).second) {
      elsewhere.push_back(key);
    }
  }
  REQUIRE(!on_victim.empty());
  REQUIRE(elsewhere.size() == primaries.size() - 1);

  // 5 per hour at t = 100 s: the window ends at 3600 s, 3500 s from now. Two spent per key.
  CHECK(fw_closed.try_acquire(on_victim, 2) == admitted(5, 3, 3500s));
  for (const auto& k : elsewhere) CHECK(fw_closed.try_acquire(k, 2) == admitted(5, 3, 3500s));

  // The replica has every write before the kill: a write in the victim key's slot, then WAIT
  // (replication is ordered, so its acknowledgement covers the earlier writes).
  {
    rltest::Admin admin(victim.address);
    // The victim key's own hash tag (nothing to escape in a plain "fo-N").
    const std::string marker = closed_options.redis.key_prefix + "{" + on_victim + "}wait-marker";
    admin.run({"SET", marker, "1", "EX", "600"});
    auto acked = admin.run({"WAIT", "1", "5000"});
    REQUIRE(acked->integer >= 1);
  }
  const pid_t pid = rltest::pid_of(victim.address);
  REQUIRE(::kill(pid, SIGKILL) == 0);

  // Until the promotion: the victim's decisions are degraded (fail closed denies, fail open
  // admits), the other primaries' keys decide exactly as before (peeks: 5 - 2 = 3 left).
  int degraded_seen = 0;
  bool recovered = false;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& k : elsewhere) {
      INFO("key on another primary: " << k);
      REQUIRE(fw_closed.peek(k) == admitted(5, 3, 3500s));
    }
    const auto c = fw_closed.peek(on_victim);
    const auto o = fw_open.peek(on_victim);
    if (!c.degraded) {
      // Decided by the promoted replica, which had the 2 units spent: 3 left.
      CHECK(c == admitted(5, 3, 3500s));
      recovered = true;
      break;
    }
    ++degraded_seen;
    CHECK_FALSE(c.allowed);
    CHECK(c.retry_after > 0ns);
    if (o.degraded) CHECK(o.allowed);
    std::this_thread::sleep_for(50ms);  // polling the cluster, not a timing assertion
  }
  REQUIRE(recovered);
  CHECK(degraded_seen > 0);
  CHECK(closed.node_of<ratelimit::FixedWindowModel>("fo", on_victim) != victim.address.address());

  // Exact again, on the same storage objects: 3 left, then the limit holds.
  CHECK(fw_closed.try_acquire(on_victim, 3) == admitted(5, 0, 3500s));
  CHECK_FALSE(fw_closed.try_acquire(on_victim).allowed);
  // The fail-open storage recovers too (it may need one more back-off to notice): poll.
  ratelimit::Decision d = fw_open.peek(on_victim);
  for (int i = 0; i < 100 && d.degraded; ++i) {
    std::this_thread::sleep_for(50ms);
    d = fw_open.peek(on_victim);
  }
  CHECK_FALSE(d.degraded);
  CHECK_FALSE(d.allowed);  // the shared count is spent
  for (const auto& k : elsewhere) CHECK(fw_closed.try_acquire(k, 3) == admitted(5, 0, 3500s));
}
