// One deadline bounds a whole decision, not each socket call. Against a server that
// trickles its replies one byte per 30 ms, one that accepts and never answers, a stopped
// (SIGSTOP) Redis sent 4 MiB keys, a 20,000-entry batch, and a Redis killed and restarted,
// 8 threads deciding for a while each get every decision back by its deadline plus a stated
// margin. Real sockets on loopback throughout.
//
// The margin: the I/O thread wakes at a deadline through ppoll's timer, which the kernel lets
// run late by its timer slack (50 us by default), and the deciding thread must then be woken
// and scheduled; on this 2-core machine, with sanitizer builds and 8 threads, that is the bulk
// of it. The first test case measures the timer's overshoot and prints it.
#include <poll.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

#include "listener.hpp"
#include "redis_admin.hpp"
#include "support/redis_backend.hpp"
#include "support/run_queue.hpp"
#include "support/sanitized.hpp"
#include "traffic.hpp"

using namespace std::chrono_literals;

namespace {

using rltest::hammer;
using rltest::ms;

using Bucket = ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::RedisStorage>;

/// How late a decision may come back after its deadline (see the file comment): 50 ms, or
/// 150 ms in a sanitizer build. There the calling thread's own work, which counts against the
/// deadline (formatting a 20,000-entry batch, copying 4 MiB keys, then reading 20,000
/// decisions back), runs several times slower, and CI runs that build beside other tests on 2
/// cores: it came back 166 to 203 ms late there once, 109 to 134 ms in other runs.
constexpr std::chrono::milliseconds margin = rltest::sanitized ? 150ms : 50ms;

/// Options for a server at `port` that will not answer in time: a 100 ms deadline, fail
/// closed, and the shortest breaker back-off (1 ms), so that the server is probed again as
/// soon as the last probe's budget (its deadline plus 5 ms) ends: some decision is always
/// waiting on it. The others are short-circuited, before their keys are even built.
ratelimit::RedisOptions stalled_options(int port) {
  auto o = rltest::test_redis_options("deadline");
  o.port = port;
  o.command_timeout = 100ms;
  o.connect_timeout = 100ms;
  o.breaker_backoff = 1ms;
  o.breaker_max_backoff = 1ms;
  o.failure_policy = ratelimit::FailurePolicy::fail_closed;
  return o;
}

/// `key`'s decision once Redis answers again: retried every 10 ms while degraded, 10 s at most.
ratelimit::Decision once_answered(Bucket& tb, const std::string& key) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  ratelimit::Decision d = tb.try_acquire(key);
  while (d.degraded && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
    d = tb.try_acquire(key);
  }
  return d;
}

/// `n` decisions of `tb` (on `storage`) for the distinct keys prefix0, prefix1, ..., in one
/// RedisBatch.
std::vector<ratelimit::Decision> decide_batch(ratelimit::RedisStorage& storage, Bucket& tb,
                                              const std::string& prefix, int n) {
  ratelimit::RedisBatch batch(storage);
  for (int i = 0; i < n; ++i) batch.add(tb, prefix + std::to_string(i));
  return batch.run();
}

}  // namespace

TEST_CASE("The kernel timer's overshoot, the part of the margin the library cannot remove",
          "[redis][deadline]") {
  // 200 ppoll waits of 1 ms on nothing: how late each wakes up.
  std::chrono::nanoseconds worst{0}, total{0};
  for (int i = 0; i < 200; ++i) {
    const timespec ts{0, 1'000'000};
    const auto t0 = std::chrono::steady_clock::now();
    ::ppoll(nullptr, 0, &ts, nullptr);
    const auto late = std::chrono::steady_clock::now() - t0 - 1ms;
    worst = std::max<std::chrono::nanoseconds>(worst, late);
    total += late;
  }
  WARN("ppoll(1 ms) overshoot: mean " << ms(total / 200) << " ms, worst " << ms(worst) << " ms");
  CHECK(worst >= 0ns);  // a measurement, reported above; the margin is stated at its use
}

TEST_CASE("8 threads against a Redis that trickles its replies one byte per 30 ms",
          "[redis][deadline]") {
  rltest::TrickleProxy proxy(rltest::redis_endpoint(), 30ms);
  ratelimit::RedisStorage storage(stalled_options(proxy.port()));
  ratelimit::ManualClock clock;
  Bucket tb({10, ratelimit::per_second(1)}, storage, clock);
  const auto t = hammer(8, 1500ms, [&](int th, int i) {
    return tb.try_acquire("k" + std::to_string(th) + "." + std::to_string(i)).degraded;
  });
  // A reply of some 20 bytes takes about 600 ms to trickle through: every decision gives up at
  // its 100 ms deadline instead, fail closed.
  CHECK(t.degraded == t.decisions);
  CHECK(t.worst < 100ms + margin);
  WARN("trickle: " << t.decisions << " decisions, longest " << ms(t.worst) << " ms (deadline 100)");
  proxy.stop();
}

TEST_CASE("8 threads against a server that accepts and never answers, 4 MiB keys among them",
          "[redis][deadline]") {
  rltest::BlackHole hole;
  ratelimit::RedisStorage storage(stalled_options(hole.port()));
  ratelimit::ManualClock clock;
  Bucket tb({10, ratelimit::per_second(1)}, storage, clock);
  // Sent as its digest (a key over 256 bytes), so it no longer fills the socket buffers (the
  // 20,000-entry batch test case below still does); hashing 4 MiB is in the caller's time.
  const std::string huge(4 << 20, 'x');
  const auto t = hammer(8, 1500ms, [&](int th, int i) {
    // Not `th == 0 ? huge : "small" + ...`: that expression is a prvalue, a copy of the 4 MiB
    // key made inside the timed call (see the stopped-Redis case).
    if (th == 0) return tb.try_acquire(huge).degraded;
    return tb.try_acquire("small" + std::to_string(i)).degraded;
  });
  CHECK(t.degraded == t.decisions);
  CHECK(t.worst < 100ms + margin);
  WARN("black hole: " << t.decisions << " decisions, longest " << ms(t.worst) << " ms");
  hole.stop();
}

TEST_CASE("8 threads against a stopped (SIGSTOP) Redis, 4 MiB keys among them",
          "[redis][deadline]") {
  rltest::ThrowawayRedis server;
  auto o = stalled_options(server.endpoint().port);
  ratelimit::RedisStorage storage(o);
  ratelimit::ManualClock clock;
  Bucket tb({10, ratelimit::per_second(1)}, storage, clock);
  CHECK_FALSE(tb.try_acquire("warm").degraded);  // connected while it ran
  server.pause();
  // Distinct 4 MiB keys, built before the clock starts: the limiter is measured, not the test.
  std::vector<std::string> huge(16, std::string(4 << 20, 'x'));
  for (std::size_t i = 0; i < huge.size(); ++i) huge[i] += std::to_string(i);
  const auto t = hammer(8, 1500ms, [&](int th, int i) {
    // By reference. `cond ? huge[j] : std::to_string(i)` has a prvalue type: it copied the
    // 4 MiB key inside every timed call, a quarter of the process's CPU under ASan (perf).
    if (th % 2 == 0)
      return tb.try_acquire(huge[static_cast<std::size_t>(i) % huge.size()]).degraded;
    return tb.try_acquire(std::to_string(i)).degraded;
  });
  server.resume();
  CHECK(t.degraded == t.decisions);
  CHECK(t.worst < 100ms + margin);
  WARN("stopped Redis: " << t.decisions << " decisions, longest " << ms(t.worst) << " ms");
}

TEST_CASE("A 20,000-entry batch returns by its deadline on a healthy and on a stopped Redis",
          "[redis][deadline][batch]") {
  rltest::ThrowawayRedis server;
  auto o = stalled_options(server.endpoint().port);
  std::mutex failure_mutex;
  std::string first_failure;  // why a batch was degraded, for the report
  o.on_failure = [&](const ratelimit::RedisFailure& f) {
    const std::lock_guard lock(failure_mutex);
    if (first_failure.empty()) first_failure = f.message;
  };
  ratelimit::RedisStorage storage(o);
  ratelimit::ManualClock clock;
  Bucket tb({10, ratelimit::per_second(1)}, storage, clock);
  const auto run_batch = [&](const char* tag) {
    ratelimit::RedisBatch batch(storage);
    for (int i = 0; i < 20'000; ++i) batch.add(tb, std::string(tag) + std::to_string(i));
    const auto waited0 = rltest::run_queue_wait();
    const auto t0 = std::chrono::steady_clock::now();
    const auto d = batch.run();
    const auto took = std::chrono::steady_clock::now() - t0;
    // The caller formats 20,000 commands and reads 20,000 decisions back itself: on a busy
    // machine its threads then wait for a core, which no deadline can help. That wait is the
    // machine's, not the library's: the bound allows it on top of the margin. (In a sanitizer
    // build beside a compile, the batch once took 353 ms for 100 ms + 150 ms.)
    const auto machine = rltest::run_queue_wait() - waited0;
    CHECK(d.size() == 20'000u);
    CHECK(took < 100ms + margin + machine);
    std::int64_t degraded = 0;
    for (const auto& x : d) degraded += x.degraded ? 1 : 0;
    std::string why;
    {
      const std::lock_guard lock(failure_mutex);
      why.swap(first_failure);
    }
    WARN(tag << " batch of 20,000: " << ms(took) << " ms (" << ms(machine)
             << " ms waiting for a core), " << degraded << " degraded (" << why << ")");
    return degraded;
  };
  // Healthy: all decided, or (if Redis is slower than 100 ms for 20,000 scripts) all degraded
  // together; either way on time.
  const auto healthy = run_batch("healthy");
  CHECK((healthy == 0 || healthy == 20'000));
  std::this_thread::sleep_for(5ms);  // past the 1 ms back-off, if the batch opened the breaker
  server.pause();
  CHECK(run_batch("stopped") == 20'000);
  server.resume();
}

TEST_CASE(
    "A 20,000-entry batch with time to spare is decided in full, replies overlapping the write",
    "[redis][batch]") {
  // Redis answers the first commands of a 6 MB pipeline while the rest is still being written
  // (and, its script cache flushed after the storage's first decision, answers NOSCRIPT to all
  // of them first): every reply must still reach its own decision.
  rltest::ThrowawayRedis server;
  auto o = rltest::test_redis_options("bigbatch");
  o.port = server.endpoint().port;
  o.command_timeout = 20s;
  ratelimit::RedisStorage storage(o);
  ratelimit::ManualClock clock;
  Bucket tb({10, ratelimit::per_second(1)}, storage, clock);
  // The first decision sends the script with EVAL, so the node is known to hold it; the flush
  // then makes every EVALSHA of the batch answer NOSCRIPT.
  REQUIRE(!tb.try_acquire("first").degraded);
  rltest::RedisAdmin(server.endpoint()).run({"SCRIPT", "FLUSH"});
  const auto d = decide_batch(storage, tb, "big", 20'000);
  REQUIRE(d.size() == 20'000u);
  // Distinct keys, capacity 10: each first request is admitted with 10 - 1 = 9 left.
  CHECK(std::all_of(d.begin(), d.end(),
                    [](const ratelimit::Decision& x) { return !x.degraded && x.remaining == 9; }));
  CHECK(storage.stats().script_loads == 1u);  // one EVAL, then EVALSHA for the other 19,999
}

TEST_CASE("8 threads while Redis is killed and restarted: on time throughout, exact after",
          "[redis][deadline][restart]") {
  rltest::ThrowawayRedis server;
  ratelimit::RedisStorage storage(stalled_options(server.endpoint().port));
  ratelimit::ManualClock clock;
  Bucket tb({1'000'000, ratelimit::per_second(1)}, storage, clock);
  std::thread chaos([&] {
    std::this_thread::sleep_for(300ms);
    server.kill();
    std::this_thread::sleep_for(300ms);
    server.start();
  });
  const auto t = hammer(8, 1500ms, [&](int th, int) {
    return tb.try_acquire("restart" + std::to_string(th)).degraded;
  });
  chaos.join();
  CHECK(t.worst < 100ms + margin);
  CHECK(t.degraded > 0);
  // Back on Redis once it answers: a new key's first decision is exact (capacity - 1 left).
  const ratelimit::Decision d = once_answered(tb, "after");
  CHECK_FALSE(d.degraded);
  CHECK(d.remaining == 1'000'000 - 1);
  WARN("kill/restart: " << t.decisions << " decisions, " << t.degraded << " degraded, longest "
                        << ms(t.worst) << " ms");
}

TEST_CASE("One 200 ms stall with 8 threads in flight degrades for the stall plus one back-off",
          "[redis][deadline][stall]") {
  rltest::ThrowawayRedis server({"--enable-debug-command", "local"});
  auto o = rltest::test_redis_options("stall");
  o.port = server.endpoint().port;
  o.command_timeout = 50ms;
  o.breaker_backoff = 50ms;
  o.breaker_max_backoff = 2000ms;
  o.failure_policy = ratelimit::FailurePolicy::fail_open;
  const auto origin = std::chrono::steady_clock::now();
  std::mutex log_mutex;
  std::vector<std::string> log;  // every failure, for the report if the bound is missed
  o.on_failure = [&](const ratelimit::RedisFailure& f) {
    const std::lock_guard lock(log_mutex);
    log.push_back(std::to_string(ms(std::chrono::steady_clock::now() - origin)) +
                  " ms: " + f.message);
  };
  ratelimit::RedisStorage storage(o);
  ratelimit::ManualClock clock;
  Bucket tb({1'000'000'000, ratelimit::per_second(1)}, storage, clock);
  CHECK_FALSE(tb.try_acquire("warm").degraded);
  std::atomic<std::int64_t> first_degraded{INT64_MAX}, last_degraded{0};
  std::atomic<std::int64_t> stall_at{0};
  std::thread staller([&] {
    std::this_thread::sleep_for(300ms);
    rltest::RedisAdmin admin(server.endpoint());
    stall_at = (std::chrono::steady_clock::now() - origin).count();
    admin.run({"DEBUG", "SLEEP", "0.2"});  // Redis answers nobody for 200 ms
  });
  const auto t = hammer(8, 1500ms, [&](int th, int) {
    const bool degraded = tb.try_acquire("stall" + std::to_string(th)).degraded;
    if (degraded) {
      const std::int64_t at = (std::chrono::steady_clock::now() - origin).count();
      std::int64_t seen = first_degraded.load();
      while (at < seen && !first_degraded.compare_exchange_weak(seen, at)) {
      }
      seen = last_degraded.load();
      while (at > seen && !last_degraded.compare_exchange_weak(seen, at)) {
      }
    }
    return degraded;
  });
  staller.join();
  REQUIRE(t.degraded > 0);
  // Degraded from the stall's start to the last degraded decision: at most the stall (200 ms)
  // plus one base back-off (50 ms) plus the margin. When the breaker doubled per
  // failure in flight and this lasted 2.1 s.
  const auto span = std::chrono::nanoseconds(last_degraded.load() - stall_at.load());
  std::string failures;
  for (const auto& line : log) failures += line + "\n";
  INFO("stall began at " << ms(std::chrono::nanoseconds(stall_at.load())) << " ms; failures:\n"
                         << failures);
  CHECK(span < 200ms + 50ms + margin);
  CHECK(storage.stats().circuit_open == false);
  WARN("200 ms stall: degraded for " << ms(span) << " ms after it began; " << t.degraded << " of "
                                     << t.decisions << " decisions degraded");
}

TEST_CASE("A decision that spends its own budget before reaching Redis does not open the breaker",
          "[redis][deadline][breaker]") {
  // One client's 8 MiB key of '}' (each byte escaped to 3) takes far more than a 1 ms budget to
  // build: that decision is degraded, but the node did nothing wrong, so other clients' keys
  // must still go to Redis (the breaker covers the whole node).
  auto o = rltest::test_redis_options("budget");
  o.command_timeout = 1ms;
  o.failure_policy = ratelimit::FailurePolicy::fail_open;
  std::vector<ratelimit::RedisFailure> seen;
  o.on_failure = [&seen](const ratelimit::RedisFailure& f) { seen.push_back(f); };
  ratelimit::RedisStorage storage(o);
  ratelimit::ManualClock clock;
  ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::RedisStorage> tb(
      {5, ratelimit::per_minute(5)}, storage, clock);
  const auto d = tb.try_acquire(std::string(8 << 20, '}'));
  CHECK(d.degraded);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].kind == ratelimit::RedisFailureKind::timeout);
  CHECK_FALSE(storage.stats().circuit_open);
}

TEST_CASE("A batch whose budget is spent while it is formatted stops formatting it",
          "[redis][deadline][batch]") {
  // 20,000 calls take more than a 10 ms budget to format (about 30 ms at -O2, 100 ms under
  // ASan): the batch gives up while formatting, "before sending", instead of formatting the
  // rest only to have the I/O thread expire it ("before it was sent"). Where even reaching the
  // formatting takes 10 ms (100,000 calls took 23 ms at -O2, most of it faulting in fresh
  // pages for their results), it gives up before it, with the same failure.
  auto o = rltest::test_redis_options("formatting");
  o.command_timeout = 10ms;
  std::vector<ratelimit::RedisFailure> seen;
  o.on_failure = [&seen](const ratelimit::RedisFailure& f) { seen.push_back(f); };
  ratelimit::RedisStorage storage(o);
  ratelimit::ManualClock clock;
  Bucket tb({10, ratelimit::per_second(1)}, storage, clock);
  const auto d = decide_batch(storage, tb, "f", 20'000);
  REQUIRE(d.size() == 20'000u);
  CHECK(std::all_of(d.begin(), d.end(), [](const ratelimit::Decision& x) { return x.degraded; }));
  REQUIRE(seen.size() == 1u);  // one request, one failure
  CHECK(seen[0].kind == ratelimit::RedisFailureKind::timeout);
  CHECK_THAT(seen[0].message, Catch::EndsWith("timed out before sending"));
  CHECK_FALSE(storage.stats().circuit_open);  // the node did nothing wrong
}

namespace lone_caller_test {

/// The threads `on_round_trip` ran on: the I/O thread's, or a blocking caller's that made its
/// round trip itself.
struct RoundTripThreads : ratelimit::Listener {
  std::mutex mutex;
  std::vector<std::thread::id> ids;
  void on_round_trip(const ratelimit::RoundTripEvent&) override {
    const std::lock_guard lock(mutex);
    ids.push_back(std::this_thread::get_id());
  }
  std::size_t on(std::thread::id id) {
    const std::lock_guard lock(mutex);
    return static_cast<std::size_t>(std::count(ids.begin(), ids.end(), id));
  }
};

}  // namespace lone_caller_test

TEST_CASE("One thread deciding one at a time makes its own round trips, on time when Redis stops",
          "[redis][deadline][lone]") {
  rltest::ThrowawayRedis server;
  auto o = stalled_options(server.endpoint().port);
  // One connection: the I/O thread opens no second one (which would take a turn of its own
  // while the first is lent), so every lone decision after the first finds it lent.
  o.pool_size = 1;
  ratelimit::RedisStorage storage(o);
  auto seen = std::make_shared<lone_caller_test::RoundTripThreads>();
  storage.attach_listener(seen);
  ratelimit::ManualClock clock;
  Bucket tb({1'000'000, ratelimit::per_second(1)}, storage, clock);
  // The first decision connects and loads the script through the I/O thread; from then on the
  // I/O thread lends its idle connection, and each decision, the only one in flight, makes its
  // round trip on this thread: 20 round trips reported from here.
  REQUIRE_FALSE(tb.try_acquire("warm").degraded);
  const std::size_t before = seen->on(std::this_thread::get_id());
  for (int i = 0; i < 20; ++i) {
    const auto d = tb.try_acquire("lone");
    REQUIRE_FALSE(d.degraded);
    CHECK(d.remaining == 1'000'000 - 1 - i);  // capacity 1,000,000, i + 1 spent, no refill
  }
  CHECK(seen->on(std::this_thread::get_id()) - before == 20);
  // Stopped: the lone caller waits on its own thread, to its deadline, and fails closed.
  server.pause();
  const auto t = hammer(
      1, 600ms, [&](int, int i) { return tb.try_acquire("stopped" + std::to_string(i)).degraded; });
  server.resume();
  CHECK(t.degraded == t.decisions);
  CHECK(t.worst < 100ms + margin);
  // Back on Redis once it answers (the timed-out connection was closed, a new one opened): a
  // new key's first decision is exact (capacity - 1 left).
  const ratelimit::Decision d = once_answered(tb, "after");
  CHECK_FALSE(d.degraded);
  CHECK(d.remaining == 1'000'000 - 1);
  WARN("lone caller, stopped Redis: " << t.decisions << " decisions, longest " << ms(t.worst)
                                      << " ms (deadline 100)");
}

TEST_CASE(
    "One thread deciding one at a time after Redis restarted: the lent connection is not used",
    "[redis][deadline][lone][restart]") {
  rltest::ThrowawayRedis server;
  auto o = stalled_options(server.endpoint().port);
  o.pool_size = 1;
  ratelimit::RedisStorage storage(o);
  ratelimit::ManualClock clock;
  Bucket tb({1'000'000, ratelimit::per_second(1)}, storage, clock);
  REQUIRE_FALSE(tb.try_acquire("warm").degraded);
  REQUIRE_FALSE(tb.try_acquire("warm").degraded);  // on the lent connection
  // Killed while its connection is lent (nobody polls it), then up again: the next decision
  // finds the connection closed by the old server and goes through the I/O thread on a new one,
  // exact (the restarted Redis is empty: capacity - 1 left).
  server.kill();
  server.start();
  const auto d = tb.try_acquire("after restart");
  CHECK_FALSE(d.degraded);
  CHECK(d.remaining == 1'000'000 - 1);
}
