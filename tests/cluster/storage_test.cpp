// The cluster storage's routing. Slots as the specification computes them, validation,
// keys spread over every primary with exact decisions, the batch split by node, and a slot with
// live keys moved under traffic (ASK while it migrates, MOVED after) with decisions still exact.
// The far storages on the cluster: leased windows and buckets, regional windows and buckets.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/lua/required_commands.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>
#include <ratelimit/redis/detail/commands.hpp>
#include <ratelimit/redis/lease/storage.hpp>
#include <ratelimit/redis/regional/storage.hpp>

#include "cluster_admin.hpp"
#include "support/expect.hpp"
#include "support/redis_backend.hpp"

using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::FixedWindow;
using ratelimit::ManualClock;
using ratelimit::RedisClusterStorage;
using rltest::admitted;
using rltest::denied;

TEST_CASE("CRC16 matches the cluster specification's check value", "[cluster][slot]") {
  // The specification's test vector: CRC16 (XMODEM) of "123456789" is 0x31C3.
  STATIC_REQUIRE(ratelimit::detail::crc16("123456789") == 0x31C3);
  // "{user1000}.following" and "{user1000}.followers" hash only the tag: the same slot.
  CHECK(ratelimit::detail::redis_key_slot("{user1000}.following") ==
        ratelimit::detail::redis_key_slot("{user1000}.followers"));
  // An empty tag "{}" does not count: the whole key is hashed.
  CHECK(ratelimit::detail::redis_key_slot("foo{}{bar}") ==
        (ratelimit::detail::crc16("foo{}{bar}") & 16383));
}

TEST_CASE("The client's slot of every kind of key equals the cluster's CLUSTER KEYSLOT",
          "[cluster][slot]") {
  rltest::Admin admin(rltest::seed_node());
  const std::string hostile_bytes("a{b}c\0:}{", 9);
  for (const std::string& client_key : {std::string("alice"), std::string(), hostile_bytes,
                                        std::string(10000, '}'), std::string("user-42")}) {
    const std::string key = ratelimit::detail::redis_key(
        "p:", client_key, ratelimit::detail::redis_key_tail("fw", "n"));
    auto r = admin.run({"CLUSTER", "KEYSLOT", key});
    CHECK(ratelimit::detail::redis_key_slot(key) == r->integer);
  }
}

TEST_CASE("Cluster options out of range are rejected, naming the field", "[cluster]") {
  ratelimit::RedisClusterOptions o;
  o.seeds = {};
  CHECK_THROWS_WITH(RedisClusterStorage(o), Catch::Contains("seeds"));
  o.seeds = {"localhost"};
  CHECK_THROWS_WITH(RedisClusterStorage(o), Catch::Contains("seeds[0]"));
  o.seeds = {"127.0.0.1:7000", "h:70000"};
  CHECK_THROWS_WITH(RedisClusterStorage(o), Catch::Contains("seeds[1]"));
  o.seeds = {"127.0.0.1:7000"};
  o.redis.db = 1;
  CHECK_THROWS_WITH(RedisClusterStorage(o), Catch::Contains("db"));
  o.redis.db = 0;
  o.max_redirects = 0;
  CHECK_THROWS_WITH(RedisClusterStorage(o), Catch::Contains("max_redirects"));
  o.max_redirects = 5;
  o.redis.pool_size = 0;
  CHECK_THROWS_WITH(RedisClusterStorage(o), Catch::Contains("pool_size"));
}

TEST_CASE("Keys spread over every primary and each key's decisions are exact",
          "[cluster][fixed_window]") {
  RedisClusterStorage storage(rltest::test_cluster_options("spread"));
  ManualClock clock;
  clock.set(10s);
  FixedWindow<ManualClock, RedisClusterStorage> fw(ratelimit::Rate{3, 1s}, storage, clock, "fw");
  std::set<std::string> nodes;
  for (int k = 0; k < 30; ++k) {
    const std::string key = "user-" + std::to_string(k);
    nodes.insert(storage.node_of<ratelimit::FixedWindowModel>("fw", key));
    // 3 per 1 s window, at t = 10 s (a window start): 3 admitted (2, 1, 0 left, reset 1 s),
    // the 4th denied until the window ends in 1 s.
    CHECK(fw.try_acquire(key) == admitted(3, 2, 1s));
    CHECK(fw.try_acquire(key, 2) == admitted(3, 0, 1s));
    CHECK(fw.try_acquire(key) == denied(3, 0, 1s, 1s));
  }
  // 30 keys over three primaries' slots: all three get some.
  CHECK(nodes.size() == rltest::live_primaries().size());
  for (const auto& p : rltest::live_primaries()) {
    INFO("primary " << p.address.address());
    CHECK(rltest::count_keys(p.address, storage.options().key_prefix) > 0);
  }
  CHECK(storage.stats().degraded_decisions == 0);
}

TEST_CASE("A batch over keys on every node returns each decision in order", "[cluster][batch]") {
  RedisClusterStorage storage(rltest::test_cluster_options("batch"));
  ManualClock clock;
  clock.set(10s);
  FixedWindow<ManualClock, ratelimit::RedisStorage> fw(ratelimit::Rate{2, 1s}, storage, clock, "b");
  ratelimit::RedisBatch batch(storage);
  // Each of 12 keys three times: admitted with 1 then 0 left, then denied (2 per 1 s window).
  for (int round = 0; round < 3; ++round)
    for (int k = 0; k < 12; ++k) batch.add(fw, "k" + std::to_string(k));
  const auto d = batch.run();
  REQUIRE(d.size() == 36);
  for (int k = 0; k < 12; ++k) {
    INFO("key k" << k);
    CHECK(d[static_cast<std::size_t>(k)] == admitted(2, 1, 1s));
    CHECK(d[static_cast<std::size_t>(12 + k)] == admitted(2, 0, 1s));
    CHECK(d[static_cast<std::size_t>(24 + k)] == denied(2, 0, 1s, 1s));
  }
}

namespace {

/// Sets `slot` to `state` ("NODE <id>", ...) on every live primary, the two sides first.
void setslot_everywhere(int slot, const std::string& owner_id, const rltest::RedisNode& dst,
                        const rltest::RedisNode& src) {
  rltest::Admin(dst).run({"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", owner_id});
  rltest::Admin(src).run({"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", owner_id});
  for (const auto& p : rltest::live_primaries())
    if (!(p.address == dst) && !(p.address == src))
      rltest::Admin(p.address).run({"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", owner_id});
}

/// MIGRATEs every key `src` holds in `slot` to `dst` (atomic per call on the source). The slot
/// of a test's client key may also hold keys that earlier runs of the same test left (same
/// client key under other prefixes, TTLs of an hour): they go too, since a node refuses to give
/// up a slot it still holds keys of.
void migrate_every_key(int slot, const rltest::RedisNode& src, const rltest::RedisNode& dst) {
  rltest::Admin s(src);
  for (;;) {
    auto keys = s.run({"CLUSTER", "GETKEYSINSLOT", std::to_string(slot), "100"});
    if (keys->elements == 0) break;
    std::vector<std::string> cmd{"MIGRATE", dst.host, std::to_string(dst.port), "", "0",
                                 "5000",    "KEYS"};
    for (std::size_t i = 0; i < keys->elements; ++i)
      cmd.emplace_back(keys->element[i]->str, keys->element[i]->len);
    s.run(cmd);
  }
}

}  // namespace

TEST_CASE("Moving a slot with live keys under traffic keeps decisions exact (ASK, then MOVED)",
          "[cluster][resharding][fixed_window][sliding_log]") {
  auto options = rltest::test_cluster_options("reshard");
  RedisClusterStorage storage(options);
  ManualClock clock;
  clock.set(100s);  // frozen: only the limits matter
  using FW = FixedWindow<ManualClock, RedisClusterStorage>;
  FW fw(ratelimit::Rate{10, 1h}, storage, clock, "reshard");
  const std::string key = "moving";
  const std::string redis_key = ratelimit::detail::redis_key(
      options.redis.key_prefix, key,
      ratelimit::detail::redis_key_tail(ratelimit::FixedWindowModel::Wire::key_tag, "reshard"));
  const int slot = ratelimit::detail::redis_key_slot(redis_key);

  const auto primaries = rltest::live_primaries();
  REQUIRE(primaries.size() >= 2);
  const rltest::RedisNode src = ratelimit::detail::parse_redis_node(
      storage.node_of<ratelimit::FixedWindowModel>("reshard", key), "src");
  const rltest::ClusterNodeInfo* src_info = nullptr;
  const rltest::ClusterNodeInfo* dst_info = nullptr;
  for (const auto& p : primaries) {
    if (p.address == src)
      src_info = &p;
    else if (dst_info == nullptr)
      dst_info = &p;
  }
  REQUIRE(src_info != nullptr);
  REQUIRE(dst_info != nullptr);
  const rltest::RedisNode dst = dst_info->address;

  // Background traffic on the same slot (same client key, other limiter names): a fixed window
  // and a sliding log (two Redis keys per decision), 25 per hour each, time frozen.
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> bg_admitted{0}, bg_degraded{0}, bg_attempts{0};
  std::thread traffic([&] {
    FW bg_fw(ratelimit::Rate{25, 1h}, storage, clock, "bg-fw");
    ratelimit::SlidingLog<ManualClock, RedisClusterStorage> bg_log(ratelimit::Rate{25, 1h}, storage,
                                                                   clock, "bg-log");
    while (!stop.load() || bg_attempts.load() < 200) {
      for (const auto& d : {bg_fw.try_acquire(key), bg_log.try_acquire(key)}) {
        bg_attempts.fetch_add(1);
        if (d.degraded) bg_degraded.fetch_add(1);
        if (d.allowed) bg_admitted.fetch_add(1);
      }
    }
  });

  // Limit 10: three admitted before the move (9 left after the 1st, 7 after the 3rd).
  CHECK(fw.try_acquire(key) == admitted(10, 9, 3600s - 100s));
  CHECK(fw.try_acquire(key, 2) == admitted(10, 7, 3500s));

  // Migration starts: the source still holds the key and serves it.
  rltest::Admin(dst).run({"CLUSTER", "SETSLOT", std::to_string(slot), "IMPORTING", src_info->id});
  rltest::Admin(src).run({"CLUSTER", "SETSLOT", std::to_string(slot), "MIGRATING", dst_info->id});
  CHECK(fw.try_acquire(key) == admitted(10, 6, 3500s));
  // A key the source does not hold is created on the target: ASK, then ASKING + the script.
  // A new limiter name, same client key, so the same slot: fresh, 10 - 1 = 9 left.
  FW fresh(ratelimit::Rate{10, 1h}, storage, clock, "reshard-new");
  CHECK(fresh.try_acquire(key) == admitted(10, 9, 3500s));
  CHECK(storage.cluster_stats().ask >= 1);

  // Every key of the slot moves.
  migrate_every_key(slot, src, dst);
  // The key now lives on the target while the slot is still migrating: ASK again; the count
  // continued there (4 spent, so 5 and 4 left).
  CHECK(fw.try_acquire(key) == admitted(10, 5, 3500s));
  CHECK(fw.try_acquire(key) == admitted(10, 4, 3500s));

  // The target owns the slot: the source answers MOVED, the client follows and re-learns.
  setslot_everywhere(slot, dst_info->id, dst, src);
  for (int i = 3; i >= 0; --i) CHECK(fw.try_acquire(key) == admitted(10, i, 3500s));
  CHECK(fw.try_acquire(key) == denied(10, 0, 3500s, 3500s));
  CHECK(storage.cluster_stats().moved >= 1);
  CHECK(storage.node_of<ratelimit::FixedWindowModel>("reshard", key) == dst.address());
  CHECK(fresh.try_acquire(key) == admitted(10, 8, 3500s));

  stop.store(true);
  traffic.join();
  // 25 per hour, time frozen, at least 200 attempts over both: exactly 25 + 25 admitted.
  CHECK(bg_degraded.load() == 0);
  CHECK(bg_admitted.load() == 50);
  CHECK(storage.stats().degraded_decisions == 0);
}

TEST_CASE(
    "A decision whose two keys a migration split is retried (TRYAGAIN), then degraded, "
    "never decided on half its state; exact again once both keys moved",
    "[cluster][resharding][sliding_log]") {
  auto options = rltest::test_cluster_options("split");
  options.max_redirects = 3;
  RedisClusterStorage storage(options);
  ManualClock clock;
  clock.set(100s);  // frozen
  // Two sliding logs of one client decided all or nothing (as a rule set does): two Redis keys
  // under the client key's hash tag, so one slot.
  const auto params = ratelimit::detail::make_window_params(ratelimit::Rate{6, 1h});
  const auto first = storage.bind<ratelimit::SlidingLogModel>("split", params);
  const auto second = storage.bind<ratelimit::SlidingLogModel>("split-b", params);
  const std::string key = "split-key";
  const auto decide = [&] {
    const std::array<ratelimit::RedisPart, 2> parts{first.part(key, {}), second.part(key, {})};
    std::array<Decision, 2> out{};
    storage.decide_all(parts, clock.now(), out);
    return out;
  };
  const auto key_of = [&](std::string_view name) {
    return ratelimit::detail::redis_key(
        options.redis.key_prefix, key,
        ratelimit::detail::redis_key_tail(ratelimit::SlidingLogModel::Wire::key_tag, name));
  };
  const std::string log_key = key_of("split"), other_key = key_of("split-b");
  const int slot = ratelimit::detail::redis_key_slot(log_key);
  REQUIRE(slot == ratelimit::detail::redis_key_slot(other_key));
  const auto both_admitted = [](const std::array<Decision, 2>& d, std::int64_t remaining) {
    return d[0] == admitted(6, remaining, 3600s) && d[1] == admitted(6, remaining, 3600s);
  };

  // 6 per hour (sliding) each: two decisions at t = 100 s leave 5 then 4; nothing leaves the
  // window before 100 s + 1 h, so reset_after is 3600 s.
  CHECK(both_admitted(decide(), 5));
  CHECK(both_admitted(decide(), 4));

  const rltest::RedisNode src = ratelimit::detail::parse_redis_node(
      storage.node_of<ratelimit::SlidingLogModel>("split", key), "src");
  const rltest::ClusterNodeInfo* src_info = nullptr;
  const rltest::ClusterNodeInfo* dst_info = nullptr;
  const auto primaries = rltest::live_primaries();
  for (const auto& p : primaries) {
    if (p.address == src)
      src_info = &p;
    else if (dst_info == nullptr)
      dst_info = &p;
  }
  REQUIRE(src_info != nullptr);
  REQUIRE(dst_info != nullptr);
  const rltest::RedisNode dst = dst_info->address;
  rltest::Admin(dst).run({"CLUSTER", "SETSLOT", std::to_string(slot), "IMPORTING", src_info->id});
  rltest::Admin(src).run({"CLUSTER", "SETSLOT", std::to_string(slot), "MIGRATING", dst_info->id});
  const auto migrate = [&](const std::string& k) {
    rltest::Admin(src).run({"MIGRATE", dst.host, std::to_string(dst.port), k, "0", "5000"});
  };

  // Only one key moves: the source holds one key of the two and answers TRYAGAIN, every time.
  migrate(log_key);
  const auto tries_before = storage.cluster_stats().tryagain;
  const auto d = decide();
  CHECK(d[0].degraded);
  CHECK(d[1].degraded);
  CHECK_FALSE(d[0].allowed);  // fail closed
  // The first attempt and max_redirects = 3 retries: 4 TRYAGAIN replies.
  CHECK(storage.cluster_stats().tryagain - tries_before == 4);

  // Both keys on the target: ASK, then the same count as before (4 left, then 3).
  migrate(other_key);
  CHECK(both_admitted(decide(), 3));
  // Whatever else the slot holds on the source (an earlier run's keys) moves before the slot.
  migrate_every_key(slot, src, dst);
  setslot_everywhere(slot, dst_info->id, dst, src);
  CHECK(both_admitted(decide(), 2));
  CHECK(storage.node_of<ratelimit::SlidingLogModel>("split", key) == dst.address());
}

TEST_CASE("An ACL user granted the documented commands decides on every primary",
          "[cluster][acl]") {
  // docs/redis.md "Permissions (ACL)": the client's own commands and the scripts', plus
  // +cluster|slots and +asking for Redis Cluster, on the key prefix only. ACL users are per node,
  // so the user is made on every live node (replicas too: one may be promoted). Decisions on keys
  // spread over every primary must all be Redis's own (none degraded) and exact.
  auto options = rltest::test_cluster_options("acl");
  const std::string user = rltest::cluster_unique_prefix("acl-user");
  const std::string password = "pw-" + user;
  std::vector<std::string> grants;
  for (const auto c : ratelimit::detail::redis_client_commands)
    grants.push_back("+" + std::string(c));
  for (const auto c : ratelimit::lua::required_commands) grants.push_back("+" + std::string(c));
  for (const auto c : ratelimit::detail::redis_cluster_commands)
    grants.push_back("+" + std::string(c));
  // Live nodes only: a failover test before this one may have killed a primary for good.
  std::vector<rltest::ClusterNodeInfo> nodes;
  for (const auto& n : rltest::cluster_nodes(rltest::seed_node()))
    if (!n.failed) nodes.push_back(n);
  for (const auto& n : nodes) {
    std::vector<std::string> args{"ACL",
                                  "SETUSER",
                                  user,
                                  "reset",
                                  "on",
                                  ">" + password,
                                  "~" + options.redis.key_prefix + "*",
                                  "resetchannels",
                                  "-@all"};
    args.insert(args.end(), grants.begin(), grants.end());
    rltest::Admin(n.address).run(args);
  }
  options.redis.username = user;
  options.redis.password = password;
  {
    RedisClusterStorage storage(options);
    ManualClock clock;
    clock.set(10s);
    using ratelimit::ConcurrencyLimiter;
    using ratelimit::TokenBucket;
    // A bucket of 2 refilled at 1 per hour (nothing refills here), one slot per key, and a
    // window of 3 per second beside a bucket of 5 decided all or nothing.
    TokenBucket<ManualClock, RedisClusterStorage> tb({2, ratelimit::per_hour(1)}, storage, clock,
                                                     "tb");
    ConcurrencyLimiter<ManualClock, RedisClusterStorage> cc({1, 1s}, storage, clock, "cc");
    FixedWindow<ManualClock, RedisClusterStorage> fw(ratelimit::Rate{3, 1s}, storage, clock, "fw");
    TokenBucket<ManualClock, RedisClusterStorage> tb5({5, ratelimit::per_hour(1)}, storage, clock,
                                                      "tb5");
    std::set<std::string> primaries;
    for (int k = 0; k < 30; ++k) {
      const std::string key = "user-" + std::to_string(k);
      INFO(key);
      primaries.insert(storage.node_of<ratelimit::TokenBucketModel>("tb", key));
      CHECK(tb.try_acquire(key).remaining == 1);  // 2 - 1
      CHECK(tb.try_acquire(key).remaining == 0);  // 2 - 2
      CHECK_FALSE(tb.try_acquire(key).allowed);   // empty for the next hour
      {
        const auto slot = cc.try_acquire(key);
        CHECK(slot);
        CHECK_FALSE(cc.try_acquire(key));  // the one slot is held
      }                                    // released here
      CHECK(cc.try_acquire(key));
      const auto both = ratelimit::try_acquire_all(key, 1, fw, tb5);
      CHECK(both.allowed);
      CHECK(both.decisions[0].remaining == 2);  // 3 - 1
      CHECK(both.decisions[1].remaining == 4);  // 5 - 1
    }
    CHECK(primaries.size() == rltest::live_primaries().size());
    CHECK(storage.stats().degraded_decisions == 0);
  }
  for (const auto& n : nodes) rltest::Admin(n.address).run({"ACL", "DELUSER", user});
}

// Leased quotas (redis/lease/storage.hpp) on the cluster: each lease call is one script on the
// primary of its key's slot (the count, its lease records and the previous window's count share
// the client key's hash tag). Time is passed to each decision (ManualClock time, no sleeps).
namespace {

ratelimit::LeaseOptions lease_on_cluster(const std::string& prefix) {
  const auto c = rltest::test_cluster_options("lease");
  ratelimit::LeaseOptions o;
  o.cluster_seeds = c.seeds;
  o.redis = c.redis;  // fail_closed: a failure never passes for an expected decision
  o.redis.key_prefix = prefix;
  o.lease_duration = 100ms;
  return o;
}

/// Keys of `prefix` on each live primary.
std::vector<std::int64_t> keys_per_primary(const std::string& prefix) {
  std::vector<std::int64_t> n;
  for (const auto& p : rltest::live_primaries()) n.push_back(rltest::count_keys(p.address, prefix));
  return n;
}

}  // namespace

TEMPLATE_TEST_CASE(
    "Leased windows on a cluster spend exactly N across instances, for keys on every primary",
    "[cluster][lease]", ratelimit::FixedWindowModel, ratelimit::SlidingCounterModel) {
  const auto prefix = rltest::cluster_unique_prefix("lease");
  ratelimit::LeasedStorage a_store(lease_on_cluster(prefix)), b_store(lease_on_cluster(prefix));
  const ratelimit::detail::WindowParams n50{50, std::chrono::nanoseconds{1s}.count()};
  auto a = a_store.template bind<TestType>("api", n50, 8);
  auto b = b_store.template bind<TestType>("api", n50, 8);
  const ratelimit::Operation one{1};
  constexpr int keys = 12;
  for (int k = 0; k < keys; ++k) {
    const std::string key = "user-" + std::to_string(k);
    INFO(key);
    REQUIRE(a.apply(key, 1ms, one).allowed);  // a leases 8, spends 1: 7 held
    // b gets what is not leased: 50 - 8 = 42 (leases of 8, 8, 8, 8, 8, then the 2 left).
    std::int64_t got = 0;
    for (int i = 0; i < 60; ++i) got += b.apply(key, 2ms, one).allowed ? 1 : 0;
    CHECK(got == 42);
  }
  // a's leases end at 1 ms + H = 101 ms: its flush gives back 7 per key, one call per key, each
  // to its key's primary.
  CHECK(a.flush(101ms) == 7 * keys);
  for (int k = 0; k < keys; ++k) {
    const std::string key = "user-" + std::to_string(k);
    INFO(key);
    std::int64_t got = 0;
    for (int i = 0; i < 10; ++i) got += b.apply(key, 102ms, one).allowed ? 1 : 0;
    // 1 (a) + 42 + 7 (b) = 50 = N: every unit spent once, none twice.
    CHECK(got == 7);
  }
  CHECK(a_store.stats().degraded == 0);
  CHECK(b_store.stats().degraded == 0);
  // 12 keys over three primaries' slots: every primary holds some of their counts.
  for (const auto n : keys_per_primary(prefix)) CHECK(n > 0);
}

TEST_CASE("A leased bucket on a cluster over-admits at most r H, for keys on every primary",
          "[cluster][lease][token_bucket]") {
  const auto prefix = rltest::cluster_unique_prefix("lease");
  auto o = lease_on_cluster(prefix);
  o.lease_duration = 500ms;
  ratelimit::LeasedStorage a_store(o), b_store(o);
  // C = 100 tokens refilled at 100 per second (one every 10 ms), leases of L = 100, H = 500 ms.
  const auto params = ratelimit::TokenBucketModel::make_params({100, ratelimit::per_second(100)});
  auto a = a_store.bind<ratelimit::TokenBucketModel>("api", params, 100);
  auto b = b_store.bind<ratelimit::TokenBucketModel>("api", params, 100);
  for (int k = 0; k < 12; ++k) {
    const std::string key = "user-" + std::to_string(k);
    INFO(key);
    // t = 0: a leases all 100 (the bucket is full) and spends 1; at H - 1 ns it spends its 99.
    REQUIRE(a.apply(key, 0ms, ratelimit::Operation{1}).allowed);
    REQUIRE(a.apply(key, 500ms - 1ns, ratelimit::Operation{99}).allowed);
    // t2 = 1 s: the bucket refilled 100 x 1 s = 100 since 0 (capped at C): b spends all 100.
    const auto d = b.apply(key, 1s, ratelimit::Operation{100});
    REQUIRE(d.allowed);
    CHECK(d.remaining == 0);
    // In [H - 1 ns, 1 s], D = 500 ms + 1 ns: 99 + 100 = 199 <= C + r (D + H) = 200.0000001.
    // Nothing more at 1 s: the bucket holds 0 and both leases are spent.
    CHECK_FALSE(b.apply(key, 1s, ratelimit::Operation{1}).allowed);
    CHECK_FALSE(a.apply(key, 1s, ratelimit::Operation{1}).allowed);
  }
  CHECK(a_store.stats().degraded == 0);
  CHECK(b_store.stats().degraded == 0);
  for (const auto n : keys_per_primary(prefix)) CHECK(n > 0);
}

TEST_CASE("A leased key whose slot moves between two leases keeps its count (ASK, then MOVED)",
          "[cluster][lease][resharding]") {
  const auto prefix = rltest::cluster_unique_prefix("lease");
  auto o = lease_on_cluster(prefix);
  o.lease_duration = 1h;  // leases never end here: only the count in Redis matters
  ratelimit::LeasedStorage a_store(o), b_store(o), c_store(o);
  const ratelimit::detail::WindowParams n50{50, std::chrono::nanoseconds{1h}.count()};
  auto a = a_store.bind<ratelimit::FixedWindowModel>("api", n50, 10);
  auto b = b_store.bind<ratelimit::FixedWindowModel>("api", n50, 10);
  auto c = c_store.bind<ratelimit::FixedWindowModel>("api", n50, 10);
  const std::string key = "moving";
  const ratelimit::Operation one{1};
  REQUIRE(a.apply(key, 1ms, one).allowed);  // a leases 10 of 50 (count 10)
  // The slot of the key's count (its hash tag is the client key's).
  const std::string count_key =
      ratelimit::detail::redis_key(prefix, key, ratelimit::detail::redis_key_tail("lfw", "api")) +
      ":0";
  const int slot = ratelimit::detail::redis_key_slot(count_key);
  rltest::ClusterNodeInfo src, dst;
  bool found = false;
  for (const auto& p : rltest::live_primaries()) {
    // Only the slot's owner holds keys of it (another node would answer MOVED to EXISTS).
    if (rltest::Admin(p.address)
            .run({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)})
            ->integer > 0) {
      src = p;
      found = true;
    }
  }
  REQUIRE(found);
  for (const auto& p : rltest::live_primaries())
    if (p.id != src.id) dst = p;
  rltest::Admin(dst.address).run({"CLUSTER", "SETSLOT", std::to_string(slot), "IMPORTING", src.id});
  rltest::Admin(src.address).run({"CLUSTER", "SETSLOT", std::to_string(slot), "MIGRATING", dst.id});
  migrate_every_key(slot, src.address, dst.address);
  // Migrating, the keys on the target: b's lease goes there through ASK and sees count 10, so
  // it gets 10 (count 20).
  std::int64_t got = 0;
  for (int i = 0; i < 10; ++i) got += b.apply(key, 2ms, one).allowed ? 1 : 0;
  CHECK(got == 10);
  setslot_everywhere(slot, dst.id, dst.address, src.address);
  // The target owns the slot: c follows MOVED and gets the 30 left, of 40 attempts.
  got = 0;
  for (int i = 0; i < 40; ++i) got += c.apply(key, 3ms, one).allowed ? 1 : 0;
  CHECK(got == 30);
  CHECK(rltest::Admin(dst.address).run({"GET", count_key})->str == std::string("50"));
  CHECK(a_store.stats().degraded + b_store.stats().degraded + c_store.stats().degraded == 0);
}

TEST_CASE("A leased storage refuses a bad cluster seed, naming it", "[cluster][lease]") {
  auto o = lease_on_cluster(rltest::cluster_unique_prefix("lease"));
  o.cluster_seeds = {rltest::cluster_seed(), "no-port"};
  CHECK_THROWS_WITH(ratelimit::LeasedStorage(o), Catch::Contains("cluster_seeds[1]"));
  o.cluster_seeds = {rltest::cluster_seed()};
  o.redis.db = 2;
  CHECK_THROWS_WITH(ratelimit::LeasedStorage(o), Catch::Contains("db"));
}

// Regional counters (redis/regional/storage.hpp) with region r0 on the cluster and region r1 on
// the test command's plain redis-server (RATELIMIT_TEST_REDIS; the key prefix is the test's own):
// r0's decisions and claims go to the primary of each key's slot (its dirty set is per slot, beside
// the hashes), r1's pushes to r0 likewise. Time is the ManualClock's; exchanges are explicit steps
// at chosen times, as in tests/far.
namespace {

class ClusterAndPlain {
 public:
  /// Region i's options (r0: the cluster; r1: the plain Redis), exchange interval S = 100 ms.
  ratelimit::RegionalOptions options(std::size_t i) const {
    ratelimit::RegionalOptions o;
    o.region = i == 0 ? "r0" : "r1";
    o.exchange_interval = 100ms;
    o.one_way_delay = 40ms;
    ratelimit::RemoteRegion other;
    other.name = i == 0 ? "r1" : "r0";
    if (i == 0) {
      o.local = cluster_redis();
      o.local_cluster_seeds = {rltest::cluster_seed()};
      other.redis = plain_redis();
    } else {
      o.local = plain_redis();
      other.redis = cluster_redis();
      other.cluster_seeds = {rltest::cluster_seed()};
    }
    o.remotes.push_back(std::move(other));
    return o;
  }
  std::vector<ratelimit::RegionalStorage> storages() const {
    std::vector<ratelimit::RegionalStorage> s;
    s.emplace_back(options(0));
    s.emplace_back(options(1));
    return s;
  }
  const std::string& prefix() const { return prefix_; }

 private:
  ratelimit::RedisOptions cluster_redis() const {
    ratelimit::RedisOptions o = rltest::test_cluster_options("regional").redis;  // fail_closed
    o.key_prefix = prefix_;
    return o;
  }
  ratelimit::RedisOptions plain_redis() const {
    ratelimit::RedisOptions o = cluster_redis();
    o.host = rltest::redis_endpoint().host;
    o.port = rltest::redis_endpoint().port;
    return o;
  }
  std::string prefix_ = rltest::cluster_unique_prefix("regional");
};

void exchange_both(const std::vector<ratelimit::RegionalStorage>& s, std::chrono::nanoseconds t) {
  for (const auto& r : s) REQUIRE(r.exchange(t).failed.empty());
}

std::string user(int k) { return "user-" + std::to_string(k); }

}  // namespace

TEMPLATE_TEST_CASE(
    "Regional windows with a region on a cluster reach N + (R - 1) U and never more, on keys "
    "of every primary",
    "[cluster][regional]", ratelimit::FixedWindowModel, ratelimit::SlidingCounterModel) {
  // N = 20, U = 5, R = 2: the bound is 20 + 5 = 25 per window. It is reached when both regions
  // have seen N - U = 15 and then each admits U = 5 the other has not seen (docs/far.md).
  ClusterAndPlain regions;
  auto s = regions.storages();
  constexpr std::int64_t N = 20, U = 5;
  const ratelimit::detail::WindowParams params{N, std::chrono::nanoseconds{1s}.count()};
  std::vector<ratelimit::RegionalWindowBinding<TestType>> b;
  for (auto& r : s) b.push_back(r.template bind<TestType>("api", params, U));
  const auto t = 10ms;  // one window: the sliding counter's previous window is empty
  constexpr int keys = 12;
  std::vector<std::int64_t> admitted(keys, 0);
  // r0 (the cluster) admits 15 of each key in three steps of U, both regions exchanging after
  // each step (it may not hold more than U unseen).
  for (int step = 0; step < 3; ++step) {
    for (int k = 0; k < keys; ++k) {
      INFO(user(k));
      for (int i = 0; i < 5; ++i) admitted[k] += b[0].apply(user(k), t, {1}).allowed ? 1 : 0;
      // A sixth is over the unseen bound: denied, degraded, retry after S; nothing spent, so
      // remaining is N less what r0 counts, 20 - 5 (step + 1).
      const auto over = b[0].apply(user(k), t, {1});
      CHECK_FALSE(over.allowed);
      CHECK(over.degraded);
      CHECK(over.retry_after == 100ms);
      CHECK(over.remaining == N - 5 * (step + 1));
    }
    exchange_both(s, t);
  }
  for (int k = 0; k < keys; ++k) {
    INFO(user(k));
    REQUIRE(admitted[k] == 15);
    // r1 (plain) received r0's 15: 20 - 15 = 5 left there.
    CHECK(b[1].apply(user(k), t, {1, true}).remaining == 5);
    // Each region admits U = 5 more, unseen by the other: 15 + 5 + 5 = 25 = N + U.
    for (std::size_t r = 0; r < 2; ++r)
      for (int i = 0; i < 10; ++i) admitted[k] += b[r].apply(user(k), t, {1}).allowed ? 1 : 0;
    CHECK(admitted[k] == N + U);
  }
  // Once the exchange catches up, both regions count 25 and deny by the limit.
  exchange_both(s, t);
  for (int k = 0; k < keys; ++k) {
    INFO(user(k));
    for (std::size_t r = 0; r < 2; ++r) {
      const auto d = b[r].apply(user(k), t, {1});
      CHECK_FALSE(d.allowed);
      CHECK_FALSE(d.degraded);
      CHECK(d.remaining == 0);
    }
  }
  CHECK(s[0].stats().degraded == 0);
  CHECK(s[0].local_stats().failures == 0);
  for (const auto n : keys_per_primary(regions.prefix())) CHECK(n > 0);
}

TEMPLATE_TEST_CASE(
    "Regional buckets with a region on a cluster reach C + (R - 1) U at one instant, then "
    "pay the debt back, on keys of every primary",
    "[cluster][regional][bucket]", ratelimit::TokenBucketModel, ratelimit::LeakyBucketModel) {
  // C = 20, r = 20 per second (50 ms a unit), U = 5, every request at t = 10 ms (no refill):
  // the bound over an instant is C + 0 + (R - 1) U = 25 with R = 2.
  ClusterAndPlain regions;
  auto s = regions.storages();
  constexpr std::int64_t C = 20, U = 5;
  const auto params = TestType::make_params({C, ratelimit::per_second(20)});
  std::vector<ratelimit::RegionalBucketBinding<TestType>> b;
  for (auto& r : s) b.push_back(r.template bind<TestType>("api", params, U));
  const auto t = 10ms;
  constexpr int keys = 12;
  std::vector<std::int64_t> admitted(keys, 0);
  for (int step = 0; step < 3; ++step) {
    for (int k = 0; k < keys; ++k) {
      INFO(user(k));
      for (int i = 0; i < 5; ++i) admitted[k] += b[0].apply(user(k), t, {1}).allowed ? 1 : 0;
      const auto over = b[0].apply(user(k), t, {1});
      CHECK_FALSE(over.allowed);
      CHECK(over.degraded);
      CHECK(over.retry_after == 100ms);             // S
      CHECK(over.remaining == C - 5 * (step + 1));  // nothing spent by the denial
    }
    exchange_both(s, t);
  }
  for (int k = 0; k < keys; ++k) {
    INFO(user(k));
    REQUIRE(admitted[k] == 15);
    for (std::size_t r = 0; r < 2; ++r)
      for (int i = 0; i < 10; ++i) admitted[k] += b[r].apply(user(k), t, {1}).allowed ? 1 : 0;
    CHECK(admitted[k] == C + U);
  }
  // Once the exchange catches up each region debits the other's 5 more, forced: each holds
  // 20 - 25 = -5 tokens. One unit needs 6 refills, 6 x 50 ms = 300 ms.
  exchange_both(s, t);
  for (int k = 0; k < keys; ++k) {
    INFO(user(k));
    for (std::size_t r = 0; r < 2; ++r) {
      const auto d = b[r].apply(user(k), t, {1});
      CHECK_FALSE(d.allowed);
      CHECK_FALSE(d.degraded);
      CHECK(d.remaining == 0);
      CHECK(d.retry_after == 300ms);
    }
    CHECK_FALSE(b[0].apply(user(k), t + 299ms, {1}).allowed);
    CHECK(b[0].apply(user(k), t + 300ms, {1}).allowed);
  }
  CHECK(s[0].stats().degraded == 0);
  for (const auto n : keys_per_primary(regions.prefix())) CHECK(n > 0);
}

TEST_CASE("A regional instance's exchange finds, by its sweep, what another instance left",
          "[cluster][regional]") {
  // Instance A of r0 (the cluster) admits 3 and stops before any exchange (as a process that
  // died). Instance B of r0 never decided that key, so no decision of its own marks the key's
  // slot: its rounds find the hash by the sweep, 256 slots a round from slot 0, so in round
  // slot / 256 + 1 (every slot within 16384 / 256 = 64 rounds).
  ClusterAndPlain regions;
  const ratelimit::detail::WindowParams params{10, std::chrono::nanoseconds{1s}.count()};
  const auto t = 5ms;
  {
    ratelimit::RegionalStorage a(regions.options(0));
    auto fw = a.bind<ratelimit::FixedWindowModel>("api", params, 10);
    for (int i = 0; i < 3; ++i) REQUIRE(fw.apply("left", t, {1}).allowed);
  }
  ratelimit::RegionalStorage b(regions.options(0)), r1(regions.options(1));
  (void)b.bind<ratelimit::FixedWindowModel>("api", params, 10);  // its dirty sets are claimed
  auto seen = r1.bind<ratelimit::FixedWindowModel>("api", params, 10);
  // The hash of window 0 of "left" (t = 5 ms), and its slot.
  const std::string hash =
      ratelimit::detail::redis_key(regions.prefix(), "left",
                                   ratelimit::detail::redis_key_tail("rfw", "api")) +
      ":0";
  const int slot = ratelimit::detail::redis_key_slot(hash);
  CHECK(seen.apply("left", t, {1, true}).remaining == 10);  // r1 has seen nothing yet
  int rounds = 0;
  std::uint64_t pushed = 0;
  while (pushed == 0 && rounds < 64) {
    ++rounds;
    pushed = b.exchange(t).units_pushed;
  }
  CHECK(rounds == slot / 256 + 1);
  CHECK(pushed == 3);
  CHECK(seen.apply("left", t, {1, true}).remaining == 7);  // 10 - 3
}

TEST_CASE("A regional storage refuses a bad cluster seed, naming the field",
          "[cluster][regional]") {
  ClusterAndPlain regions;
  auto o = regions.options(0);
  o.local_cluster_seeds = {"no-port"};
  CHECK_THROWS_WITH(ratelimit::RegionalStorage(o), Catch::Contains("local_cluster_seeds[0]"));
  o = regions.options(1);
  o.remotes[0].cluster_seeds.push_back("h:0");
  CHECK_THROWS_WITH(ratelimit::RegionalStorage(o), Catch::Contains("remotes[0].cluster_seeds[1]"));
}

TEST_CASE("Every slot's dirty-set tag hashes to that slot, as the cluster computes it",
          "[cluster][regional][slot]") {
  for (int slot = 0; slot < ratelimit::detail::redis_cluster_slots; ++slot) {
    const std::string& tag = ratelimit::detail::redis_slot_tag(slot);
    REQUIRE(!tag.empty());
    REQUIRE(tag.size() <= 6);
    REQUIRE((ratelimit::detail::crc16(tag) & 16383) == slot);
  }
  rltest::Admin admin(rltest::seed_node());
  for (const int slot : {0, 1, 8191, 16383}) {
    const std::string key = "p:{" + ratelimit::detail::redis_slot_tag(slot) + "}rg-dirtyrfw2:x";
    CHECK(admin.run({"CLUSTER", "KEYSLOT", key})->integer == slot);
  }
}

TEST_CASE("A regional key whose slot moves keeps its counts and exchange (ASK, then MOVED)",
          "[cluster][regional][resharding]") {
  ClusterAndPlain regions;
  auto s = regions.storages();
  // N = 20 per hour, U = 20 (no unseen denial here): only the counts matter.
  const ratelimit::detail::WindowParams params{20, std::chrono::nanoseconds{1h}.count()};
  auto r0 = s[0].bind<ratelimit::FixedWindowModel>("api", params, 20);
  auto r1 = s[1].bind<ratelimit::FixedWindowModel>("api", params, 20);
  const std::string key = "moving";
  const auto t = 5ms;
  for (int i = 0; i < 3; ++i) REQUIRE(r0.apply(key, t, {1}).allowed);
  // The slot of the key's hash (window 0), its owner, and another primary to move it to.
  const std::string hash =
      ratelimit::detail::redis_key(regions.prefix(), key,
                                   ratelimit::detail::redis_key_tail("rfw", "api")) +
      ":0";
  const int slot = ratelimit::detail::redis_key_slot(hash);
  rltest::ClusterNodeInfo src, dst;
  bool found = false;
  for (const auto& p : rltest::live_primaries())
    if (rltest::Admin(p.address)
            .run({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)})
            ->integer > 0) {
      src = p;
      found = true;
    }
  REQUIRE(found);
  for (const auto& p : rltest::live_primaries())
    if (p.id != src.id) dst = p;
  rltest::Admin(dst.address).run({"CLUSTER", "SETSLOT", std::to_string(slot), "IMPORTING", src.id});
  rltest::Admin(src.address).run({"CLUSTER", "SETSLOT", std::to_string(slot), "MIGRATING", dst.id});
  // The hash moves first, its slot's dirty set not yet (a reshard moves keys in batches): the
  // claim on the source cannot read the hash (the source would redirect it), so the round
  // pushes nothing and forgets nothing; r1 still counts nothing of r0's.
  rltest::Admin(src.address)
      .run({"MIGRATE", dst.address.host, std::to_string(dst.address.port), hash, "0", "5000"});
  CHECK(s[0].exchange(t).units_pushed == 0);
  CHECK(r1.apply(key, t, {1, true}).remaining == 20);
  // The rest of the slot (the dirty set) moves: the decision and the claim follow ASK to the
  // target. r0 counts 3 + 2 = 5: 15 left.
  migrate_every_key(slot, src.address, dst.address);
  for (int i = 0; i < 2; ++i) REQUIRE(r0.apply(key, t, {1}).allowed);
  CHECK(r0.apply(key, t, {1, true}).remaining == 15);
  exchange_both(s, t);
  CHECK(r1.apply(key, t, {1, true}).remaining == 15);  // r1 received r0's 5, the first 3 too
  // The target owns the slot: r0's decisions and r1's pushes to r0 follow MOVED.
  setslot_everywhere(slot, dst.id, dst.address, src.address);
  REQUIRE(r1.apply(key, t, {4}).allowed);  // r1: 5 + 4 = 9 counted, 11 left
  exchange_both(s, t);
  CHECK(r0.apply(key, t, {1, true}).remaining == 11);  // r0 received r1's 4
  REQUIRE(r0.apply(key, t, {11}).allowed);
  exchange_both(s, t);
  // 5 + 4 + 11 = 20 = N in both regions.
  CHECK_FALSE(r1.apply(key, t, {1}).allowed);
  CHECK_FALSE(r0.apply(key, t, {1}).allowed);
  CHECK(s[0].stats().degraded + s[1].stats().degraded == 0);
}

TEST_CASE("Asynchronous regional and leased decisions on a cluster equal the blocking ones",
          "[cluster][regional][lease][async]") {
  // The same history on key "<k>-sync" (apply) and "<k>-async" (apply_async, waited for), on
  // 6 keys of each kind: the decisions must be equal field for field. Regional: N = 20, U = 5,
  // so decisions 1-5 are admitted and 6-7 denied by the unseen bound; leased: N = 6, L = 4, so
  // decisions 1-6 are admitted (leases of 4 and 2) and 7 denied by the limit.
  const auto wait = [](auto&& start) {
    auto done = std::make_shared<std::promise<Decision>>();
    auto got = done->get_future();
    start([done](Decision d) { done->set_value(d); });
    REQUIRE(got.wait_for(30s) == std::future_status::ready);
    return got.get();
  };
  ClusterAndPlain regions;
  auto s = regions.storages();
  REQUIRE(s[0].warm_up());  // loads the scripts on every primary
  const ratelimit::detail::WindowParams regional{20, std::chrono::nanoseconds{1s}.count()};
  auto r0 = s[0].bind<ratelimit::FixedWindowModel>("api", regional, 5);
  ratelimit::LeasedStorage leased(lease_on_cluster(regions.prefix()));
  REQUIRE(leased.warm_up());
  const ratelimit::detail::WindowParams six{6, std::chrono::nanoseconds{1s}.count()};
  auto l = leased.bind<ratelimit::FixedWindowModel>("lease", six, 4);
  const auto t = 10ms;
  for (int k = 0; k < 6; ++k) {
    const std::string sync = user(k) + "-sync", async = user(k) + "-async";
    for (int i = 1; i <= 7; ++i) {
      INFO(user(k) << ", decision " << i);
      const Decision a = r0.apply(sync, t, {1});
      const Decision b = wait([&](auto done) { r0.apply_async(async, t, {1}, std::move(done)); });
      CHECK(a == b);
      CHECK(b.allowed == (i <= 5));
      CHECK(b.degraded == (i > 5));
      const Decision c = l.apply(sync, t, {1});
      const Decision d = wait([&](auto done) { l.apply_async(async, t, {1}, std::move(done)); });
      CHECK(c == d);
      CHECK(d.allowed == (i <= 6));
    }
  }
  CHECK(s[0].stats().degraded == 0);
  CHECK(leased.stats().degraded == 0);
}
