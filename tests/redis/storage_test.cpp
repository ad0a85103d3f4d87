// What the Redis storage adds beyond the core's rules (which run on it through
// redis_rules_test): key encoding, TTLs, hostile keys, wrong-type keys, NOSCRIPT reload,
// Redis time, the batch call, the exact range, and bind/option validation.
// Time comes from ManualClock (whole ms) unless a test is about Redis's own clock.
#include <chrono>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

#include "redis_admin.hpp"
#include "support/algorithms.hpp"
#include "support/expect.hpp"
#include "support/redis_backend.hpp"

using namespace std::chrono_literals;
using namespace std::string_literals;
using ratelimit::Decision;
using ratelimit::ManualClock;
using ratelimit::RedisStorage;
using rltest::admitted;
using rltest::denied;

namespace {

template <template <class, class> class L, class Config>
auto redis_limiter(Config config, RedisStorage storage, ManualClock clock, std::string name = {}) {
  return L<ManualClock, RedisStorage>(config, std::move(storage), std::move(clock),
                                      std::move(name));
}

std::string pattern_of(const RedisStorage& s) { return s.options().key_prefix + "*"; }

}  // namespace

TEST_CASE("Key encoding never lets two different client keys, names or algorithms share a key",
          "[redis][keys]") {
  using ratelimit::detail::redis_key;
  using ratelimit::detail::redis_key_tail;
  const auto tail = redis_key_tail("tb", "api");
  // Pairs that a naive "prefix:key:name" join would confuse.
  std::set<std::string> seen;
  const std::vector<std::string> keys = {""s,     "a"s,  "a}"s,   "{a"s, "a:b"s,  "a\0"s, "\0a"s,
                                         "}"s,    "{"s,  "{}"s,   "::"s, "%"s,    "%25"s, "%7D"s,
                                         "a%7D"s, "%%"s, "a}:x"s, "\0"s, "\0\0"s, "ab"s,  "a:"s};
  for (const auto& k : keys) CHECK(seen.insert(redis_key("p:", k, tail)).second);
  // Same bytes split differently between the key and the limiter name.
  CHECK(redis_key("p:", "ab", redis_key_tail("tb", "c")) !=
        redis_key("p:", "a", redis_key_tail("tb", "bc")));
  CHECK(redis_key("p:", "k", redis_key_tail("tb", "")) !=
        redis_key("p:", "k", redis_key_tail("lb", "")));
  // A name holding ':' cannot pass for a name followed by a rule set's client key.
  CHECK(redis_key("p:", "k", redis_key_tail("tb", "n:x")) !=
        redis_key("p:", "x", redis_key_tail("tb", "n"), "k"));
  CHECK(redis_key("p:", "bob", redis_key_tail("tb", "")) !=
        redis_key("p:", "", redis_key_tail("tb", "bob"), "k"));
  // The hash tag is the key itself, '%' and '}' escaped: never empty, never cut short.
  CHECK(redis_key("p:", "user:12345", tail) == "p:{user:12345}tb2:api");
  CHECK(ratelimit::detail::redis_hash_tag(redis_key("p:", "", tail)) == "%");
  CHECK(ratelimit::detail::redis_hash_tag(redis_key("p:", "a}b", tail)) == "a%7Db");
  CHECK(ratelimit::detail::redis_hash_tag(redis_key("p:", "a%b", tail)) == "a%25b");
  // Both bytes, adjacent and alternating, and at both ends: '%' -> %25, '}' -> %7D.
  CHECK(ratelimit::detail::redis_hash_tag(redis_key("p:", "%x}%}}y%%z}", tail)) ==
        "%25x%7D%25%7D%7Dy%25%25z%7D");
  // A name escapes ':' instead (and '%'), and keeps '}'.
  CHECK(redis_key_tail("tb", ":a%}:") == "tb2:%3Aa%25}%3A");
  // Long runs of one special byte before the other, 4,096 bytes drawn from the special bytes
  // and a plain one, and long plain runs: escaped byte by byte as the definition says.
  const auto by_definition = [](std::string_view bytes) {
    std::string out;
    for (const char c : bytes) out += c == '%' ? "%25" : c == '}' ? "%7D" : std::string(1, c);
    return out;
  };
  std::string runs = std::string(1000, '%') + std::string(1000, '}') + "x" + std::string(3, '%');
  std::uint32_t x = 12345;
  const auto next = [&x] { return x = x * 1664525u + 1013904223u; };  // the same bytes every run
  std::string mixed;
  for (int i = 0; i < 4096; ++i) mixed += "%}:a"[next() >> 30];
  // Plain runs past 64 bytes (found by memchr) between special bytes, 0 to 299 bytes long;
  // and one '}' far behind many '%' (the '}' found once, then passed only at the end).
  std::string long_runs;
  for (int i = 0; i < 64; ++i) {
    const std::uint32_t r = next();
    long_runs += std::string((r >> 8) % 300, 'a');
    long_runs += "%}"[r >> 31];
  }
  std::string far_other;
  for (int i = 0; i < 20; ++i) far_other += std::string(100, 'a') + "%";
  far_other += std::string(100, 'a') + "}" + std::string(100, 'a');
  // (Keys this long appear in Redis as their digest, below: the escaping is checked directly.)
  for (const std::string& k : {runs, mixed, long_runs, far_other}) {
    std::string escaped;
    ratelimit::detail::append_escaped(escaped, k, '}');
    CHECK(escaped == by_definition(k));
  }
  // A rule set's tag holds the slot; the client key follows the name.
  CHECK(redis_key("p:", "k", tail, "t") == "p:{t}tb2:api:k");
}

TEST_CASE(
    "A client key or tag over 256 bytes appears in Redis as its SHA-256, distinct from "
    "every escaped key",
    "[redis][keys]") {
  using ratelimit::detail::redis_key;
  using ratelimit::detail::redis_key_tail;
  const auto tail = redis_key_tail("tb", "api");
  // FIPS 180-2, appendix B.3: the SHA-256 of one million 'a' bytes.
  const std::string million_a(1'000'000, 'a');
  const std::string digest = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  CHECK(redis_key("p:", million_a, tail) == "p:{%H" + digest + "}tb2:api");
  // As a rule set's tag (in braces), and as the client key after the tail: right after the
  // name, with no second ':' (which a name cannot hold, so no plain key looks like it).
  CHECK(redis_key("p:", "k", tail, million_a) == "p:{%H" + digest + "}tb2:api:k");
  CHECK(redis_key("p:", million_a, tail, "t") == "p:{t}tb2:api%H" + digest);
  // 256 bytes are shown as themselves, 257 by their digest: "p:{" + 66 + "}tb2:api".
  CHECK(redis_key("p:", std::string(256, 'x'), tail) == "p:{" + std::string(256, 'x') + "}tb2:api");
  CHECK(redis_key("p:", std::string(257, 'x'), tail).size() == 3 + 66 + 1 + 7);
  CHECK(redis_key("p:", std::string(257, 'x'), tail) !=
        redis_key("p:", std::string(258, 'x'), tail));
  // A short key spelling a digest is escaped ('%' -> %25) or follows a ':': never the same.
  const std::string spelled = "%H" + digest;
  CHECK(redis_key("p:", spelled, tail) != redis_key("p:", million_a, tail));
  CHECK(redis_key("p:", spelled, tail, "t") != redis_key("p:", million_a, tail, "t"));
  CHECK(redis_key("p:", "k", tail, spelled) != redis_key("p:", "k", tail, million_a));
  // Every key of one long client key keeps one hash tag: one Redis Cluster slot.
  CHECK(ratelimit::detail::redis_hash_tag(redis_key("p:", million_a, tail)) ==
        ratelimit::detail::redis_hash_tag(redis_key("p:", million_a, redis_key_tail("sl", "x"))));
}

TEST_CASE("A key larger than max_in_flight_bytes is limited exactly on a healthy Redis",
          "[redis][keys][hostile_client]") {
  // A tester's case: with max_in_flight_bytes at its 1 MiB minimum, keys of 400 KB and more
  // were never sent (one decision over the budget: overloaded), so fail_open admitted 20 of 20
  // where the limit is 3. A key's size no longer reaches Redis: 3 of 20 admitted, none
  // degraded, and the Redis key holds the digest, not the 2 MiB.
  auto o = rltest::test_redis_options("bigkey");
  o.max_in_flight_bytes = std::size_t{1} << 20;
  RedisStorage storage(o);
  ManualClock clock;
  auto fw = redis_limiter<ratelimit::FixedWindow>(ratelimit::per_hour(3), storage, clock);
  for (const std::size_t size : {std::size_t{400'000}, std::size_t{2} << 20}) {
    const std::string key(size, 'k');
    int admitted = 0, degraded = 0;
    for (int i = 0; i < 20; ++i) {
      const Decision d = fw.try_acquire(key);
      admitted += d.allowed ? 1 : 0;
      degraded += d.degraded ? 1 : 0;
    }
    INFO("key of " << size << " bytes");
    CHECK(admitted == 3);
    CHECK(degraded == 0);
  }
  rltest::RedisAdmin admin(rltest::redis_endpoint());
  const auto redis_keys = admin.scan(pattern_of(storage));
  CHECK(redis_keys.size() == 2);
  for (const auto& rk : redis_keys) CHECK(rk.size() < o.key_prefix.size() + 100);
}

TEST_CASE("A request's reserved size is the size of the RESP hiredis writes", "[redis][resp]") {
  using ratelimit::detail::resp_argument_bytes;
  using ratelimit::detail::resp_header_bytes;
  // From RESP's definition: an argument is "$<len>\r\n<bytes>\r\n", a command "*<n>\r\n".
  CHECK(resp_argument_bytes(0) == 6u);          // "$0" CRLF CRLF
  CHECK(resp_argument_bytes(9) == 15u);         // "$9" CRLF, 9 bytes, CRLF: 4 + 9 + 2
  CHECK(resp_argument_bytes(10) == 17u);        // "$10" CRLF, 10 bytes, CRLF: 5 + 10 + 2
  CHECK(resp_argument_bytes(12345) == 12355u);  // "$12345" CRLF: 8, + 12345 + 2
  CHECK(resp_header_bytes(1) == 4u);            // "*1" CRLF
  CHECK(resp_header_bytes(12) == 5u);           // "*12" CRLF
  // And hiredis agrees, for commands of 1 and 12 arguments across the digit boundaries.
  for (const std::vector<std::size_t>& lens :
       {std::vector<std::size_t>{6}, {0, 9, 10, 99, 100, 12345, 1, 2, 3, 4, 5, 6}}) {
    ratelimit::detail::RedisCommand cmd;
    std::size_t expected = resp_header_bytes(lens.size());
    for (const std::size_t n : lens) {
      cmd.emplace_back(n, 'a');
      expected += resp_argument_bytes(n);
    }
    std::string wire;
    ratelimit::detail::append_command(wire, cmd);
    CHECK(wire.size() == expected);
  }
}

TEST_CASE("Hostile client keys are distinct keys whose Redis keys all carry their own hash tag",
          "[redis][keys][token_bucket][sliding_log]") {
  ManualClock clock;
  RedisStorage storage(rltest::test_redis_options("hostile"));
  auto tb = redis_limiter<ratelimit::TokenBucket>(
      ratelimit::TokenBucketConfig{2, ratelimit::per_minute(1)}, storage, clock);
  auto log = redis_limiter<ratelimit::SlidingLog>(ratelimit::per_minute(2), storage, clock);
  const std::vector<std::string> keys = {""s,
                                         "{"s,
                                         "}"s,
                                         "{a}"s,
                                         ":"s,
                                         "a:b"s,
                                         "\0"s,
                                         "a\0b"s,
                                         std::string(10 * 1024, 'x'),
                                         std::string(10 * 1024, 'x') + "}",
                                         std::string(10 * 1024, '\0')};
  // Each key spends its own 2 tokens (B = 2): the first request leaves 1, the second 0, the
  // third is denied. A shared Redis key would show up as a key starting with 0 tokens.
  for (const auto& k : keys) {
    INFO("key of " << k.size() << " bytes");
    CHECK(tb.try_acquire(k).remaining == 1);
    CHECK(tb.try_acquire(k).remaining == 0);
    CHECK_FALSE(tb.try_acquire(k).allowed);
    CHECK(log.try_acquire(k, 2).remaining == 0);
  }
  rltest::RedisAdmin admin(rltest::redis_endpoint());
  const auto redis_keys = admin.scan(pattern_of(storage));
  // One token bucket key and one sliding log key per client key.
  CHECK(redis_keys.size() == keys.size() * 2);
  std::set<std::string> tags;
  for (const auto& rk : redis_keys) tags.insert(std::string(ratelimit::detail::redis_hash_tag(rk)));
  CHECK(tags.size() == keys.size());
}

TEST_CASE("Every key the scripts write has a TTL, and no longer than its state matters",
          "[redis][ttl]") {
  ManualClock clock;
  auto options = rltest::test_redis_options("ttl");
  options.ttl_margin = 0ms;
  RedisStorage storage(options);
  // Each TTL is the time until the state no longer matters, + 1 ms for the estimate's rounding:
  // token bucket 10 at 2/s after 1 token: (10 - 9) / 2 = 500 ms -> 501 ms;
  // leaky bucket 10 at 2/s after 3 units: 3 / 2 = 1.5 s -> 1501 ms;
  // fixed window 5 per 4 s at t = 1 s: to the window's end, 3 s -> 3001 ms;
  // sliding counter 5 per 4 s at t = 1 s: (k + 2) W - t = 8 - 1 = 7 s -> 7001 ms;
  // sliding log 5 per 4 s: the newest entry leaves after W = 4 s -> 4001 ms.
  clock.set(1s);
  auto tb = redis_limiter<ratelimit::TokenBucket>(
      ratelimit::TokenBucketConfig{10, ratelimit::per_second(2)}, storage, clock);
  auto lb = redis_limiter<ratelimit::LeakyBucket>(
      ratelimit::LeakyBucketConfig{10, ratelimit::per_second(2)}, storage, clock);
  auto fw = redis_limiter<ratelimit::FixedWindow>(ratelimit::Rate{5, 4s}, storage, clock);
  auto sc = redis_limiter<ratelimit::SlidingCounter>(ratelimit::Rate{5, 4s}, storage, clock);
  auto sl = redis_limiter<ratelimit::SlidingLog>(ratelimit::Rate{5, 4s}, storage, clock);
  REQUIRE(tb.try_acquire("k"));
  REQUIRE(lb.try_acquire("k", 3));
  REQUIRE(fw.try_acquire("k"));
  REQUIRE(sc.try_acquire("k"));
  REQUIRE(sl.try_acquire("k"));
  rltest::RedisAdmin admin(rltest::redis_endpoint());
  std::map<std::string, std::int64_t> most = {
      {"tb", 501}, {"lb", 1501}, {"fw", 3001}, {"sc", 7001}, {"sl", 4001}};
  const auto keys = admin.scan(pattern_of(storage));
  CHECK(keys.size() == 5);
  for (const auto& k : keys) {
    INFO(k);
    const auto ttl = admin.integer({"PTTL", k});
    CHECK(ttl > 0);
    for (const auto& [tag, ms] : most)
      if (k.find("}" + tag + ratelimit::detail::key_format.data()) != std::string::npos)
        CHECK(ttl <= ms);
  }
}

TEST_CASE("A key holding another data type degrades the decision by the policy and is left alone",
          "[redis][failure][token_bucket][sliding_log]") {
  ManualClock clock;
  auto options = rltest::test_redis_options("wrongtype");
  std::vector<ratelimit::RedisFailure> seen;
  options.on_failure = [&seen](const ratelimit::RedisFailure& f) { seen.push_back(f); };
  options.failure_policy = ratelimit::FailurePolicy::fail_open;
  RedisStorage storage(options);
  auto tb = storage.bind<ratelimit::TokenBucketModel>(
      "", ratelimit::TokenBucketModel::make_params({10, ratelimit::per_second(2)}));
  auto sl = storage.bind<ratelimit::SlidingLogModel>(
      "", ratelimit::detail::make_window_params(ratelimit::per_second(5)));
  rltest::RedisAdmin admin(rltest::redis_endpoint());
  const auto prefix = options.key_prefix;
  const auto tb_key = ratelimit::detail::redis_key(
      prefix, "k",
      ratelimit::detail::redis_key_tail(ratelimit::TokenBucketModel::Wire::key_tag, ""));
  const auto log_key = ratelimit::detail::redis_key(
      prefix, "k",
      ratelimit::detail::redis_key_tail(ratelimit::SlidingLogModel::Wire::key_tag, ""));
  admin.run({"HSET", tb_key, "at", "1"});
  admin.run({"PEXPIRE", tb_key, "600000"});
  admin.run({"SET", log_key, "not a zset", "PX", "600000"});

  // fail_open: admitted, degraded, limit = 10, remaining = limit, durations 0.
  const Decision d = tb.apply("k", clock.now(), {});
  CHECK(d == Decision{true, 10, 10, 0ns, 0ns, 0ns, true});
  const Decision l = sl.apply("k", clock.now(), {});
  CHECK(l == Decision{true, 5, 5, 0ns, 0ns, 0ns, true});
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].kind == ratelimit::RedisFailureKind::reply);
  CHECK(seen[0].message.find("WRONGTYPE") != std::string::npos);
  // Nothing was written: both keys are intact.
  CHECK(admin.integer({"HLEN", tb_key}) == 1);
  CHECK(std::string(admin.run({"GET", log_key})->str) == "not a zset");
  // A string of another shape (not 24 bytes) is refused by name, not misread as a bucket.
  admin.run({"SET", tb_key, "not a bucket", "PX", "600000"});
  CHECK(tb.apply("k", clock.now(), {}) == Decision{true, 10, 10, 0ns, 0ns, 0ns, true});
  REQUIRE(seen.size() == 3);
  CHECK(seen[2].message.find("does not hold ratelimit state") != std::string::npos);
  CHECK(std::string(admin.run({"GET", tb_key})->str) == "not a bucket");
  // A per-key error says nothing about the node: other keys still go to Redis.
  CHECK(tb.apply("other", clock.now(), {}) == admitted(10, 9, 500ms));
  const auto stats = storage.stats();
  CHECK(stats.degraded_decisions == 3);
  CHECK(stats.failures == 3);
  CHECK_FALSE(stats.circuit_open);
}

TEST_CASE("After SCRIPT FLUSH the storage reloads its scripts and decides exactly as before",
          "[redis][noscript]") {
  ManualClock clock;
  RedisStorage storage(rltest::test_redis_options("flush"));
  auto tb = redis_limiter<ratelimit::TokenBucket>(
      ratelimit::TokenBucketConfig{5, ratelimit::per_second(1)}, storage, clock);
  auto mem = ratelimit::TokenBucket<ManualClock>({5, ratelimit::per_second(1)}, {}, clock);
  rltest::RedisAdmin admin(rltest::redis_endpoint());
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 4; ++i) CHECK(tb.try_acquire("k") == mem.try_acquire("k"));
    admin.run({"SCRIPT", "FLUSH"});
    clock.advance(700ms);
  }
  CHECK(tb.try_acquire("k") == mem.try_acquire("k"));
  const auto stats = storage.stats();
  CHECK(stats.degraded_decisions == 0);
  CHECK(stats.script_loads >= 3);
}

TEST_CASE("Sliding log units admitted in the same microsecond by two instances all count",
          "[redis][sliding_log]") {
  ManualClock clock;
  auto options = rltest::test_redis_options("samemicro");
  RedisStorage a(options), b(options);  // two pools: two "instances"
  auto la = redis_limiter<ratelimit::SlidingLog>(ratelimit::per_second(10), a, clock);
  auto lb = redis_limiter<ratelimit::SlidingLog>(ratelimit::per_second(10), b, clock);
  // Time frozen: 5 + 5 unit requests fill N = 10; the 11th is denied. Requests in one
  // microsecond share one entry, whose units are the sum: 10 units, one entry plus the header.
  for (int i = 0; i < 5; ++i) {
    CHECK(la.try_acquire("k"));
    CHECK(lb.try_acquire("k"));
  }
  CHECK(la.try_acquire("k") == denied(10, 0, 1s, 1s));
  rltest::RedisAdmin admin(rltest::redis_endpoint());
  const auto keys = admin.scan(options.key_prefix + "*");
  REQUIRE(keys.size() == 1);
  CHECK(admin.integer({"ZCARD", keys.front()}) == 2);
}

TEST_CASE("Different algorithms and limiter names on one storage never share a client key's state",
          "[redis][keys]") {
  ManualClock clock;
  RedisStorage storage(rltest::test_redis_options("isolation"));
  auto a = redis_limiter<ratelimit::FixedWindow>(ratelimit::per_minute(1), storage, clock, "a");
  auto b = redis_limiter<ratelimit::FixedWindow>(ratelimit::per_minute(1), storage, clock, "b");
  auto c = redis_limiter<ratelimit::SlidingCounter>(ratelimit::per_minute(1), storage, clock, "a");
  // Each limiter's single slot: 1 - 1 = 0 left; a second request on "a" is denied.
  CHECK(a.try_acquire("k").remaining == 0);
  CHECK(b.try_acquire("k").remaining == 0);
  CHECK(c.try_acquire("k").remaining == 0);
  CHECK_FALSE(a.try_acquire("k").allowed);
}

TEST_CASE("The batch call decides many keys of different limiters in one round trip, in order",
          "[redis][batch]") {
  ManualClock clock;
  clock.set(10s);
  RedisStorage storage(rltest::test_redis_options("batch"));
  auto tb = redis_limiter<ratelimit::TokenBucket>(
      ratelimit::TokenBucketConfig{3, ratelimit::per_second(1)}, storage, clock);
  auto fw = redis_limiter<ratelimit::FixedWindow>(ratelimit::per_minute(2), storage, clock);
  auto sc = redis_limiter<ratelimit::SlidingCounter>(ratelimit::per_minute(2), storage, clock);
  auto lb = storage.bind<ratelimit::LeakyBucketModel>(
      "shaper", ratelimit::LeakyBucketModel::make_params({4, ratelimit::per_second(2)}));
  ratelimit::RedisBatch batch(storage);
  batch.add(tb, "user");     // T = 3 - 1 = 2, reset (3 - 2) / 1 = 1 s
  batch.add(fw, "ip");       // c = 1 of 2, reset at the minute's end: 60 - 10 = 50 s
  batch.add(tb, "user", 2);  // T = 2 - 2 = 0, reset 3 s
  batch.add(fw, "ip", 2);    // c + 2 = 3 > 2: denied until the window ends, 50 s
  batch.add(sc, "route");    // c = 1: E = 1, remaining 1, reset (k + 2) W - t = 110 s
  batch.add(lb, "q", clock.now(), {2, false, Decision::never});  // L = 0 -> 2; delay 0, reset 1 s
  batch.add(lb, "q", clock.now(),
            {1, false, Decision::never});  // waits L / r = 1 s; L = 3 -> 1.5 s
  REQUIRE(batch.size() == 7);
  const auto d = batch.run();
  REQUIRE(d.size() == 7);
  CHECK(d[0] == admitted(3, 2, 1s));
  CHECK(d[1] == admitted(2, 1, 50s));
  CHECK(d[2] == admitted(3, 0, 3s));
  CHECK(d[3] == denied(2, 1, 50s, 50s));
  CHECK(d[4] == admitted(2, 1, 110s));
  CHECK(d[5] == admitted(4, 2, 1s));
  CHECK(d[6] == admitted(4, 1, 1500ms, 1s));
  CHECK(batch.size() == 0);
  // A binding of another storage is refused.
  RedisStorage other(rltest::test_redis_options("batch-other"));
  auto foreign = other.bind<ratelimit::FixedWindowModel>(
      "", ratelimit::detail::make_window_params(ratelimit::per_minute(2)));
  CHECK_THROWS_AS(batch.add(foreign, "k", clock.now()), std::invalid_argument);
}

TEST_CASE("With Redis time, limiters whose clocks disagree still share one limit",
          "[redis][time][fixed_window]") {
  auto options = rltest::test_redis_options("redistime");
  options.time_source = ratelimit::TimeSource::redis;
  RedisStorage storage(options);
  ManualClock early, late;
  late.set(std::chrono::hours{24 * 300});
  // 1 per hour: with client time these two would sit in different windows and both pass.
  auto a = redis_limiter<ratelimit::FixedWindow>(ratelimit::per_hour(1), storage, early);
  auto b = redis_limiter<ratelimit::FixedWindow>(ratelimit::per_hour(1), storage, late);
  const Decision first = a.try_acquire("k");
  CHECK(first.allowed);
  const Decision second = b.try_acquire("k");
  CHECK_FALSE(second.allowed);
  // Denied until the end of Redis's current hour: within (0, 1 h], and it matches reset_after.
  CHECK(second.retry_after > 0ns);
  CHECK(second.retry_after <= 1h);
  CHECK(second.retry_after == second.reset_after);
}

TEST_CASE("The Redis storage decides like the in-memory one at the ends of the core range",
          "[redis][range]") {
  ManualClock clock;
  RedisStorage storage(rltest::test_redis_options("range"));
  const auto near_max = std::chrono::nanoseconds{(std::int64_t{1} << 62) / 1'000'000 * 1'000'000};
  struct Bucket {
    std::int64_t capacity;
    ratelimit::Rate rate;
  };
  // Capacity 1e9 at 1e9/s; 1 per 366 days; 1e9 per 1e7 per 365 days (a refill of ~100 years).
  const std::vector<Bucket> buckets = {
      {1'000'000'000, ratelimit::per_second(1'000'000'000)},
      {1, ratelimit::Rate{1, std::chrono::hours{24 * 366}}},
      {1'000'000'000, ratelimit::Rate{10'000'000, std::chrono::hours{24 * 365}}}};
  for (const auto& b : buckets) {
    auto redis = redis_limiter<ratelimit::TokenBucket>(
        ratelimit::TokenBucketConfig{b.capacity, b.rate}, storage, clock,
        std::to_string(b.capacity) + "/" + std::to_string(b.rate.period.count()));
    auto leaky = redis_limiter<ratelimit::LeakyBucket>(
        ratelimit::LeakyBucketConfig{b.capacity, b.rate}, storage, clock,
        std::to_string(b.capacity) + "/" + std::to_string(b.rate.period.count()));
    ratelimit::TokenBucket<ManualClock> mem({b.capacity, b.rate}, {}, clock);
    ratelimit::LeakyBucket<ManualClock> mem_leaky({b.capacity, b.rate}, {}, clock);
    for (const auto start : {0ns, near_max - std::chrono::hours{24 * 400}}) {
      clock.set(start);
      const std::string key = "k" + std::to_string(start.count());
      for (const std::int64_t cost :
           {b.capacity, std::int64_t{1}, b.capacity / 2 + 1, std::int64_t{7}}) {
        CHECK(redis.try_acquire(key, cost) == mem.try_acquire(key, cost));
        CHECK(leaky.try_acquire(key, cost) == mem_leaky.try_acquire(key, cost));
        clock.advance(std::chrono::hours{24 * 10} + 1ms);
      }
      CHECK(redis.peek(key) == mem.peek(key));
    }
  }
  // Windows of 366 days near the clock's end, and of 1 ms.
  for (const auto rate :
       {ratelimit::Rate{1'000'000'000, std::chrono::hours{24 * 366}}, ratelimit::Rate{3, 1ms}}) {
    auto fw = redis_limiter<ratelimit::FixedWindow>(rate, storage, clock,
                                                    "fw" + std::to_string(rate.period.count()));
    auto sc = redis_limiter<ratelimit::SlidingCounter>(rate, storage, clock,
                                                       "sc" + std::to_string(rate.period.count()));
    auto sl = redis_limiter<ratelimit::SlidingLog>(rate, storage, clock,
                                                   "sl" + std::to_string(rate.period.count()));
    ratelimit::FixedWindow<ManualClock> mfw(rate, {}, clock);
    ratelimit::SlidingCounter<ManualClock> msc(rate, {}, clock);
    ratelimit::SlidingLog<ManualClock> msl(rate, {}, clock);
    clock.set(near_max - rate.period * 3 - 10ms);
    for (int i = 0; i < 6; ++i) {
      const std::int64_t cost = i % 2 == 0 ? rate.count / 2 + 1 : 1;
      CHECK(fw.try_acquire("k", cost) == mfw.try_acquire("k", cost));
      CHECK(sc.try_acquire("k", cost) == msc.try_acquire("k", cost));
      CHECK(sl.try_acquire("k", cost) == msl.try_acquire("k", cost));
      clock.advance(std::chrono::duration_cast<std::chrono::milliseconds>(rate.period / 3) + 1ms);
    }
  }
}

TEST_CASE("The Redis backend decides at the clock's reading rounded down to a whole microsecond",
          "[redis][time][token_bucket]") {
  ManualClock clock;
  RedisStorage storage(rltest::test_redis_options("resolution"));
  auto tb = redis_limiter<ratelimit::TokenBucket>(
      ratelimit::TokenBucketConfig{1, ratelimit::per_second(1)}, storage, clock);
  clock.set(1'000'999ns);  // decided at 1 000 000 ns (1 ms)
  CHECK(tb.try_acquire("k") == admitted(1, 0, 1s));
  // Denied at 1.5 ms: the token is back at 1 ms + 1 s, so retry_after = 1 s - 0.5 ms.
  clock.set(1'500'000ns);
  CHECK(tb.try_acquire("k") == denied(1, 0, 999'500'000ns, 999'500'000ns));
}

TEST_CASE("bind and the options reject what the Redis storage cannot honour, naming the field",
          "[redis][validation]") {
  RedisStorage storage(rltest::test_redis_options("validate"));
  const auto message_of = [](auto&& f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  CHECK_THAT(message_of([&] {
               storage.bind<ratelimit::TokenBucketModel>("", {0, 1, 1'000'000});
             }),
             Catch::Contains("params.limit = 0"));
  CHECK_THAT(message_of([&] {
               storage.bind<ratelimit::FixedWindowModel>("", {5, 999'999});
             }),
             Catch::Contains("params.window (ns) = 999999"));
  ratelimit::RedisOptions o;
  o.key_prefix = "a{b";
  CHECK_THAT(message_of([&] { RedisStorage s(o); }), Catch::Contains("key_prefix"));
  o = {};
  o.pool_size = 0;
  CHECK_THAT(message_of([&] { RedisStorage s(o); }), Catch::Contains("pool_size = 0"));
  o = {};
  o.command_timeout = 0ms;
  CHECK_THAT(message_of([&] { RedisStorage s(o); }), Catch::Contains("command_timeout (ms) = 0"));
  o = {};
  o.fallback_divisor = 0;
  CHECK_THAT(message_of([&] { RedisStorage s(o); }), Catch::Contains("fallback_divisor = 0"));
  auto tb = storage.bind<ratelimit::TokenBucketModel>(
      "", ratelimit::TokenBucketModel::make_params({1, ratelimit::per_second(1)}));
  CHECK_THROWS_AS(tb.apply("k", 0ns, {0, false, Decision::never}), std::invalid_argument);
}

TEST_CASE("No key a limiter writes is left without a TTL, whatever it was asked", "[redis][ttl]") {
  // Every algorithm, on keys of its own storage only (the suite's storages and the other cases'
  // may or may not have run before this one), through every path that writes: admissions of
  // every cost, denials, costs above the limit, acquire waiting through the clock, and resets
  // (of one key while its neighbours live on). Peeks write nothing.
  ManualClock clock;
  RedisStorage storage(rltest::test_redis_options("scan"));
  rltest::for_each_algorithm([&]<class Algo>() {
    INFO("algorithm: " << Algo::name);
    auto limiter = Algo::make(rltest::Shape{3, ratelimit::per_second(3)}, storage, clock);
    for (int i = 0; i < 200; ++i) {
      const std::string key = "k" + std::to_string(i % 7);
      (void)limiter.try_acquire(key, 1 + i % 3);
      if (i % 17 == 0) (void)limiter.try_acquire(key, 4);
      if (i % 19 == 0) (void)limiter.acquire(key, 2, 500ms);
      if (i % 11 == 0) limiter.reset(key);
      clock.advance(std::chrono::milliseconds{(i * 37) % 450});
    }
  });
  rltest::RedisAdmin admin(rltest::redis_endpoint());
  const auto keys = admin.scan(pattern_of(storage));
  CHECK_FALSE(keys.empty());
  for (const auto& k : keys) {
    INFO(k);
    // -1 would be a key without expiry; -2 one gone already (the margin is 10 minutes).
    CHECK(admin.integer({"PTTL", k}) > 0);
  }
}

TEST_CASE("A decision's Redis wait is cut to what is left of one command timeout",
          "[redis][timeout]") {
  // Regression: a decision that had to open a connection could wait connect_timeout and then
  // command_timeout again, while a degraded decision must take no longer than the command
  // timeout. time_left gave every wait (pool, connect, replies) only what remains of it; the
  // library's waits are now the I/O thread's (deadline_test.cpp), and time_left cuts the waits
  // of the blocking connection the tests keep (blocking_connection.hpp).
  using namespace std::chrono;
  using rltest::time_left;
  const steady_clock::time_point t0{};
  const milliseconds cap{100};                   // command_timeout
  const auto deadline = t0 + cap;                // set when the decision starts
  CHECK(time_left(deadline, t0, cap) == 100ms);  // nothing spent yet
  // 1 us spent: 99.999 ms left, rounded up to 100 ms so the socket timeout needs no change.
  CHECK(time_left(deadline, t0 + 1us, cap) == 100ms);
  // 40.5 ms spent connecting: 59.5 ms left, rounded up to 60 ms.
  CHECK(time_left(deadline, t0 + 40500us, cap) == 60ms);
  CHECK(time_left(deadline, t0 + 100ms, cap) == 0ms);  // the deadline itself: nothing left
  CHECK(time_left(deadline, t0 + 250ms, cap) == 0ms);  // past it
  // A longer budget is capped: never more than one command timeout per wait.
  CHECK(time_left(t0 + 1s, t0, cap) == 100ms);
}

TEST_CASE("State written by the previous key format is never read: the new format starts fresh",
          "[redis][keys][format]") {
  // Format 1 (before the compact key format) kept a bucket as a hash {at, last} under
  // <prefix>{k<hex(key)>}:token_bucket:<hex(name)>. During a rolling upgrade the two formats
  // count separately (docs/redis.md, "Upgrades"): format 2 never reads, writes or deletes the
  // old key, which expires by its own TTL.
  ManualClock clock;
  clock.set(10s);
  const auto options = rltest::test_redis_options("format1");
  RedisStorage storage(options);
  auto tb = redis_limiter<ratelimit::TokenBucket>(
      ratelimit::TokenBucketConfig{2, ratelimit::per_minute(2)}, storage, clock, "api");
  rltest::RedisAdmin admin(rltest::redis_endpoint());
  // hex("k") = 6b, hex("api") = 617069. A spent bucket: full again at 70 s (in ns x count 1).
  const std::string old_key = options.key_prefix + "{k6b}:token_bucket:617069";
  admin.run({"HSET", old_key, "at", "70000000000", "last", "10000000"});
  admin.run({"PEXPIRE", old_key, "600000"});
  // Format 2 decides "k" as a fresh bucket of 2: 1 left, then 0, then denied (a token every
  // 30 s: retry after 30 s).
  CHECK(tb.try_acquire("k") == admitted(2, 1, 30s));
  CHECK(tb.try_acquire("k") == admitted(2, 0, 60s));
  CHECK(tb.try_acquire("k") == denied(2, 0, 30s, 60s));
  CHECK(admin.integer({"HLEN", old_key}) == 2);
  CHECK(std::string(admin.run({"HGET", old_key, "at"})->str) == "70000000000");
  CHECK(storage.stats().degraded_decisions == 0);
}

TEST_CASE("Every algorithm keeps one Redis key per client key, so no half of a state can be lost",
          "[redis][keys]") {
  ManualClock clock;
  const auto options = rltest::test_redis_options("onekey");
  RedisStorage storage(options);
  rltest::RedisAdmin admin(rltest::redis_endpoint());
  rltest::for_each_algorithm([&]<class Algo>() {
    INFO("algorithm: " << Algo::name);
    auto limiter =
        Algo::make(rltest::Shape{100, ratelimit::per_second(100)}, storage, clock, Algo::name);
    // Admissions at three times, so logs hold several entries.
    for (int i = 0; i < 3; ++i) {
      REQUIRE(limiter.try_acquire("k"));
      clock.advance(1ms);
    }
    const auto keys = admin.scan(options.key_prefix + "*" + std::string(Algo::name));
    CHECK(keys.size() == 1);
    // Deleting that key (eviction, FLUSHDB) leaves a fresh client key, never an error: the full
    // limit of 100 is back.
    for (const auto& k : keys) admin.run({"DEL", k});
    CHECK(limiter.try_acquire("k").remaining == 99);
  });
  CHECK(storage.stats().degraded_decisions == 0);
}

TEST_CASE("A concurrency limit on Redis is exact at microsecond times of today's epoch",
          "[redis][concurrency_limit]") {
  // Lease ends are compared in whole us; a time since 1970 in us has 16 digits, more
  // than Lua's own number formatting keeps (14): the script must not lose the last ones.
  using namespace std::chrono_literals;
  ratelimit::ManualClock clock;
  const auto start = std::chrono::nanoseconds{1'764'000'123'457'123'000};  // 2025-11-24, odd us
  clock.set(start);
  ratelimit::ConcurrencyLimiter<ratelimit::ManualClock, ratelimit::RedisStorage> limiter(
      {1, 1s}, ratelimit::RedisStorage(rltest::test_redis_options("concurrency-us")), clock);
  auto held = limiter.try_acquire("k");
  REQUIRE(held);
  // The lease ends at start + 1 s: held 1 us before, free at that very us.
  clock.set(start + 1s - 1us);
  const auto blocked = limiter.try_acquire("k");
  CHECK_FALSE(blocked);
  CHECK(blocked.decision().retry_after == 1us);
  clock.set(start + 1s);
  CHECK(limiter.try_acquire("k"));
}
