// Faults: a redis-server of the test's own is killed, restarted and paused while
// limiters use it. Each failure policy must do what it says (degraded = true), nothing may crash
// or hang (ctest's timeout guards that), a dead server must not cost a timeout per request (the
// circuit breaker short-circuits), and decisions must be exact again once Redis is back.
// Decision times come from ManualClock; only the server's restart is waited for in real time,
// by polling with a deadline (no assertion is about elapsed time).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

#include "redis_admin.hpp"
#include "support/expect.hpp"
#include "support/redis_backend.hpp"

using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::FailurePolicy;
using ratelimit::ManualClock;
using ratelimit::RedisStorage;
using rltest::admitted;
using rltest::denied;

namespace {

using Window = ratelimit::FixedWindow<ManualClock, RedisStorage>;
using MemWindow = ratelimit::FixedWindow<ManualClock>;

ratelimit::RedisOptions options_for(const rltest::ThrowawayRedis& server, FailurePolicy policy) {
  ratelimit::RedisOptions o;
  o.host = server.endpoint().host;
  o.port = server.endpoint().port;
  o.key_prefix = rltest::unique_prefix("fault");
  o.failure_policy = policy;
  o.fallback_divisor = 2;
  o.connect_timeout = 500ms;
  o.command_timeout = 300ms;
  o.breaker_backoff = 20ms;
  o.breaker_max_backoff = 100ms;
  o.ttl_margin = std::chrono::minutes{10};
  return o;
}

/// Polls with peeks (which change nothing) until Redis decides again; false after 20 s.
bool wait_until_redis_decides(Window& limiter, const std::string& key) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!limiter.peek(key).degraded) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

}  // namespace

TEST_CASE(
    "Each failure policy decides as it says while Redis is down, and Redis decides again "
    "after a restart",
    "[redis][failure][fixed_window]") {
  const auto policy =
      GENERATE(FailurePolicy::fail_open, FailurePolicy::fail_closed, FailurePolicy::local_fallback);
  INFO("policy " << static_cast<int>(policy));
  rltest::ThrowawayRedis server;
  auto options = options_for(server, policy);
  std::atomic<int> reported{0};
  options.on_failure = [&reported](const ratelimit::RedisFailure&) { ++reported; };
  RedisStorage storage(options);
  ManualClock clock;
  clock.set(10s);
  // N = 4 per minute; window [0, 60 s) ends 50 s after t = 10 s.
  Window limiter(ratelimit::per_minute(4), storage, clock);
  CHECK(limiter.try_acquire("k") == admitted(4, 3, 50s));
  CHECK(limiter.try_acquire("k") == admitted(4, 2, 50s));

  server.kill();  // pooled connections now point at a dead socket (SIGPIPE must not kill us)
  const Decision d1 = limiter.try_acquire("k");
  const Decision d2 = limiter.try_acquire("k");
  const Decision d3 = limiter.try_acquire("k");
  switch (policy) {
    case FailurePolicy::fail_open:
      // Admitted; limit 4, remaining reported as the limit, durations 0.
      CHECK(d1 == Decision{true, 4, 4, 0ns, 0ns, 0ns, true});
      CHECK(d3 == Decision{true, 4, 4, 0ns, 0ns, 0ns, true});
      break;
    case FailurePolicy::fail_closed:
      // Denied until Redis is tried again: at least 1 ms, at most the longest back-off.
      CHECK_FALSE(d1.allowed);
      CHECK(d1.degraded);
      CHECK(d1.remaining == 0);
      CHECK(d1.retry_after >= 1ms);
      CHECK(d1.retry_after <= 100ms);
      break;
    case FailurePolicy::local_fallback:
      // The local limit is 4 / 2 = 2 per minute on a fresh local key: 2 admitted (remaining
      // 1, then 0, window ends in 50 s), the third denied until the window's end.
      CHECK(d1 == Decision{true, 2, 1, 0ns, 50s, 0ns, true});
      CHECK(d2 == Decision{true, 2, 0, 0ns, 50s, 0ns, true});
      CHECK(d3 == Decision{false, 2, 0, 50s, 50s, 0ns, true});
      break;
  }
  // While it stays down, decisions short-circuit instead of each waiting for a timeout.
  for (int i = 0; i < 50; ++i) CHECK(limiter.peek("k").degraded);
  const auto down = storage.stats();
  CHECK(down.short_circuits > 0);
  CHECK(down.failures > 0);
  CHECK(down.degraded_decisions >= 53);
  CHECK(reported.load() > 0);

  server.start();  // empty: no persistence, so the shared state starts fresh
  REQUIRE(wait_until_redis_decides(limiter, "k"));
  MemWindow twin(ratelimit::per_minute(4), {}, clock);
  for (int i = 0; i < 6; ++i) CHECK(limiter.try_acquire("k") == twin.try_acquire("k"));
  CHECK_FALSE(storage.stats().circuit_open);
}

TEST_CASE("A slow Redis hits the command timeout and the decision degrades instead of waiting",
          "[redis][failure][timeout][fixed_window]") {
  rltest::ThrowawayRedis server;
  auto options = options_for(server, FailurePolicy::fail_open);
  options.command_timeout = 100ms;
  std::vector<ratelimit::RedisFailureKind> kinds;
  options.on_failure = [&kinds](const ratelimit::RedisFailure& f) { kinds.push_back(f.kind); };
  RedisStorage storage(options);
  ManualClock clock;
  Window limiter(ratelimit::per_minute(4), storage, clock);
  CHECK(limiter.try_acquire("k") == admitted(4, 3, 60s));

  // Every client's commands wait 1.5 s: far past the 100 ms command timeout.
  rltest::RedisAdmin admin(server.endpoint());
  admin.run({"CLIENT", "PAUSE", "1500", "ALL"});
  const Decision slow = limiter.try_acquire("k");
  CHECK(slow == Decision{true, 4, 4, 0ns, 0ns, 0ns, true});
  REQUIRE_FALSE(kinds.empty());
  CHECK(kinds.front() == ratelimit::RedisFailureKind::timeout);

  // Once the pause ends Redis decides again. The timed-out call may still have run when the
  // pause ended (Redis had it queued): a timeout never tells whether the script ran.
  REQUIRE(wait_until_redis_decides(limiter, "k"));
  const Decision after = limiter.try_acquire("k");
  CHECK_FALSE(after.degraded);
  CHECK((after == admitted(4, 2, 60s) || after == admitted(4, 1, 60s)));
}

TEST_CASE("A storage made while Redis is down fails open at once and reports the connect failure",
          "[redis][failure][fixed_window]") {
  rltest::ThrowawayRedis server;
  server.kill();
  auto options = options_for(server, FailurePolicy::fail_open);
  std::vector<ratelimit::RedisFailure> seen;
  options.on_failure = [&seen](const ratelimit::RedisFailure& f) { seen.push_back(f); };
  RedisStorage storage(options);  // does not connect yet: no throw
  ManualClock clock;
  Window limiter(ratelimit::per_minute(4), storage, clock);
  CHECK(limiter.try_acquire("k") == Decision{true, 4, 4, 0ns, 0ns, 0ns, true});
  REQUIRE(seen.size() == 1);
  CHECK(seen.front().kind == ratelimit::RedisFailureKind::connect);
  // Cost above the limit can never succeed, whatever the shared state: denied, never.
  CHECK(limiter.try_acquire("k", 5) == Decision{false, 4, 0, Decision::never, 0ns, 0ns, true});

  server.start();
  REQUIRE(wait_until_redis_decides(limiter, "k"));
  CHECK(limiter.try_acquire("k") == admitted(4, 3, 60s));
}

TEST_CASE("local_fallback takes an explicit per-instance limit when bind is given one",
          "[redis][failure][token_bucket]") {
  rltest::ThrowawayRedis server;
  server.kill();
  auto options = options_for(server, FailurePolicy::local_fallback);
  RedisStorage storage(options);
  // Shared: 100 tokens at 10/s; local: 3 tokens at 1/s (not 100 / 2).
  auto tb = storage.bind<ratelimit::TokenBucketModel>(
      "api", ratelimit::TokenBucketModel::make_params({100, ratelimit::per_second(10)}),
      ratelimit::TokenBucketModel::make_params({3, ratelimit::per_second(1)}));
  // Local bucket: T = 3 - 1 = 2, reset (3 - 2) / 1 = 1 s; then 1 left (2 s); then 0 (3 s);
  // the 4th waits 1 s for a token.
  CHECK(tb.apply("k", 0ns, {}) == Decision{true, 3, 2, 0ns, 1s, 0ns, true});
  CHECK(tb.apply("k", 0ns, {}) == Decision{true, 3, 1, 0ns, 2s, 0ns, true});
  CHECK(tb.apply("k", 0ns, {}) == Decision{true, 3, 0, 0ns, 3s, 0ns, true});
  CHECK(tb.apply("k", 0ns, {}) == Decision{false, 3, 0, 1s, 3s, 0ns, true});
}

TEST_CASE("While Redis is down local_fallback keeps each priority's reserve",
          "[redis][failure][token_bucket][priority]") {
  // The per-instance bucket follows the limit each priority sees (with_params).
  rltest::ThrowawayRedis server;
  server.kill();
  auto options = options_for(server, FailurePolicy::local_fallback);
  ManualClock clock;
  // Shared: 20 tokens at 1 per hour; local: 20 / 2 = 10 (fallback_divisor 2). Sheddable sees
  // 20 - ceil(20 x 0.4) = 12 shared, so 12 / 2 = 6 locally; critical sees 10 locally.
  ratelimit::TokenBucket<ManualClock, RedisStorage> tb(
      {20, ratelimit::Rate{1, std::chrono::hours{1}}}, RedisStorage(options), clock);
  tb.set_reserves({0.1, 0.4});
  int sheddable = 0;
  for (int i = 0; i < 10; ++i) {
    const Decision d = tb.try_acquire("k", 1, ratelimit::Priority::sheddable);
    CHECK(d.degraded);
    sheddable += d.allowed ? 1 : 0;
  }
  CHECK(sheddable == 6);
  // The same local bucket (same key): critical gets the 10 - 6 = 4 tokens left.
  int critical = 0;
  for (int i = 0; i < 10; ++i)
    critical += tb.try_acquire("k", 1, ratelimit::Priority::critical).allowed ? 1 : 0;
  CHECK(critical == 4);
}

TEST_CASE("A call the breaker refuses is never built; one that cannot be built completes failed",
          "[redis][failure][breaker]") {
  // A refused decision must not build its Redis key first: a client's key can be megabytes,
  // and during an outage nearly every decision is refused. Client level, where the building
  // is a callable that counts its calls. A back-off of 1 h: the breaker stays open throughout,
  // whatever the time.
  using ratelimit::RedisFailureKind;
  using ratelimit::detail::RedisCall;
  using ratelimit::detail::RedisResult;
  rltest::ThrowawayRedis server;
  server.kill();
  auto options = options_for(server, FailurePolicy::fail_closed);
  options.breaker_backoff = std::chrono::hours{1};
  options.breaker_max_backoff = std::chrono::hours{1};
  auto client = std::make_shared<ratelimit::detail::RedisClient>(options);
  int built = 0;
  const auto make_ping = [&built] {
    ++built;
    return RedisCall{nullptr, {"k"}, {"PING"}};
  };
  const auto kind_of = [](const std::vector<RedisResult>& r) {
    REQUIRE(r.size() == 1u);
    REQUIRE(r.front().failure.has_value());
    return r.front().failure->kind;
  };

  // The first call is built and sent; the refused connection opens the breaker.
  CHECK(kind_of(client->execute_one(make_ping, client->deadline_from_now())) ==
        RedisFailureKind::connect);
  CHECK(built == 1);
  // The next ones are refused before they are built, blocking or not.
  CHECK(kind_of(client->execute_one(make_ping, client->deadline_from_now())) ==
        RedisFailureKind::circuit_open);
  std::vector<RedisResult> async_results;
  int completions = 0;
  client->execute_one_async(make_ping, client->deadline_from_now(),
                            [&](std::vector<RedisResult>&& r) {
                              ++completions;
                              async_results = std::move(r);
                            });
  CHECK(completions == 1);  // refused: completed before execute_one_async returned
  CHECK(kind_of(async_results) == RedisFailureKind::circuit_open);
  CHECK(built == 1);
  CHECK(client->stats().short_circuits == 2u);  // counted as `send` counts a refusal

  // A fresh client (breaker closed): building runs out of memory. The completion still runs,
  // once, with the failure, as when formatting the call runs out of memory.
  auto fresh = std::make_shared<ratelimit::detail::RedisClient>(options);
  completions = 0;
  fresh->execute_one_async([]() -> RedisCall { throw std::bad_alloc(); },
                           fresh->deadline_from_now(),
                           [&](std::vector<RedisResult>&& r) {
                             ++completions;
                             async_results = std::move(r);
                           });
  CHECK(completions == 1);
  CHECK(kind_of(async_results) == RedisFailureKind::io);
  CHECK_THAT(async_results.front().failure->message, Catch::Contains("cannot send"));
  CHECK(fresh->stats().failures == 1u);
}
