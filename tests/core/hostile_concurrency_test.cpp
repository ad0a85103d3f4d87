// Hostile traffic in process, concurrently: the table's incremental work (sweeps of a shard, visits
// to idle shards with try_lock, resizes moved 64 slots at a time, reclaim in chunks) runs under the
// same shard locks as the decisions. Threads deciding while all of it goes on must see every
// decision exact; ThreadSanitizer runs this (label `concurrent`).
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

using namespace std::chrono_literals;
using ratelimit::InMemoryStorage;
using ratelimit::ManualClock;

TEST_CASE("Decisions stay exact while sweeps, resizes and reclaim run in other threads",
          "[in_memory][concurrency][reclaim]") {
  // A bucket of 1 token refilled at 1 per second. 20,000 old keys spend their token at 1 s and
  // are fresh (droppable) from 2 s on. At 10 s (the clock then frozen) 4 threads each decide
  // 5,000 new keys of their own twice: the first request admitted, the second denied with
  // retry_after 1 s (no refill at a frozen time), while the sweeps drop the old keys, the
  // arrays grow and shrink, and a fifth thread calls reclaim and stats in a loop.
  ManualClock clock;
  InMemoryStorage storage;
  ratelimit::TokenBucket<ManualClock> limiter({1, ratelimit::per_second(1)}, storage, clock);
  clock.set(1s);
  for (int i = 0; i < 20'000; ++i) REQUIRE(limiter.try_acquire("old-" + std::to_string(i)));
  clock.set(10s);
  constexpr int threads = 4, per_thread = 5'000;
  std::atomic<int> wrong{0};
  std::atomic<bool> done{false};
  std::thread reclaimer([&] {
    while (!done.load()) {
      storage.reclaim(10s);
      (void)storage.stats();
    }
  });
  std::vector<std::thread> deciders;
  for (int t = 0; t < threads; ++t)
    deciders.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        const std::string key = "new-" + std::to_string(t) + "-" + std::to_string(i);
        if (!limiter.try_acquire(key).allowed) ++wrong;
        const auto second = limiter.try_acquire(key);
        if (second.allowed || second.retry_after != 1s) ++wrong;
      }
    });
  for (auto& d : deciders) d.join();
  done = true;
  reclaimer.join();
  CHECK(wrong.load() == 0);
  // Every new key is held (not fresh at 10 s); every old one is gone after a last reclaim.
  storage.reclaim(10s);
  CHECK(storage.size() == static_cast<std::size_t>(threads * per_thread));
}
