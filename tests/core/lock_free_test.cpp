// The lock-free path: decisions on keys already held go without their shard's lock (a lock bit in
// the slot, see Table::enter_fast). They must stay exact, one decision at a time per key, while
// everything that takes the shard's lock goes on around them: inserts that resize the shards
// (slots moved to a new array, the old one kept as a spare), sweeps and reclaim dropping fresh
// keys (slots shifted back), reset, and multi-key decisions (decide_all's dry runs and commits
// must see no lock-free decision in between). ThreadSanitizer runs this (label `concurrent`).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/core/all_of.hpp>
#include <ratelimit/ratelimit.hpp>

#include "support/admissions.hpp"

namespace lock_free_test {

using namespace std::chrono_literals;
using ratelimit::InMemoryStorage;
using ratelimit::ManualClock;

constexpr int hot_keys = 16;
constexpr std::int64_t capacity = 100;
constexpr int deciders = 3;
constexpr int rounds = 60;  // per decider and key: 3 x 60 = 180 attempts > capacity

std::string hot(int k) { return "hot-" + std::to_string(k); }

TEST_CASE("Lock-free decisions stay exact beside resizes, sweeps, reset and decide_all",
          "[in_memory][concurrency][lock_free]") {
  // One table (token bucket, name "t") decided by two limiters with different parameters:
  // `old` spends 1 token of 1 (refilled at 1/s) on 5,000 old keys at 1 s; `hot_limiter` holds
  // 100 tokens refilled at 1 per hour, so at the frozen 10 s nothing refills: every key's
  // admissions are exactly its first 100 spends. Judged with either parameters at 10 s the old
  // keys are fresh (full again since 2 s), so the sweeps drop them (slots shift back) while the
  // hot keys are decided; a fourth thread inserts 20,000 new keys (every shard resizes), a fifth
  // reclaims and resets absent keys, and a sixth spends 1 from a hot key of "t" and the same
  // key of a second table "u" (capacity 1,000: never the one that denies) as one decision.
  ManualClock clock;
  InMemoryStorage storage;
  ratelimit::TokenBucket<ManualClock> old({1, ratelimit::per_second(1)}, storage, clock, "t");
  ratelimit::TokenBucket<ManualClock> hot_limiter({capacity, ratelimit::per_hour(1)}, storage,
                                                  clock, "t");
  ratelimit::TokenBucket<ManualClock> other({1000, ratelimit::per_hour(1)}, storage, clock, "u");
  clock.set(1s);
  for (int i = 0; i < 5'000; ++i) REQUIRE(old.try_acquire("old-" + std::to_string(i)));
  clock.set(10s);
  // Every hot key held before the race (its first spend is an insert, under the lock).
  std::vector<std::vector<std::int64_t>> seen(hot_keys);  // remaining after each admission
  for (int k = 0; k < hot_keys; ++k) {
    const auto d = hot_limiter.try_acquire(hot(k));
    REQUIRE(d.allowed);
    seen[static_cast<std::size_t>(k)].push_back(d.remaining);
  }

  // Per thread, per key: the remaining of each admission (threads write only their own).
  std::vector<std::vector<std::vector<std::int64_t>>> mine(
      deciders + 1, std::vector<std::vector<std::int64_t>>(hot_keys));
  std::atomic<int> wrong{0};
  std::atomic<std::int64_t> both{0};  // multi-key decisions admitted
  std::atomic<bool> done{false};
  std::latch start(deciders + 3);
  std::vector<std::thread> pool;
  for (int t = 0; t < deciders; ++t)
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int r = 0; r < rounds; ++r)
        for (int k = 0; k < hot_keys; ++k) {
          const auto d = hot_limiter.try_acquire(hot(k));
          if (d.allowed)
            mine[static_cast<std::size_t>(t)][static_cast<std::size_t>(k)].push_back(d.remaining);
        }
    });
  pool.emplace_back([&] {  // the multi-key decisions
    start.arrive_and_wait();
    for (int r = 0; r < rounds; ++r)
      for (int k = 0; k < hot_keys; ++k) {
        const auto d = ratelimit::try_acquire_all(hot(k), 1, hot_limiter, other);
        if (!d.allowed) continue;
        ++both;
        mine[deciders][static_cast<std::size_t>(k)].push_back(d.decisions[0].remaining);
      }
  });
  pool.emplace_back([&] {  // inserts: every shard's array grows, keys move to new arrays
    start.arrive_and_wait();
    for (int i = 0; i < 20'000; ++i)
      if (!hot_limiter.try_acquire("new-" + std::to_string(i)).allowed) ++wrong;
  });
  std::thread reclaimer([&] {
    start.arrive_and_wait();
    for (int i = 0; !done.load(); ++i) {
      storage.reclaim(10s);
      hot_limiter.reset("absent-" + std::to_string(i));
    }
  });
  for (auto& th : pool) th.join();
  done = true;
  reclaimer.join();

  CHECK(wrong.load() == 0);
  for (int k = 0; k < hot_keys; ++k) {
    INFO("key " << hot(k));
    const auto i = static_cast<std::size_t>(k);
    // 100 tokens and no refill: exactly 100 admissions, leaving 99, 98, ..., 0 once each.
    CHECK(rltest::merged(seen[i], mine, i) == rltest::countdown(capacity));
    CHECK(hot_limiter.peek(hot(k)).remaining == 0);
  }
  // "u" was spent only by the admitted multi-key decisions, 1 each: a commit of "t" denied
  // after its dry run admitted (a lock-free spend in between) would spend "u" alone.
  std::int64_t u_left = 0;
  for (int k = 0; k < hot_keys; ++k) u_left += other.peek(hot(k)).remaining;
  CHECK(u_left == hot_keys * 1000 - both.load());
  // The old keys are all dropped, the new ones all held: a last reclaim leaves exactly the
  // 16 hot keys and 20,000 new ones of "t", and the keys of "u" the multi-key decisions spent.
  storage.reclaim(10s);
  std::int64_t u_keys = 0;
  for (int k = 0; k < hot_keys; ++k) u_keys += other.peek(hot(k)).remaining < 1000 ? 1 : 0;
  CHECK(storage.size() == static_cast<std::size_t>(hot_keys + 20'000 + u_keys));
}

TEST_CASE("Lock-free decisions lose no update while their keys' slots move",
          "[in_memory][concurrency][lock_free]") {
  // Three threads spend 1 token at a time from 128 held keys (10^9 tokens, no refill at the
  // frozen time: nothing is ever denied), while a fourth inserts keys and resets them 64 later
  // (each reset shifts the keys after it back by one slot, often a hot one; the inserts resize
  // the shards, moving every key to a new array) and a fifth reclaims (dropping the old keys,
  // fresh at 10 s, shifts slots too). A decision lost in a move (the state copied before a
  // lock-free spend and the copy kept) would show as two admissions leaving the same remaining.
  constexpr int keys = 128, threads = 3, passes = 200;
  constexpr std::int64_t tokens = 1'000'000'000;
  ManualClock clock;
  InMemoryStorage storage;
  ratelimit::TokenBucket<ManualClock> old({1, ratelimit::per_second(1)}, storage, clock, "t");
  ratelimit::TokenBucket<ManualClock> limiter({tokens, ratelimit::per_second(1)}, storage, clock,
                                              "t");
  clock.set(1s);
  for (int i = 0; i < 3'000; ++i) REQUIRE(old.try_acquire("old-" + std::to_string(i)));
  clock.set(10s);
  for (int k = 0; k < keys; ++k) REQUIRE(limiter.try_acquire(hot(k)).remaining == tokens - 1);
  std::vector<std::vector<std::vector<std::int64_t>>> mine(
      threads, std::vector<std::vector<std::int64_t>>(keys));
  std::atomic<int> running{threads};
  std::latch start(threads + 2);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int r = 0; r < passes; ++r)
        for (int k = 0; k < keys; ++k)
          mine[static_cast<std::size_t>(t)][static_cast<std::size_t>(k)].push_back(
              limiter.try_acquire(hot(k)).remaining);
      --running;
    });
  pool.emplace_back([&] {
    start.arrive_and_wait();
    for (int i = 0; running.load() > 0; ++i) {
      (void)limiter.try_acquire("churn-" + std::to_string(i));
      if (i >= 64) limiter.reset("churn-" + std::to_string(i - 64));
    }
  });
  pool.emplace_back([&] {
    start.arrive_and_wait();
    while (running.load() > 0) storage.reclaim(10s);
  });
  for (auto& th : pool) th.join();
  for (int k = 0; k < keys; ++k) {
    INFO("key " << hot(k));
    const auto all = rltest::merged({tokens - 1}, mine, static_cast<std::size_t>(k));
    // 1 + 3 x 200 = 601 spends of 1 token: remaining 10^9 - 601 up to 10^9 - 1, once each.
    const std::int64_t spends = 1 + threads * passes;
    REQUIRE(all.size() == static_cast<std::size_t>(spends));
    CHECK(all.front() == tokens - spends);
    CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
    CHECK(limiter.peek(hot(k)).remaining == tokens - spends);
  }
}

TEST_CASE("Two threads deciding one fixed-window key without the lock admit exactly the limit",
          "[in_memory][concurrency][lock_free]") {
  // 1,000 per minute at a frozen time: of 2 x 800 attempts, exactly 1,000 admitted, leaving
  // 999, ..., 0 once each, whether each decision went lock-free or (every 8th of a thread,
  // for the shard's upkeep) under the lock.
  ManualClock clock;
  clock.set(30s);
  ratelimit::FixedWindow<ManualClock> limiter(ratelimit::per_minute(1000), InMemoryStorage{},
                                              clock);
  REQUIRE(limiter.try_acquire("k", 1).remaining == 999);  // held before the race
  std::vector<std::vector<std::int64_t>> mine(2);
  std::latch start(2);
  std::vector<std::thread> pool;
  for (int t = 0; t < 2; ++t)
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int i = 0; i < 800; ++i) {
        const auto d = limiter.try_acquire("k");
        if (d.allowed) mine[static_cast<std::size_t>(t)].push_back(d.remaining);
      }
    });
  for (auto& th : pool) th.join();
  CHECK(rltest::merged({999}, mine) == rltest::countdown(1000));
}

TEST_CASE("Lock-free decisions on the empty key stay exact beside decide_all, reclaim and size",
          "[in_memory][concurrency][lock_free]") {
  // A limiter used without a key keeps one state apart from the shards; once it counts as a key,
  // its decisions take a busy flag instead of its lock. 100 tokens refilled at 1 per hour at a
  // frozen 10 s: nothing refills, so the admissions are exactly the first 100 spends, leaving
  // 99, ..., 0 once each, whether a decision went lock-free or through decide_all (which holds
  // the state's lock for its dry run and commit), while another thread reclaims (the state is
  // spent, never fresh: it stays a key) and counts the keys.
  ManualClock clock;
  clock.set(10s);
  InMemoryStorage storage;
  ratelimit::TokenBucket<ManualClock> t({capacity, ratelimit::per_hour(1)}, storage, clock, "t");
  ratelimit::TokenBucket<ManualClock> u({1000, ratelimit::per_hour(1)}, storage, clock, "u");
  const auto first = t.try_acquire();  // under the lock: the state now counts as a key
  REQUIRE(first.allowed);
  std::vector<std::vector<std::int64_t>> mine(deciders + 1);
  std::atomic<std::int64_t> both{0};
  std::atomic<int> lost{0};
  std::atomic<bool> done{false};
  std::latch start(deciders + 2);
  std::vector<std::thread> pool;
  for (int d = 0; d < deciders; ++d)
    pool.emplace_back([&, d] {
      start.arrive_and_wait();
      for (int r = 0; r < rounds; ++r)
        if (const auto x = t.try_acquire(); x.allowed)
          mine[static_cast<std::size_t>(d)].push_back(x.remaining);
    });
  pool.emplace_back([&] {
    start.arrive_and_wait();
    for (int r = 0; r < rounds; ++r)
      if (const auto x = ratelimit::try_acquire_all("", 1, t, u); x.allowed) {
        ++both;
        mine[deciders].push_back(x.decisions[0].remaining);
      }
  });
  std::thread reclaimer([&] {
    start.arrive_and_wait();
    while (!done.load()) {
      storage.reclaim(10s);
      if (storage.size() < 1) ++lost;  // "t"'s state is spent: it never stops being a key
    }
  });
  for (auto& th : pool) th.join();
  done = true;
  reclaimer.join();

  CHECK(rltest::merged({first.remaining}, mine) == rltest::countdown(capacity));
  CHECK(t.peek().remaining == 0);
  // "u" was spent only by the admitted multi-key decisions, 1 each.
  CHECK(u.peek().remaining == 1000 - both.load());
  CHECK(lost.load() == 0);
}

TEST_CASE("Resetting the empty key while it is decided lock-free keeps its count exact",
          "[in_memory][concurrency][lock_free][reset]") {
  // Two threads spend the empty key (10^6 tokens at a frozen time: always admitted) while a
  // third resets it: at the end of every round the state counts as a key exactly when it is
  // spent. A decision that read "counts as a key" before a reset and took `busy` after it must
  // not spend the reset state without counting it (it checks again once it holds `busy` and
  // has seen the lock free). That race is not what this catches: it leaves the count wrong only
  // until the next decision, which goes under the lock and counts the key, so with that check
  // removed and a yield in the window this still passed. It guards the end state against
  // reset racing the first admission under the lock, and runs the protocol under TSan.
  constexpr std::int64_t tokens = 1'000'000;
  ManualClock clock;
  clock.set(10s);
  InMemoryStorage storage;
  ratelimit::TokenBucket<ManualClock> limiter({tokens, ratelimit::per_second(1)}, storage, clock);
  for (int round = 0; round < 50; ++round) {
    REQUIRE(limiter.try_acquire().allowed);
    std::latch start(3);
    std::vector<std::thread> pool;
    for (int t = 0; t < 2; ++t)
      pool.emplace_back([&] {
        start.arrive_and_wait();
        for (int i = 0; i < 200; ++i) (void)limiter.try_acquire();
      });
    pool.emplace_back([&] {
      start.arrive_and_wait();
      for (int i = 0; i < 20; ++i) limiter.reset();
    });
    for (auto& th : pool) th.join();
    INFO("round " << round);
    const bool spent = limiter.peek().remaining < tokens;
    CHECK(storage.size() == (spent ? 1u : 0u));
  }
}

}  // namespace lock_free_test
