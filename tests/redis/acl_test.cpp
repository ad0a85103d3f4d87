// ACL users and the eviction warning. Production Redis is reached as a restricted ACL user, so
// a user granted exactly the ACL docs/redis.md "Permissions (ACL)" gives must decide every
// limiter exactly: every algorithm, the concurrency limit, all-or-nothing decisions over several
// limiters (the multi-key script rule sets use) and priorities, none degraded. That list is the
// union of the client's own commands (redis/detail/commands.hpp) and the commands the scripts
// call (ratelimit::lua::required_commands, extracted from lua/*.lua when they are embedded); a
// test fails if the document's list differs from it. Regression: the document's list once lacked
// ZCOUNT and ZINCRBY, which the concurrency script calls, so every acquire of a user granted it
// was degraded (and under fail_open there was no concurrency limit at all).
// A wrong password must degrade with a connect failure that says what Redis answered. And since
// an eviction policy that can evict the library's keys silently resets limits, a storage warns
// once (RedisFailureKind::warning) on a server whose maxmemory-policy is anything but
// noeviction, and never on one with noeviction. The users live on the shared test Redis
// (deleted at the end); the eviction policies on servers of the test's own. Time is a
// ManualClock; only real servers are waited for, by polling with a limit.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/lua/required_commands.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>
#include <ratelimit/redis/detail/commands.hpp>
#ifdef RATELIMIT_TEST_WITH_CALENDAR
#include <ratelimit/calendar.hpp>
#endif

#include "redis_admin.hpp"
#include "servers.hpp"
#include "support/expect.hpp"
#include "support/redis_backend.hpp"

using namespace std::chrono_literals;

namespace {

/// The ACL's command names a restricted user needs on a standalone Redis with db 0: the
/// client's own and the scripts' (docs/redis.md "Permissions (ACL)"), each once, sorted.
std::set<std::string> needed_commands() {
  std::set<std::string> names;
  for (const auto c : ratelimit::detail::redis_client_commands) names.emplace(c);
  for (const auto c : ratelimit::lua::required_commands) names.emplace(c);
  return names;
}

/// `names` as ACL SETUSER arguments: "+name" each.
std::vector<std::string> grants(const std::set<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& n : names) out.push_back("+" + n);
  return out;
}

/// What the scripts and the client need: the documented list.
const std::vector<std::string> script_commands = grants(needed_commands());

/// The text of docs/redis.md's "Permissions (ACL)" section, up to the next heading.
std::string acl_section() {
  std::ifstream in(RATELIMIT_TEST_REDIS_DOC);
  REQUIRE(in);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto start = text.find("### Permissions (ACL)");
  REQUIRE(start != std::string::npos);
  const auto end = text.find("\n### ", start + 1);
  return text.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

/// Every "+name" word of the first code block of `section`, without the '+'.
std::set<std::string> granted_in_code_block(const std::string& section) {
  const auto open = section.find("```");
  REQUIRE(open != std::string::npos);
  const auto body = section.find('\n', open) + 1;
  const auto close = section.find("```", body);
  REQUIRE(close != std::string::npos);
  std::istringstream words(section.substr(body, close - body));
  std::set<std::string> names;
  for (std::string w; words >> w;)
    if (w.size() > 1 && w.front() == '+') names.insert(w.substr(1));
  return names;
}

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

/// Every algorithm on `storage`, limit 3 per second (a bucket of 3 refilled at 3/s; a calendar
/// quota of 3 per UTC day when built).
void check_every_algorithm(const ratelimit::RedisStorage& storage) {
  const auto rate = ratelimit::per_second(3);
  check_like_in_process<ratelimit::TokenBucket>(ratelimit::TokenBucketConfig{3, rate}, storage);
  check_like_in_process<ratelimit::LeakyBucket>(ratelimit::LeakyBucketConfig{3, rate}, storage);
  check_like_in_process<ratelimit::FixedWindow>(rate, storage);
  check_like_in_process<ratelimit::SlidingLog>(rate, storage);
  check_like_in_process<ratelimit::SlidingCounter>(rate, storage);
#ifdef RATELIMIT_TEST_WITH_CALENDAR
  check_like_in_process<ratelimit::CalendarQuota>(
      ratelimit::CalendarQuotaOptions{.limit = 3, .unit = ratelimit::CalendarUnit::day}, storage);
#endif
}

/// The concurrency limit (lua/concurrency.lua, the sorted-set commands) beside its in-memory
/// twin: 2 slots per key, leases of 1 s. Every decision, releases included, must be Redis's own
/// (not degraded) and equal the twin's in every field.
void check_concurrency(const ratelimit::RedisStorage& storage) {
  using Limiter = ratelimit::ConcurrencyLimiter<ratelimit::ManualClock, ratelimit::RedisStorage>;
  using Twin = ratelimit::ConcurrencyLimiter<ratelimit::ManualClock, ratelimit::InMemoryStorage>;
  ratelimit::ManualClock clock;
  clock.set(10s);
  Limiter shared({2, 1s}, storage, clock);
  Twin twin({2, 1s}, {}, clock);
  const auto same = [](const auto& slot, const auto& twin_slot) {
    CHECK_FALSE(slot.decision().degraded);
    CHECK(slot.decision() == twin_slot.decision());
  };
  auto a = shared.try_acquire("k");  // held until 11 s
  auto ta = twin.try_acquire("k");
  same(a, ta);
  CHECK(a);
  clock.advance(100ms);
  auto b = shared.try_acquire("k");  // held until 11.1 s; both slots taken
  auto tb = twin.try_acquire("k");
  same(b, tb);
  CHECK(b);
  CHECK(b.decision().remaining == 0);
  clock.advance(100ms);
  auto c = shared.try_acquire("k");
  auto tc = twin.try_acquire("k");
  same(c, tc);
  CHECK_FALSE(c);
  CHECK(c.decision().retry_after == 800ms);  // a's lease ends at 11 s, now is 10.2 s
  const auto released = a.release();         // one slot free again
  const auto twin_released = ta.release();
  REQUIRE(released);
  REQUIRE(twin_released);
  CHECK_FALSE(released->degraded);
  CHECK(*released == *twin_released);
  CHECK(released->remaining == 1);
  auto d = shared.try_acquire("k");  // held until 11.2 s
  auto td = twin.try_acquire("k");
  same(d, td);
  CHECK(d);
  clock.set(11s + 100ms);  // b's lease has ended (11.1 s), d's has not: one slot free
  auto e = shared.try_acquire("k");
  auto te = twin.try_acquire("k");
  same(e, te);
  CHECK(e);
  CHECK(e.decision().remaining == 0);
  shared.reset("k");
  twin.reset("k");
  auto f = shared.try_acquire("k");
  auto tf = twin.try_acquire("k");
  same(f, tf);
  CHECK(f.decision().remaining == 1);  // reset: 2 slots, this one takes 1
}

/// All-or-nothing decisions over three limiters on one key (one multi-key script: what
/// `try_acquire_all` and rule sets send) beside the same on an in-memory storage. Five requests
/// 200 ms apart from 10 s: all fall in the window [10 s, 11 s), whose limit of 2 is the tightest
/// (the bucket holds 3, the log allows 4 per second), so exactly 2 are admitted.
void check_all_of(const ratelimit::RedisStorage& storage) {
  ratelimit::ManualClock clock;
  clock.set(10s);
  const auto three = ratelimit::TokenBucketConfig{3, ratelimit::per_second(3)};
  const auto two = ratelimit::per_second(2);
  const auto four = ratelimit::per_second(4);
  using ratelimit::ManualClock;
  ratelimit::TokenBucket<ManualClock, ratelimit::RedisStorage> bucket(three, storage, clock, "tb");
  ratelimit::FixedWindow<ManualClock, ratelimit::RedisStorage> window(two, storage, clock, "fw");
  ratelimit::SlidingLog<ManualClock, ratelimit::RedisStorage> log(four, storage, clock, "log");
  ratelimit::InMemoryStorage memory;
  ratelimit::TokenBucket<ManualClock, ratelimit::InMemoryStorage> twin_bucket(three, memory, clock,
                                                                              "tb");
  ratelimit::FixedWindow<ManualClock, ratelimit::InMemoryStorage> twin_window(two, memory, clock,
                                                                              "fw");
  ratelimit::SlidingLog<ManualClock, ratelimit::InMemoryStorage> twin_log(four, memory, clock,
                                                                          "log");
  int admitted = 0;
  for (int i = 0; i < 5; ++i) {
    INFO("request " << i);
    const auto d = ratelimit::try_acquire_all("all-of", 1, bucket, window, log);
    const auto t = ratelimit::try_acquire_all("all-of", 1, twin_bucket, twin_window, twin_log);
    CHECK(d.allowed == t.allowed);
    for (std::size_t j = 0; j < d.decisions.size(); ++j) {
      CHECK_FALSE(d.decisions[j].degraded);
      CHECK(d.decisions[j] == t.decisions[j]);
    }
    admitted += d.allowed ? 1 : 0;
    clock.advance(200ms);
  }
  CHECK(admitted == 2);
}

/// Priorities (a reduced limit per call) beside the in-memory twin: a bucket of 10 refilled at
/// 1 per hour (nothing refills here) with reserves normal 0.1 and sheddable 0.4, so sheddable
/// requests keep ceil(10 x 0.4) = 4 back and get 6, normal ones keep ceil(10 x 0.1) = 1 back and
/// get 9 - 6 = 3 more, and critical ones the last 1.
void check_priorities(const ratelimit::RedisStorage& storage) {
  ratelimit::ManualClock clock;
  clock.set(10s);
  const auto config = ratelimit::TokenBucketConfig{10, ratelimit::per_hour(1)};
  ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::RedisStorage> shared(config, storage,
                                                                                 clock);
  ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::InMemoryStorage> twin(config, {},
                                                                                  clock);
  shared.set_reserves({0.1, 0.4});
  twin.set_reserves({0.1, 0.4});
  const auto admitted = [&](ratelimit::Priority p, int requests) {
    int n = 0;
    for (int i = 0; i < requests; ++i) {
      const ratelimit::Decision d = shared.try_acquire("priorities", 1, p);
      CHECK_FALSE(d.degraded);
      CHECK(d == twin.try_acquire("priorities", 1, p));
      n += d.allowed ? 1 : 0;
    }
    return n;
  };
  CHECK(admitted(ratelimit::Priority::sheddable, 8) == 6);
  CHECK(admitted(ratelimit::Priority::normal, 5) == 3);
  CHECK(admitted(ratelimit::Priority::critical, 3) == 1);
}

/// Every limiter kind on `storage`, then no decision of the storage was degraded.
void check_every_limiter(const ratelimit::RedisStorage& storage) {
  check_every_algorithm(storage);
  check_concurrency(storage);
  check_all_of(storage);
  check_priorities(storage);
  CHECK(storage.stats().degraded_decisions == 0);
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

TEST_CASE("docs/redis.md grants exactly the commands the client and the scripts send",
          "[redis][acl][docs]") {
  const std::string section = acl_section();
  const std::set<std::string> documented = granted_in_code_block(section);
  const std::set<std::string> needed = needed_commands();
  std::vector<std::string> missing, extra;
  std::set_difference(needed.begin(), needed.end(), documented.begin(), documented.end(),
                      std::back_inserter(missing));
  std::set_difference(documented.begin(), documented.end(), needed.begin(), needed.end(),
                      std::back_inserter(extra));
  CAPTURE(missing, extra);
  CHECK(missing.empty());
  CHECK(extra.empty());
  // The commands needed only by some deployments are named in the prose below the block.
  std::vector<std::string> optional{std::string(ratelimit::detail::redis_select_command),
                                    std::string(ratelimit::detail::redis_info_command)};
  for (const auto c : ratelimit::detail::redis_cluster_commands) optional.emplace_back(c);
  const std::string prose = section.substr(section.rfind("```"));
  for (const auto& c : optional) {
    INFO("+" << c);
    CHECK(prose.find("+" + c) != std::string::npos);
  }
}

TEST_CASE("An ACL user granted only the documented commands decides every limiter exactly",
          "[redis][acl]") {
  auto options = rltest::test_redis_options("acl");
  SECTION("the documented commands alone (INFO refused: the eviction policy cannot be read)") {
    AclUser user(options.key_prefix, script_commands);
    options.username = user.name();
    options.password = user.password();
    rltest::FailureLog log;
    options.on_failure = log.callback();
    ratelimit::RedisStorage storage(options);
    check_every_limiter(storage);
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
    check_every_limiter(storage);
    for (const auto& f : log.snapshot()) FAIL_CHECK("on_failure: " << f.message);
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
  SECTION("without ZCOUNT and ZINCRBY (the list once documented) the concurrency limit degrades") {
    // The fault this test pins, shown to be caught: granted every other needed command, the
    // concurrency script is refused, so each acquire is decided by the failure policy
    // (fail_closed here: denied, degraded).
    std::set<std::string> names = needed_commands();
    names.erase("zcount");
    names.erase("zincrby");
    AclUser user(options.key_prefix, grants(names));
    options.username = user.name();
    options.password = user.password();
    ratelimit::RedisStorage storage(options);
    ratelimit::ManualClock clock;
    ratelimit::ConcurrencyLimiter<ratelimit::ManualClock, ratelimit::RedisStorage> limiter(
        {2, 1s}, storage, clock);
    const auto slot = limiter.try_acquire("k");
    CHECK_FALSE(slot);
    CHECK(slot.decision().degraded);
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
