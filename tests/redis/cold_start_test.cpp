// Cold start of RedisStorage: a fresh process's first decision is one round trip and one script
// call, with and without a warm-up; the listener hears the connect and the first decision; the
// Prometheus exporter shows them. Calls are counted by Redis itself (INFO commandstats) on a
// redis-server of each test's own, whose script cache and counters start empty; never by time.

#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/metrics.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

#include "redis_admin.hpp"
#include "support/redis_backend.hpp"

namespace {

using namespace std::chrono_literals;
using ratelimit::Decision;

/// Every command's calls, failed calls and rejected calls (INFO commandstats), by name
/// ("eval", "evalsha", "script|load"). Redis 7 counts a call that ran and returned an error
/// (NOSCRIPT) in both `calls` and `failed`; one refused before running only in `rejected`.
struct CommandStats {
  struct Counts {
    std::int64_t calls = 0, failed = 0, rejected = 0;
  };
  std::map<std::string, Counts> by_name;

  static CommandStats of(rltest::RedisAdmin& admin) {
    auto reply = admin.run({"INFO", "commandstats"});
    REQUIRE(reply->type == REDIS_REPLY_STRING);
    CommandStats s;
    const std::string text(reply->str, reply->len);
    std::size_t at = 0;
    while ((at = text.find("cmdstat_", at)) != std::string::npos) {
      const auto colon = text.find(':', at);
      const auto end = text.find_first_of("\r\n", colon);
      const std::string name = text.substr(at + 8, colon - at - 8);
      const std::string fields = text.substr(colon + 1, end - colon - 1);
      const auto field = [&](const std::string& f) -> std::int64_t {
        const auto p = fields.find(f + "=");
        return p == std::string::npos ? 0 : std::stoll(fields.substr(p + f.size() + 1));
      };
      s.by_name[name] = {field("calls"), field("failed_calls"), field("rejected_calls")};
      at = end;
    }
    return s;
  }
  Counts operator[](const std::string& name) const {
    const auto it = by_name.find(name);
    return it == by_name.end() ? Counts{} : it->second;
  }
};

/// What the storage's listener hears: round trips, connects, first decisions.
struct Heard : ratelimit::Listener {
  std::mutex mutex;
  int round_trips = 0;
  std::vector<ratelimit::ConnectEvent> connects;    // `node` pointing into `nodes`
  std::vector<std::unique_ptr<std::string>> nodes;  // an event's views last only its call
  std::vector<ratelimit::FirstDecisionEvent> firsts;
  void on_round_trip(const ratelimit::RoundTripEvent&) override {
    const std::lock_guard lock(mutex);
    ++round_trips;
  }
  void on_connect(const ratelimit::ConnectEvent& e) override {
    const std::lock_guard lock(mutex);
    nodes.push_back(std::make_unique<std::string>(e.node));
    connects.push_back(e);
    connects.back().node = *nodes.back();
  }
  void on_first_decision(const ratelimit::FirstDecisionEvent& e) override {
    const std::lock_guard lock(mutex);
    firsts.push_back(e);
  }
};

ratelimit::RedisOptions options_on(const rltest::ThrowawayRedis& server, bool warm_up) {
  auto o = rltest::test_redis_options("cold");
  o.port = server.endpoint().port;
  o.warm_up = warm_up;
  return o;
}

using Window = ratelimit::FixedWindow<ratelimit::ManualClock, ratelimit::RedisStorage>;

}  // namespace

TEST_CASE("A fresh storage's first decision is one EVAL in one round trip, with no NOSCRIPT",
          "[redis][cold_start]") {
  rltest::ThrowawayRedis server;
  rltest::RedisAdmin admin(server.endpoint());
  ratelimit::RedisStorage storage(options_on(server, false));
  auto heard = std::make_shared<Heard>();
  storage.attach_listener(heard);
  ratelimit::ManualClock clock;
  Window limiter(ratelimit::per_second(10), storage, clock);

  // Construction without warm-up does not connect: nothing heard, no command run.
  CHECK(heard->connects.empty());
  CHECK(CommandStats::of(admin)["eval"].calls == 0);

  // Limit 10 per second, first unit: admitted with 10 - 1 = 9 left.
  const Decision first = limiter.try_acquire("k");
  CHECK(first.allowed);
  CHECK_FALSE(first.degraded);
  CHECK(first.remaining == 9);
  auto stats = CommandStats::of(admin);
  // The script went once, with its body: no EVALSHA answered NOSCRIPT before it.
  CHECK(stats["eval"].calls == 1);
  CHECK(stats["evalsha"].calls + stats["evalsha"].rejected == 0);
  CHECK(storage.stats().script_loads == 0);
  {
    const std::lock_guard lock(heard->mutex);
    CHECK(heard->round_trips == 1);
    REQUIRE(heard->connects.size() == 1);
    const auto& c = heard->connects.front();
    CHECK(c.node == "127.0.0.1:" + std::to_string(server.endpoint().port));
    CHECK(c.tls_handshake == 0ns);  // no TLS
    CHECK(c.connect <= c.ready);    // the connect is a part of the whole
    REQUIRE(heard->firsts.size() == 1);
    CHECK(heard->firsts.front().ok);
    CHECK(heard->firsts.front().latency <= heard->firsts.front().since_start);
  }

  // The node now holds the script: the next decision names it (EVALSHA), 10 - 2 = 8 left.
  CHECK(limiter.try_acquire("k").remaining == 8);
  stats = CommandStats::of(admin);
  CHECK(stats["eval"].calls == 1);
  CHECK(stats["evalsha"].calls == 1);
  CHECK(stats["evalsha"].failed + stats["evalsha"].rejected == 0);
  const std::lock_guard lock(heard->mutex);
  CHECK(heard->round_trips == 2);
  CHECK(heard->connects.size() == 1);  // the same connection
  CHECK(heard->firsts.size() == 1);    // once per storage
}

TEST_CASE("A warmed-up storage's first decision is one EVALSHA in one round trip",
          "[redis][cold_start]") {
  rltest::ThrowawayRedis server;
  rltest::RedisAdmin admin(server.endpoint());
  ratelimit::RedisStorage storage(options_on(server, true));
  // The constructor loaded one script per algorithm of the registry, and nothing else ran.
  auto before = CommandStats::of(admin);
  CHECK(before["script|load"].calls == static_cast<std::int64_t>(ratelimit::Algorithms::size));
  CHECK(before["eval"].calls == 0);
  CHECK(before["evalsha"].calls == 0);

  auto heard = std::make_shared<Heard>();
  storage.attach_listener(heard);
  ratelimit::ManualClock clock;
  Window limiter(ratelimit::per_second(10), storage, clock);
  const Decision first = limiter.try_acquire("k");
  CHECK_FALSE(first.degraded);
  CHECK(first.remaining == 9);  // 10 - 1
  const auto after = CommandStats::of(admin);
  CHECK(after["evalsha"].calls == 1);
  CHECK(after["evalsha"].failed + after["evalsha"].rejected == 0);
  CHECK(after["eval"].calls == 0);
  CHECK(after["script|load"].calls == before["script|load"].calls);
  CHECK(storage.stats().script_loads == 0);
  const std::lock_guard lock(heard->mutex);
  CHECK(heard->round_trips == 1);
  CHECK(heard->connects.empty());  // connected during the warm-up, before the listener
  REQUIRE(heard->firsts.size() == 1);
  CHECK(heard->firsts.front().ok);
}

TEST_CASE("After SCRIPT FLUSH the next decision reloads the script once and is not degraded",
          "[redis][cold_start][noscript]") {
  rltest::ThrowawayRedis server;
  rltest::RedisAdmin admin(server.endpoint());
  ratelimit::RedisStorage storage(options_on(server, false));
  REQUIRE(storage.warm_up());
  ratelimit::ManualClock clock;
  Window limiter(ratelimit::per_second(10), storage, clock);
  CHECK(limiter.try_acquire("k").remaining == 9);  // 10 - 1
  admin.run({"SCRIPT", "FLUSH"});
  const auto before = CommandStats::of(admin);
  // The node was known to hold the script: EVALSHA, answered NOSCRIPT, then EVAL.
  const Decision d = limiter.try_acquire("k");
  CHECK_FALSE(d.degraded);
  CHECK(d.remaining == 8);  // 10 - 2: the flush dropped scripts, not keys
  auto after = CommandStats::of(admin);
  CHECK(after["evalsha"].calls + after["evalsha"].rejected -
            (before["evalsha"].calls + before["evalsha"].rejected) ==
        1);
  CHECK(after["evalsha"].failed - before["evalsha"].failed == 1);  // its NOSCRIPT
  CHECK(after["eval"].calls - before["eval"].calls == 1);
  CHECK(storage.stats().script_loads == 1);
  CHECK(storage.stats().degraded_decisions == 0);
  // Reloaded: the next decision is one EVALSHA again, no reload.
  CHECK(limiter.try_acquire("k").remaining == 7);  // 10 - 3
  const auto last = CommandStats::of(admin);
  CHECK(last["evalsha"].calls - after["evalsha"].calls == 1);
  CHECK(last["eval"].calls == after["eval"].calls);
  CHECK(storage.stats().script_loads == 1);
}

TEST_CASE("After a restart of Redis the first decision is one EVAL on the new connection",
          "[redis][cold_start][noscript]") {
  // Pins a reconnect that sent EVALSHA on the new connection: answered NOSCRIPT, then EVAL,
  // two round trips after the connect (at 40 ms a far Redis missed the 100 ms deadline).
  rltest::ThrowawayRedis server;
  ratelimit::RedisStorage storage(options_on(server, false));
  ratelimit::ManualClock clock;
  Window limiter(ratelimit::per_second(10), storage, clock);
  CHECK(limiter.try_acquire("k").remaining == 9);  // 10 - 1, as EVAL
  CHECK(limiter.try_acquire("k").remaining == 8);  // 10 - 2, as EVALSHA: the node holds it
  server.kill();   // no persistence: keys, scripts and the command counts are gone
  server.start();  // the same port
  auto heard = std::make_shared<Heard>();
  storage.attach_listener(heard);
  const Decision d = limiter.try_acquire("k");
  CHECK_FALSE(d.degraded);
  CHECK(d.remaining == 9);  // 10 - 1: the restarted server lost the key's count
  rltest::RedisAdmin admin(server.endpoint());
  const auto stats = CommandStats::of(admin);  // counted since the restart
  CHECK(stats["eval"].calls == 1);
  CHECK(stats["evalsha"].calls + stats["evalsha"].rejected == 0);
  CHECK(storage.stats().script_loads == 0);  // no NOSCRIPT reload
  {
    const std::lock_guard lock(heard->mutex);
    CHECK(heard->round_trips == 1);
    CHECK(heard->connects.size() == 1);  // the new connection
  }
  // And then EVALSHA again: 10 - 2 = 8.
  CHECK(limiter.try_acquire("k").remaining == 8);
  CHECK(CommandStats::of(admin)["evalsha"].calls == 1);
}

TEST_CASE("After a restart of Redis a non-blocking plain command goes on a new connection",
          "[redis][cold_start]") {
  // A non-blocking call without a script does not look at the idle connection on the calling
  // thread (that cost every call a poll()): the I/O thread must find the connection the
  // restart closed before it puts the command on it, or the first call after a restart fails.
  using ratelimit::detail::RedisCall;
  using ratelimit::detail::RedisResult;
  rltest::ThrowawayRedis server;
  auto client = std::make_shared<ratelimit::detail::RedisClient>(options_on(server, false));
  const auto incrby = [&](int by) {
    std::promise<std::vector<RedisResult>> got;
    client->execute_async({RedisCall{nullptr, {"k"}, {"INCRBY", "k", std::to_string(by)}}},
                          client->deadline_from_now(),
                          [&](std::vector<RedisResult>&& r) { got.set_value(std::move(r)); });
    auto r = got.get_future().get();
    REQUIRE(r.size() == 1u);
    return r;
  };
  const auto count_of = [](const std::vector<RedisResult>& r) -> long long {
    if (r.front().failure) FAIL(r.front().failure->message);
    REQUIRE(r.front().reply->type == REDIS_REPLY_INTEGER);
    return r.front().reply->integer;
  };
  CHECK(count_of(incrby(2)) == 2);  // 0 + 2
  CHECK(count_of(incrby(3)) == 5);  // 2 + 3: the connection is idle again after this one
  server.kill();                    // no persistence: the key is gone
  server.start();                   // the same port
  CHECK(count_of(incrby(4)) == 4);  // 0 + 4 on the new connection, not failed on the old one
  CHECK(client->stats().failures == 0u);
}

TEST_CASE("A warm-up against a Redis that is down returns false and never throws",
          "[redis][cold_start]") {
  rltest::ThrowawayRedis server;
  auto o = options_on(server, true);
  server.kill();
  o.connect_timeout = 200ms;
  o.command_timeout = 200ms;
  o.failure_policy = ratelimit::FailurePolicy::fail_closed;
  std::unique_ptr<ratelimit::RedisStorage> storage;
  REQUIRE_NOTHROW(storage = std::make_unique<ratelimit::RedisStorage>(o));
  CHECK_FALSE(storage->warm_up());
  // The failure policy decides: fail_closed denies, degraded.
  ratelimit::ManualClock clock;
  Window limiter(ratelimit::per_second(10), *storage, clock);
  const Decision d = limiter.try_acquire("k");
  CHECK(d.degraded);
  CHECK_FALSE(d.allowed);
}

TEST_CASE("The Prometheus exporter shows the connect and the first decision",
          "[redis][cold_start][metrics]") {
  rltest::ThrowawayRedis server;
  ratelimit::RedisStorage storage(options_on(server, false));
  auto exporter = std::make_shared<ratelimit::PrometheusExporter>();
  storage.attach_listener(exporter);
  ratelimit::ManualClock clock;
  Window limiter(ratelimit::per_second(10), storage, clock);
  CHECK(limiter.try_acquire("k").remaining == 9);
  CHECK(limiter.try_acquire("k").remaining == 8);
  const std::string text = exporter->render();
  // One connection, no TLS; one first decision for two decisions.
  CHECK(text.find("ratelimit_redis_connect_seconds_count 1\n") != std::string::npos);
  CHECK(text.find("ratelimit_redis_tls_handshake_seconds_count 0\n") != std::string::npos);
  CHECK(text.find("ratelimit_redis_first_decision_seconds_count 1\n") != std::string::npos);
  CHECK(text.find("ratelimit_redis_start_to_first_decision_seconds_count 1\n") !=
        std::string::npos);
  CHECK(text.size() <= exporter->max_bytes());
}
