// Shutdown. Dropping the last handle of a Redis storage while decisions are in flight
// completes each of them exactly once (degraded at its deadline if Redis never answers), never
// crashes, and leaks nothing (this runs under AddressSanitizer's leak check). Also when the
// last handle is dropped by a completion itself, on the storage's I/O thread.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

#include "redis_admin.hpp"
#include "support/redis_backend.hpp"

using namespace std::chrono_literals;

namespace {

using Bucket = ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::RedisStorage>;

ratelimit::RedisOptions paused_options(const rltest::ThrowawayRedis& server) {
  auto o = rltest::test_redis_options("shutdown");
  o.port = server.endpoint().port;
  o.command_timeout = 200ms;
  o.failure_policy = ratelimit::FailurePolicy::fail_closed;
  return o;
}

template <class F>
bool eventually(F done) {
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

}  // namespace

TEST_CASE("Dropping the last handle with decisions in flight completes each exactly once",
          "[redis][async][shutdown]") {
  rltest::ThrowawayRedis server;
  std::vector<std::atomic<int>> calls(50);
  std::atomic<int> completed{0}, degraded{0};
  {
    ratelimit::RedisStorage storage(paused_options(server));
    ratelimit::ManualClock clock;
    Bucket tb({100, ratelimit::per_hour(1)}, storage, clock);
    REQUIRE_FALSE(tb.try_acquire("warm").degraded);
    server.pause();
    for (std::size_t i = 0; i < calls.size(); ++i)
      tb.try_acquire_async("k" + std::to_string(i), 1, [&, i](ratelimit::Decision d) {
        calls[i].fetch_add(1);
        degraded += d.degraded ? 1 : 0;
        completed.fetch_add(1);
      });
  }  // the limiter and the storage are gone; the decisions are not
  REQUIRE(eventually([&] { return completed.load() == 50; }));
  for (const auto& c : calls) CHECK(c.load() == 1);
  CHECK(degraded.load() == 50);  // Redis never answered: each was degraded at its deadline
  server.resume();
}

TEST_CASE("The last handle dropped inside a completion, on the I/O thread, ends cleanly",
          "[redis][async][shutdown]") {
  rltest::ThrowawayRedis server;
  std::atomic<int> completed{0};
  auto storage = std::make_shared<ratelimit::RedisStorage>(paused_options(server));
  ratelimit::ManualClock clock;
  auto tb = std::make_shared<Bucket>(ratelimit::TokenBucketConfig{100, ratelimit::per_hour(1)},
                                     *storage, clock);
  // Each completion holds the limiter; the last one to finish drops the last handle.
  for (int i = 0; i < 20; ++i)
    tb->try_acquire_async("k" + std::to_string(i), 1, [&completed, tb](ratelimit::Decision d) {
      (void)d;
      completed.fetch_add(1);
    });
  tb.reset();
  storage.reset();
  REQUIRE(eventually([&] { return completed.load() == 20; }));
  CHECK(completed.load() == 20);
}

TEST_CASE("A batch in flight when its storage goes completes exactly once",
          "[redis][async][shutdown][batch]") {
  rltest::ThrowawayRedis server;
  std::atomic<int> runs{0};
  std::size_t size = 0;
  {
    ratelimit::RedisStorage storage(paused_options(server));
    ratelimit::ManualClock clock;
    Bucket tb({100, ratelimit::per_hour(1)}, storage, clock);
    REQUIRE_FALSE(tb.try_acquire("warm").degraded);
    server.pause();
    ratelimit::RedisBatch batch(storage);
    for (int i = 0; i < 1'000; ++i) batch.add(tb, "b" + std::to_string(i));
    batch.run_async([&](std::vector<ratelimit::Decision> d) {
      size = d.size();
      runs.fetch_add(1);
    });
  }
  REQUIRE(eventually([&] { return runs.load() == 1; }));
  CHECK(size == 1'000u);
  server.resume();
}

TEST_CASE("The storage's I/O thread never takes a signal meant for the process",
          "[redis][async][signals]") {
  // A service blocks SIGTERM in its threads and waits for it with sigwait (the HTTP gateway
  // does). A storage made before that must not leave its I/O thread open to the signal: the
  // kernel would deliver it there and its default action would end the process. SIGUSR2 plays
  // SIGTERM here (same default action).
  ratelimit::RedisStorage storage(rltest::test_redis_options("signals"));
  ratelimit::ManualClock clock;
  Bucket tb({10, ratelimit::per_hour(1)}, storage, clock);
  REQUIRE_FALSE(tb.try_acquire("k").degraded);  // the I/O thread runs
  sigset_t usr2, previous;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  REQUIRE(pthread_sigmask(SIG_BLOCK, &usr2, &previous) == 0);
  REQUIRE(::kill(::getpid(), SIGUSR2) == 0);  // process-directed
  const timespec wait{5, 0};
  CHECK(sigtimedwait(&usr2, nullptr, &wait) == SIGUSR2);  // still pending, here
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}
