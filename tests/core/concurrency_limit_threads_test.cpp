// The concurrency limit under threads: never more than N in flight under 8 threads, and
// releases racing acquisitions keep the count exact (run under TSan), on every storage of the
// suite. Time is frozen
// (ManualClock), so no lease ends: every slot is freed by its release only. Assertions run on
// the main thread (Catch2 v2 is not thread-safe); the threads only count.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <latch>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/algorithms/concurrency.hpp>
#include <ratelimit/ratelimit.hpp>

#include "../support/backends.hpp"

using namespace std::chrono_literals;

namespace concurrency_limit_threads_test {

constexpr int thread_count = 8;
constexpr int attempts_each = 200;
constexpr std::int64_t slots = 3;  // N: far fewer than the threads, so they contend

/// The most requests in flight seen at once: raised by each holder after it acquires.
void raise_to(std::atomic<std::int64_t>& max, std::int64_t v) {
  std::int64_t seen = max.load();
  while (v > seen && !max.compare_exchange_weak(seen, v)) {
  }
}

}  // namespace concurrency_limit_threads_test

TEMPLATE_LIST_TEST_CASE(
    "Eight threads acquiring and releasing never hold more than N slots, and give every one back",
    "[concurrency_limit][concurrent][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  using namespace concurrency_limit_threads_test;
  ratelimit::ManualClock clock;
  ratelimit::ConcurrencyLimiter<ratelimit::ManualClock, typename TestType::Storage> limiter(
      {slots, 1s}, TestType::make(), clock);
  std::atomic<std::int64_t> in_flight{0}, max_in_flight{0}, admitted{0}, released{0};
  std::latch start(thread_count);
  std::vector<std::thread> pool;
  for (int i = 0; i < thread_count; ++i)
    pool.emplace_back([&, i] {
      start.arrive_and_wait();
      // Even threads release each slot at once; odd ones keep theirs until they get the next
      // (its move-assignment releases the old one), so releases race acquisitions of other
      // threads and of the same one. `in_flight` counts a slot from after its acquire to just
      // before its release: never more than the storage counts held.
      decltype(limiter.try_acquire("k")) kept;
      for (int a = 0; a < attempts_each; ++a) {
        auto slot = limiter.try_acquire("k");
        if (!slot) continue;
        admitted.fetch_add(1);
        raise_to(max_in_flight, in_flight.fetch_add(1) + 1);
        if (i % 2 == 0) {
          in_flight.fetch_sub(1);
          if (slot.release()) released.fetch_add(1);
        } else {
          if (kept) {
            in_flight.fetch_sub(1);
            released.fetch_add(1);
          }
          kept = std::move(slot);
        }
      }
      if (kept) {
        in_flight.fetch_sub(1);
        if (kept.release()) released.fetch_add(1);
      }
    });
  for (auto& t : pool) t.join();
  // Never more than N at once, and some requests did get slots.
  CHECK(max_in_flight.load() <= slots);
  CHECK(admitted.load() > 0);
  // Every admitted slot was released exactly once, and the storage counts none held: all N free.
  CHECK(released.load() == admitted.load());
  CHECK(limiter.peek("k").remaining == slots);
  auto all = std::vector<decltype(limiter.try_acquire("k"))>{};
  for (std::int64_t n = 0; n < slots; ++n) all.push_back(limiter.try_acquire("k"));
  for (const auto& s : all) CHECK(s);
  CHECK_FALSE(limiter.try_acquire("k"));
}
