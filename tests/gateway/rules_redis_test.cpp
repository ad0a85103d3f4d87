// Rule sets on Redis (include/ratelimit/redis.hpp): one script per request decides every
// matching limit all-or-nothing, with the same decisions as the in-process rule set, and keys
// that share the client's hash tag. Needs RATELIMIT_TEST_REDIS (see support/redis_backend.hpp).
// Time only from ManualClock, in whole milliseconds (where the two storages agree exactly).

#include <catch2/catch.hpp>

#include <hiredis/hiredis.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>
#include <ratelimit/rules.hpp>

#include "support/redis_backend.hpp"

using namespace std::chrono_literals;
using ratelimit::DescriptorEntry;
using ratelimit::ManualClock;
using ratelimit::Rules;

namespace {

// One limit per algorithm, two of them nested under /login, one shared by every client.
// Five algorithms, each limit placed for the all-or-nothing cases below (their expected values
// name the rules: tb, log, leaky, fixed, counter, shared).
constexpr const char* mixed_rules = R"(domain: redis_rules
descriptors:
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 7, algorithm: token_bucket, name: tb}
  - key: path
    value: /login
    descriptors:
      - key: api_key
        rate_limit: {unit: minute, requests_per_unit: 4, algorithm: sliding_log, name: log}
  - key: path
    value: /upload
    descriptors:
      - key: api_key
        rate_limit: {unit: second, requests_per_unit: 3, algorithm: leaky_bucket, name: leaky}
  - key: path
    value: /search
    descriptors:
      - key: api_key
        rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window, name: fixed}
  - key: plan
    descriptors:
      - key: api_key
        rate_limit: {unit: minute, requests_per_unit: 6, name: counter}
  - key: path
    value: /report
    rate_limit: {unit: minute, requests_per_unit: 2, name: shared}
)";

/// Two limits per algorithm of the library's registry, read from it, so that an algorithm joins
/// the replay below by its registry line alone. For the i-th (from 0, in registry order) named
/// N: a per-client limit `N`, 2 + i per second, under the descriptor `use_N`; and a shared limit
/// `N_shared`, 10 + i per minute, under `shared: N`.
std::string all_algorithms() {
  std::string yaml = "domain: redis_rules_all\ndescriptors:\n";
  int i = 0;
  ratelimit::Algorithms::for_each([&]<class M>() {
    const std::string name(M::name);
    const auto limit = [&](const char* unit, int n, const std::string& rule) {
      return "{unit: " + std::string(unit) + ", requests_per_unit: " + std::to_string(n) +
             ", algorithm: " + name + ", name: " + rule + "}\n";
    };
    yaml += "  - key: use_" + name + "\n    descriptors:\n      - key: api_key\n" +
            "        rate_limit: " + limit("second", 2 + i, name);
    yaml += "  - key: shared\n    value: " + name +
            "\n    rate_limit: " + limit("minute", 10 + i, name + "_shared");
    ++i;
  });
  return yaml;
}

using RedisSet = ratelimit::RuleSet<ratelimit::RedisStorage, ManualClock>;
using LocalSet = ratelimit::RuleSet<ratelimit::InMemoryStorage, ManualClock>;

long long pttl(const std::string& key) {
  const auto& e = rltest::redis_endpoint();
  redisContext* c = redisConnect(e.host.c_str(), e.port);
  REQUIRE(c != nullptr);
  REQUIRE(c->err == 0);
  auto* r = static_cast<redisReply*>(redisCommand(c, "PTTL %b", key.data(), key.size()));
  REQUIRE(r != nullptr);
  const long long ttl = r->integer;
  freeReplyObject(r);
  redisFree(c);
  return ttl;
}

std::vector<std::string> redis_keys(const std::string& prefix) {
  const auto& e = rltest::redis_endpoint();
  redisContext* c = redisConnect(e.host.c_str(), e.port);
  REQUIRE(c != nullptr);
  REQUIRE(c->err == 0);
  std::vector<std::string> keys;
  auto* r = static_cast<redisReply*>(redisCommand(c, "KEYS %b*", prefix.data(), prefix.size()));
  REQUIRE(r != nullptr);
  for (std::size_t i = 0; i < r->elements; ++i)
    keys.emplace_back(r->element[i]->str, r->element[i]->len);
  freeReplyObject(r);
  redisFree(c);
  return keys;
}

}  // namespace

TEST_CASE("On Redis a request denied by one rule spends nothing from the others",
          "[rules][redis][atomic]") {
  ManualClock clock;
  const auto options = rltest::test_redis_options("rules-atomic");
  RedisSet set(Rules::from_string(mixed_rules), ratelimit::RedisStorage(options), clock);
  const std::initializer_list<DescriptorEntry> login = {{"api_key", "K"}, {"path", "/login"}};
  // tb: bucket of 7 refilled at 7/s; log: 4 per minute. Frozen clock.
  for (int i = 0; i < 4; ++i) REQUIRE(set.decide(login));  // tb 4/7, log 4/4
  for (int i = 0; i < 6; ++i) {
    const auto d = set.decide(login);  // log denies: tb must stay at 7 - 4 = 3
    REQUIRE_FALSE(d.allowed);
    CHECK_FALSE(d.decision().degraded);
    CHECK(d.outcomes[0].decision.remaining == 3);
  }
  // So exactly 3 plain requests remain.
  for (int i = 0; i < 3; ++i) REQUIRE(set.decide({{"api_key", "K"}}));
  CHECK_FALSE(set.decide({{"api_key", "K"}}).allowed);
  CHECK(set.storage().stats().degraded_decisions == 0);
}

TEST_CASE("On Redis a limit decided before the one that denies is left exactly, TTL included",
          "[rules][redis][atomic]") {
  // The script decides every limit before it writes any: tb (a token bucket) admits before
  // fixed (a fixed window) denies, and tb must then be left as it was.
  ManualClock clock;
  const auto options = rltest::test_redis_options("rules-undo");
  RedisSet set(Rules::from_string(mixed_rules), ratelimit::RedisStorage(options), clock);
  const std::initializer_list<DescriptorEntry> search = {{"api_key", "K"}, {"path", "/search"}};
  // tb: 7 per second (bucket of 7); fixed: 5 per minute. Frozen clock.
  for (int i = 0; i < 5; ++i) REQUIRE(set.decide(search));  // tb 5/7, fixed 5/5
  for (int i = 0; i < 4; ++i) {
    const auto d = set.decide(search);  // fixed denies; tb is left at 7 - 5 = 2
    REQUIRE_FALSE(d.allowed);
    CHECK(d.outcomes[0].decision.allowed);
    CHECK(d.outcomes[0].decision.remaining == 2);
    CHECK_FALSE(d.outcomes[1].decision.allowed);
  }
  const auto keys = redis_keys(options.key_prefix);
  CHECK(keys.size() == 2);                            // tb and fixed
  for (const auto& key : keys) CHECK(pttl(key) > 0);  // the keys still expire
  for (int i = 0; i < 2; ++i) REQUIRE(set.decide({{"api_key", "K"}}));
  CHECK_FALSE(set.decide({{"api_key", "K"}}).allowed);
}

TEST_CASE("On Redis a rule set decides exactly like the in-process one, every algorithm",
          "[rules][redis][registry]") {
  ManualClock clock;  // one clock drives both sets: same times, whole milliseconds
  const Rules rules = Rules::from_string(all_algorithms());
  RedisSet redis(rules, ratelimit::RedisStorage(rltest::test_redis_options("rules-same")), clock);
  LocalSet local(rules, {}, clock);
  std::vector<std::string> names;
  ratelimit::Algorithms::for_each([&]<class M>() { names.emplace_back(M::name); });
  // A fixed pseudo-random schedule (an LCG), so the run is the same every time: time steps of
  // 0..399 ms; a client of three; each algorithm's per-client limit with probability 1/2 (at
  // least one), so that most requests compose several algorithms in one script call; one
  // algorithm's shared limit with probability 1/3; a cost of 1..3.
  std::uint64_t x = 12345;
  const auto next = [&](std::uint64_t n) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return (x >> 33) % n;
  };
  int admitted = 0, denied = 0, composed = 0;
  for (int step = 0; step < 400; ++step) {
    clock.advance(std::chrono::milliseconds(next(400)));
    std::vector<DescriptorEntry> req{{"api_key", std::string(1, static_cast<char>('A' + next(3)))}};
    for (const auto& name : names)
      if (next(2) == 0) req.push_back({"use_" + name, "1"});
    if (req.size() == 1) req.push_back({"use_" + names[next(names.size())], "1"});
    if (next(3) == 0) req.push_back({"shared", names[next(names.size())]});
    const auto cost = static_cast<std::int64_t>(1 + next(3));
    const auto r = redis.decide(req, cost);
    const auto l = local.decide(req, cost);
    INFO("step " << step << " t = " << clock.now().count() << " ns, cost " << cost);
    REQUIRE(r.allowed == l.allowed);
    REQUIRE(r.outcomes.size() == l.outcomes.size());
    REQUIRE(r.outcomes.size() == req.size() - 1);  // one limit per entry but the client's
    for (std::size_t i = 0; i < r.outcomes.size(); ++i) {
      INFO("rule " << r.outcomes[i].rule->name);
      CHECK(r.outcomes[i].decision == l.outcomes[i].decision);
    }
    (r.allowed ? admitted : denied)++;
    composed += r.outcomes.size() > 1 ? 1 : 0;
  }
  // The schedule exercises both outcomes, and mostly several algorithms at once.
  CHECK(admitted > 50);
  CHECK(denied > 50);
  CHECK(composed > 200);
}

TEST_CASE("On Redis a request's per-client limits share the client's hash tag",
          "[rules][redis][keys]") {
  ManualClock clock;
  const auto options = rltest::test_redis_options("rules-keys");
  RedisSet set(Rules::from_string(mixed_rules), ratelimit::RedisStorage(options), clock);
  const std::string awkward("K}{:\0x", 6);  // hash-tag braces, ':' and NUL in the client key
  // Request 1 matches tb, log and counter, all per client.
  REQUIRE(set.decide({{"api_key", awkward}, {"path", "/login"}, {"plan", "free"}}));
  // Request 2 matches tb for K2 and the shared /report limit (no client key on its path).
  REQUIRE(set.decide({{"api_key", "K2"}, {"path", "/report"}}));
  std::set<std::string> tags;
  const auto keys = redis_keys(options.key_prefix);
  for (const auto& key : keys) tags.insert(std::string(ratelimit::detail::redis_hash_tag(key)));
  // Tags: RuleMatch::tag for per-client limits, the client's value as the counter key writes it,
  // length-prefixed ("6:" + the 6-byte key, "2:K2"), with '}' written %7D; a shared limit's tag
  // is its own counter key, here "" (its descriptors all name values), written "%".
  CHECK(tags == std::set<std::string>{"6:K%7D{:" + std::string(1, '\0') + "x", "2:K2", "%"});
  CHECK(keys.size() == 5);  // 3 for request 1, 2 for request 2
}

TEST_CASE("On Redis a blocked request reports the other limits without spending them",
          "[rules][redis][atomic]") {
  ManualClock clock;
  RedisSet set(Rules::from_string(R"(domain: block
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /admin
    rate_limit: {unit: minute, requests_per_unit: 0, name: blocked}
)"),
               ratelimit::RedisStorage(rltest::test_redis_options("rules-block")), clock);
  const auto d = set.decide({{"api_key", "K"}, {"path", "/admin"}});
  REQUIRE_FALSE(d.allowed);
  CHECK(d.decision().retry_after == ratelimit::Decision::never);
  CHECK(d.outcomes[0].decision.allowed);
  CHECK(d.outcomes[0].decision.remaining == 2);
  CHECK(set.decide({{"api_key", "K"}}, 2).allowed);  // both units still there
}

TEST_CASE("When Redis is unreachable every limit gets its failure policy, marked degraded",
          "[rules][redis][failure]") {
  ManualClock clock;
  ratelimit::RedisOptions o;
  o.host = "127.0.0.1";
  o.port = 1;  // nothing listens on port 1
  o.connect_timeout = 50ms;
  o.failure_policy = ratelimit::FailurePolicy::fail_open;
  RedisSet set(Rules::from_string(mixed_rules), ratelimit::RedisStorage(o), clock);
  const auto d = set.decide({{"api_key", "K"}, {"path", "/login"}});
  CHECK(d.allowed);  // fail_open admits
  REQUIRE(d.outcomes.size() == 2);
  CHECK(d.outcomes[0].decision.degraded);
  CHECK(d.outcomes[1].decision.degraded);
}

TEST_CASE("On Redis the login rule locks the user out for 1 h, through decide and decide_async",
          "[rules][redis][lockout]") {
  // 5 failures per hour (sliding log; the rules have no 15-minute unit), locked 1 h after the
  // limit denies (docs/rules.md, block_duration). The lock is a one-token bucket on Redis
  // under the rule's id + "/lockout", beside the log.
  ManualClock clock;
  const auto options = rltest::test_redis_options("rules-lockout");
  RedisSet set(Rules::from_string(R"(domain: auth
descriptors:
  - key: login_failure
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: sliding_log, block_duration: 1h}
)"),
               ratelimit::RedisStorage(options), clock);
  const ratelimit::RateLimitRequest alice{"auth", {{{{"login_failure", "alice"}}}}, 0};
  const auto async = [&] {
    return set.decide_async(std::span<const DescriptorEntry>(alice.descriptors[0].entries), 1)
        .get();
  };
  for (int i = 0; i < 5; ++i) {
    clock.set(std::chrono::minutes{i});
    REQUIRE((i % 2 == 0 ? set.decide(alice).allowed : async().allowed));
  }
  // The 6th at 5 min locks until 65 min (the log alone: 60 min, when t = 0 leaves).
  clock.set(5min);
  auto r = set.decide(alice);
  REQUIRE_FALSE(r.allowed);
  CHECK_FALSE(r.statuses[0].locked);
  CHECK(r.statuses[0].decision.retry_after == 1h);
  CHECK_FALSE(r.statuses[0].decision.degraded);
  // The lock is on Redis, with a TTL: the bucket is fresh again once full, at 65 min.
  std::string lock_key;
  for (const auto& k : redis_keys(options.key_prefix))
    if (k.find("/lockout") != std::string::npos) lock_key = k;
  REQUIRE_FALSE(lock_key.empty());
  CHECK(pttl(lock_key) > 0);
  // Locked at 35 min (30 min left), through both calls; nothing spent from the log.
  clock.set(35min);
  r = set.decide(alice);
  REQUIRE_FALSE(r.allowed);
  CHECK(r.statuses[0].locked);
  CHECK(r.statuses[0].decision.retry_after == 30min);
  CHECK(r.statuses[0].decision.remaining == 0);
  const auto flat = async();
  REQUIRE_FALSE(flat.allowed);
  CHECK(flat.decision().retry_after == 30min);
  // Free at 65 min: the 5 failures (0..4 min) have left the hour (t > 5 min), the locked
  // attempts were never logged: 5 - 1 = 4 left.
  clock.set(65min);
  r = set.decide(alice);
  REQUIRE(r.allowed);
  CHECK(r.statuses[0].decision.remaining == 4);
  CHECK(set.storage().stats().degraded_decisions == 0);
}
