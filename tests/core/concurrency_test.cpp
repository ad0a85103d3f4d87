// Exactness under contention: with the clock frozen, K threads hammering one key admit exactly
// the limit, never one more, for each algorithm and every storage backend. Built as its own
// executable with the CTest label `concurrent`, so that it also runs under ThreadSanitizer.
//
// With time frozen nothing refills, leaks or slides, so every algorithm admits exactly `limit`
// unit requests per key. Since each admission is atomic, the admitted decisions' `remaining`
// fields are exactly limit - 1, limit - 2, ..., 0, each seen once.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <latch>
#include <numeric>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

#include "../support/algorithms.hpp"
#include "../support/backends.hpp"

using namespace std::chrono_literals;
using ratelimit::ManualClock;

namespace {

constexpr int threads = 8;
constexpr std::int64_t limit = 100;
// 8 x 40 = 320 attempts for 100 units: most threads meet denials.
constexpr int attempts_per_thread = 40;

const rltest::Shape hundred_per_minute{limit, ratelimit::per_minute(limit)};

/// Runs `body(thread_index)` on `threads` threads released together.
template <class F>
void run_together(F body) {
  std::latch start(threads);
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      start.arrive_and_wait();
      body(i);
    });
  for (auto& t : pool) t.join();
}

std::vector<std::int64_t> zero_to(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("Eight threads hammering one key admit exactly the limit",
                        "[token_bucket][leaky_bucket][fixed_window][sliding_log][sliding_counter]"
                        "[concurrent][any_storage]",
                        Backends) {
  INFO("storage: " << TestType::name);
  // "hot", and the empty key: a limiter used without a key, which the in-memory storage keeps
  // apart from its shards (its own state and lock).
  const std::string key = GENERATE(as<std::string>{}, "hot", "");
  INFO("key: '" << key << "'");
  rltest::for_each_algorithm([&]<class Algo>() {
    INFO("algorithm: " << Algo::name);
    ManualClock clock;
    clock.set(5s);
    auto limiter = Algo::make(hundred_per_minute, TestType::make(), clock);
    std::vector<std::vector<std::int64_t>> remaining(threads);
    run_together([&](int t) {
      for (int i = 0; i < attempts_per_thread; ++i) {
        if (i % 4 == 0) (void)limiter.peek(key);
        const auto d = limiter.try_acquire(key);
        if (d.allowed) remaining[static_cast<std::size_t>(t)].push_back(d.remaining);
      }
    });
    std::vector<std::int64_t> all;
    for (const auto& r : remaining) all.insert(all.end(), r.begin(), r.end());
    std::sort(all.begin(), all.end());
    CHECK(all.size() == static_cast<std::size_t>(limit));
    CHECK(all == zero_to(limit));
    CHECK(limiter.peek(key).remaining == 0);
    CHECK_FALSE(limiter.try_acquire(key));
  });
}

TEMPLATE_LIST_TEST_CASE(
    "Eight threads with their own limiters on one storage share one key's "
    "limit exactly",
    "[token_bucket][leaky_bucket][fixed_window][sliding_log][sliding_counter]"
    "[concurrent][any_storage]",
    Backends) {
  INFO("storage: " << TestType::name);
  rltest::for_each_algorithm([]<class Algo>() {
    INFO("algorithm: " << Algo::name);
    ManualClock clock;
    clock.set(5s);
    auto storage = TestType::make();
    // Costs 1..3: the admitted costs must add up to at most the limit, and what is left must be
    // exactly what they did not spend.
    std::atomic<std::int64_t> spent{0};
    run_together([&](int t) {
      // Each thread binds its own limiter (same algorithm, same name) while others decide.
      auto limiter = Algo::make(hundred_per_minute, storage, clock, "shared");
      for (int i = 0; i < attempts_per_thread; ++i) {
        const std::int64_t cost = 1 + (t + i) % 3;
        if (limiter.try_acquire("hot", cost)) spent += cost;
      }
    });
    auto observer = Algo::make(hundred_per_minute, storage, clock, "shared");
    CHECK(spent.load() <= limit);
    CHECK(observer.peek("hot").remaining == limit - spent.load());
    // Attempts far outnumber the limit: only less than the largest cost (3) can be left over.
    CHECK(spent.load() > limit - 3);
  });
}

TEMPLATE_LIST_TEST_CASE("Eight threads on distinct keys each get the whole limit",
                        "[token_bucket][leaky_bucket][fixed_window][sliding_log][sliding_counter]"
                        "[concurrent][any_storage]",
                        Backends) {
  INFO("storage: " << TestType::name);
  rltest::for_each_algorithm([]<class Algo>() {
    INFO("algorithm: " << Algo::name);
    ManualClock clock;
    clock.set(5s);
    auto limiter = Algo::make(hundred_per_minute, TestType::make(), clock);
    std::vector<std::vector<std::int64_t>> remaining(threads);
    run_together([&](int t) {
      const std::string key = "key-" + std::to_string(t);
      for (std::int64_t i = 0; i < limit + 20; ++i) {
        const auto d = limiter.try_acquire(key);
        if (d.allowed) remaining[static_cast<std::size_t>(t)].push_back(d.remaining);
      }
    });
    for (auto& r : remaining) {
      // One thread per key: its admissions leave 99, 98, ..., 0 in order.
      std::vector<std::int64_t> expected = zero_to(limit);
      std::reverse(expected.begin(), expected.end());
      CHECK(r == expected);
    }
  });
}

TEMPLATE_LIST_TEST_CASE(
    "Eight threads reserving one key are granted exactly twice the limit, each due one unit's "
    "worth after the one before",
    "[token_bucket][leaky_bucket][reserve][concurrent][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  rltest::for_each_algorithm([]<class Algo>() {
    using Model = typename Algo::Model;
    if constexpr (ratelimit::Reservable<Model>) {
      INFO("algorithm: " << Algo::name);
      ManualClock clock;
      clock.set(5s);
      auto limiter = Algo::make(hundred_per_minute, TestType::make(), clock);
      std::vector<std::vector<std::chrono::nanoseconds>> delays(threads);
      run_together([&](int t) {
        for (int i = 0; i < attempts_per_thread; ++i) {
          const auto r = limiter.reserve("hot", 1);
          if (r.ok()) delays[static_cast<std::size_t>(t)].push_back(r.delay());
        }
      });
      std::vector<std::chrono::nanoseconds> all;
      for (const auto& d : delays) all.insert(all.end(), d.begin(), d.end());
      std::sort(all.begin(), all.end());
      // Time frozen: the i-th grant (from 0) finds i units owed, worth i x 600 ms (100 per
      // minute). Token bucket: due once the bucket would hold it, (i + 1 - 100) x 600 ms (0
      // while it fits); leaky bucket: once the i units ahead have leaked, i x 600 ms. The debt
      // stops at 2 x 100 units: 200 grants of the 320 attempts.
      std::vector<std::chrono::nanoseconds> expected;
      for (std::int64_t i = 0; i < 2 * limit; ++i) {
        const std::int64_t units = std::is_same_v<Model, ratelimit::TokenBucketModel>
                                       ? std::max<std::int64_t>(0, i + 1 - limit)
                                       : i;
        expected.push_back(units * 600ms);
      }
      CHECK(all == expected);
      CHECK_FALSE(limiter.reserve("hot", 1).ok());
    }
  });
}
