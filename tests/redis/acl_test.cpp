// Issue 13, Tests, ACL users and the eviction warning. Production Redis is reached as a
// restricted ACL user, so a user granted only what the scripts need (their script commands, the
// data commands they call, on the storage's key prefix: docs/redis.md "Permissions (ACL)") must
// decide every algorithm exactly, and a wrong password must degrade with a connect failure that
// says what Redis answered. And since an eviction policy that can evict the library's keys
// silently resets limits, a storage warns once (RedisFailureKind::warning) on a server whose
// maxmemory-policy is anything but noeviction, and never on one with noeviction. The users live
// on the shared test Redis (deleted at the end); the eviction policies on servers of the test's
// own. Time is a ManualClock; only real servers are waited for, by polling with a limit.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

#include "redis_admin.hpp"
#include "servers.hpp"
#include "support/expect.hpp"
#include "support/redis_backend.hpp"

using namespace std::chrono_literals;

namespace {

/// What the scripts need (docs/redis.md "Permissions (ACL)"): the script commands, and the
/// data commands the five scripts call (`+time` for TimeSource::redis, `+del` for reset).
const std::vector<std::string> script_commands = {
    "+evalsha",          "+eval", "+del",  "+get",     "+set", "+zrange", "+zrangebyscore",
    "+zremrangebyscore", "+zrem", "+zadd", "+pexpire", "+time"};

/// An ACL user on the shared test Redis, allowed `commands` on the keys under `prefix` only
/// (and nothing else: `reset` first, no channels), deleted when the object dies.
class AclUser {
 public:
  AclUser(const std::string& prefix, const std::vector<std::string>& commands)
      : admin_(rltest::redis_endpoint()),
        name_(rltest::unique_prefix("acl-user")),
        password_("pw-" + name_) {
    std::vector<std::string> args{
        "ACL",           "SETUSER",          name_,           "reset", "on",
        ">" + password_, "~" + prefix + "*", "resetchannels", "-@all"};
    args.insert(args.end(), commands.begin(), commands.end());
    const auto reply = admin_.run(args);
    if (rltest::reply_text(reply.get()) != "OK")
      throw std::runtime_error("ACL SETUSER failed: " + rltest::reply_text(reply.get()));
  }
  ~AclUser() {
    try {
      admin_.run({"ACL", "DELUSER", name_});
    } catch (...) {  // the server is gone: so is the user
    }
  }
  AclUser(const AclUser&) = delete;
  AclUser& operator=(const AclUser&) = delete;

  const std::string& name() const { return name_; }
  const std::string& password() const { return password_; }

 private:
  rltest::RedisAdmin admin_;
  std::string name_;
  std::string password_;
};

/// The same requests through a Redis limiter and an in-memory twin on one clock: Redis
/// decisions equal the in-process ones in every field at whole-microsecond times (the scripts
/// are the models' twins), so any refused command would show as a degraded decision that
/// differs from the twin's. Time moves 300 ms between requests, so refills and window ends
/// are part of what is compared; `reset` (DEL) must bring the key back to fresh on both.
template <template <class, class> class Limiter, class Config>
void check_like_in_process(const Config& config, const ratelimit::RedisStorage& storage) {
  ratelimit::ManualClock clock;
  clock.set(10s);
  Limiter<ratelimit::ManualClock, ratelimit::RedisStorage> shared(config, storage, clock);
  Limiter<ratelimit::ManualClock, ratelimit::InMemoryStorage> twin(config, {}, clock);
  for (int i = 0; i < 6; ++i) {
    INFO("request " << i);
    const ratelimit::Decision d = shared.try_acquire("k");
    CHECK_FALSE(d.degraded);
    CHECK(d == twin.try_acquire("k"));
    clock.advance(300ms);
  }
  shared.reset("k");
  twin.reset("k");
  CHECK(shared.try_acquire("k") == twin.try_acquire("k"));
}

/// Every algorithm on `storage`, limit 3 per second (a bucket of 3 refilled at 3/s).
void check_every_algorithm(const ratelimit::RedisStorage& storage) {
  const auto rate = ratelimit::per_second(3);
  check_like_in_process<ratelimit::TokenBucket>(ratelimit::TokenBucketConfig{3, rate}, storage);
  check_like_in_process<ratelimit::LeakyBucket>(ratelimit::LeakyBucketConfig{3, rate}, storage);
  check_like_in_process<ratelimit::FixedWindow>(rate, storage);
  check_like_in_process<ratelimit::SlidingLog>(rate, storage);
  check_like_in_process<ratelimit::SlidingCounter>(rate, storage);
}

ratelimit::RedisOptions options_for_server(const rltest::ThrowawayRedis& server) {
  ratelimit::RedisOptions o;
  o.host = server.endpoint().host;
  o.port = server.endpoint().port;
  o.key_prefix = rltest::unique_prefix("evict");
  o.failure_policy = ratelimit::FailurePolicy::fail_closed;
  o.connect_timeout = 2s;
  o.command_timeout = 5s;
  o.ttl_margin = std::chrono::minutes{10};
  return o;
}

/// 4 threads x 50 decisions on their own keys (so both pooled connections are likely to open),
/// each admitted by Redis: a bucket of 1,000 on a frozen clock never runs out. Returns how many
/// were degraded (0 expected).
int decide_from_threads(const ratelimit::RedisStorage& storage) {
  ratelimit::ManualClock clock;
  ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::RedisStorage> bucket(
      {1'000, ratelimit::per_second(1)}, storage, clock);
  std::atomic<int> degraded{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      const std::string key = "thread-" + std::to_string(t);
      for (int i = 0; i < 50; ++i)
        if (bucket.try_acquire(key).degraded) ++degraded;
    });
  for (auto& th : threads) th.join();
  return degraded.load();
}

}  // namespace

TEST_CASE("An ACL user granted only what the scripts need decides every algorithm exactly",
          "[redis][acl]") {
  auto options = rltest::test_redis_options("acl");
  SECTION("the scripts' commands alone (INFO refused: the eviction policy cannot be read)") {
    AclUser user(options.key_prefix, script_commands);
    options.username = user.name();
    options.password = user.password();
    rltest::FailureLog log;
    options.on_failure = log.callback();
    ratelimit::RedisStorage storage(options);
    check_every_algorithm(storage);
    // Nothing failed; a note that the policy could not be read would be a warning, not more.
    for (const auto& f : log.snapshot()) {
      INFO("on_failure: " << f.message);
      CHECK(f.kind == ratelimit::RedisFailureKind::warning);
    }
  }
  SECTION("plus INFO, so the eviction policy is read: the shared server's noeviction is fine") {
    auto commands = script_commands;
    commands.push_back("+info");
    AclUser user(options.key_prefix, commands);
    options.username = user.name();
    options.password = user.password();
    rltest::FailureLog log;
    options.on_failure = log.callback();
    ratelimit::RedisStorage storage(options);
    check_every_algorithm(storage);
    CHECK(log.snapshot().empty());
  }
  SECTION("with Redis's own time (TIME inside the script)") {
    AclUser user(options.key_prefix, script_commands);
    options.username = user.name();
    options.password = user.password();
    options.time_source = ratelimit::TimeSource::redis;
    ratelimit::RedisStorage storage(options);
    ratelimit::ManualClock clock;
    // Capacity 3 refilled at 1 per hour: whatever Redis's time, the first request on a fresh
    // key leaves 2 and the bucket is full again one token (1 h) later.
    ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::RedisStorage> bucket(
        {3, ratelimit::per_hour(1)}, storage, clock);
    CHECK(bucket.try_acquire("k") == rltest::admitted(3, 2, 1h));
  }
}

TEST_CASE(
    "A wrong password degrades every decision with a connect failure saying what Redis "
    "answered",
    "[redis][acl][failure]") {
  auto options = rltest::test_redis_options("acl-wrong");
  AclUser user(options.key_prefix, script_commands);
  options.username = user.name();
  options.password = user.password() + "-not";
  options.breaker_backoff = 20ms;
  options.breaker_max_backoff = 100ms;
  rltest::FailureLog log;
  options.on_failure = log.callback();
  ratelimit::RedisStorage storage(options);
  ratelimit::ManualClock clock;
  ratelimit::FixedWindow<ratelimit::ManualClock, ratelimit::RedisStorage> window(
      ratelimit::per_minute(4), storage, clock);
  for (int i = 0; i < 3; ++i) {
    const ratelimit::Decision d = window.try_acquire("k");
    CHECK(d.degraded);
    CHECK_FALSE(d.allowed);  // fail_closed
  }
  CHECK(storage.stats().decisions == 0);
  const auto seen = log.snapshot();
  REQUIRE_FALSE(seen.empty());
  for (const auto& f : seen) {
    INFO("on_failure: " << f.message);
    CHECK(f.kind == ratelimit::RedisFailureKind::connect);
    // Redis 7 answers AUTH with "WRONGPASS invalid username-password pair or user is disabled."
    CHECK(rltest::contains_nocase(f.message, "WRONGPASS"));
  }
  // Nothing was written under the prefix (the user never got in).
  rltest::RedisAdmin admin(rltest::redis_endpoint());
  CHECK(admin.scan(options.key_prefix + "*").empty());
}

TEST_CASE("An eviction policy that can evict the library's keys is reported once per storage",
          "[redis][eviction]") {
  // allkeys-lru evicts any key; volatile-ttl evicts keys with a TTL, which every key the
  // scripts write has. Either can reset a limit silently.
  const std::string policy = GENERATE(std::string("allkeys-lru"), std::string("volatile-ttl"));
  INFO("maxmemory-policy " << policy);
  rltest::ThrowawayRedis server({"--maxmemory-policy", policy});
  auto options = options_for_server(server);
  rltest::FailureLog log;
  options.on_failure = log.callback();
  ratelimit::RedisStorage storage(options);
  CHECK(decide_from_threads(storage) == 0);
  // A copy is the same storage (it shares the I/O thread and the connections): no new warning.
  const ratelimit::RedisStorage copy = storage;
  CHECK(decide_from_threads(copy) == 0);
  REQUIRE(rltest::poll_until([&] { return log.count(ratelimit::RedisFailureKind::warning) >= 1; },
                             10s));
  const auto seen = log.snapshot();
  REQUIRE(seen.size() == 1);
  CHECK(seen.front().kind == ratelimit::RedisFailureKind::warning);
  INFO("warning: " << seen.front().message);
  CHECK(rltest::contains_nocase(seen.front().message, policy));
}

TEST_CASE("noeviction gives no warning", "[redis][eviction]") {
  rltest::ThrowawayRedis server({"--maxmemory-policy", "noeviction"});
  auto options = options_for_server(server);
  rltest::FailureLog log;
  options.on_failure = log.callback();
  ratelimit::RedisStorage storage(options);
  CHECK(decide_from_threads(storage) == 0);
  CHECK(log.snapshot().empty());
}
