// The lock-free path from the attacker's side: Table::enter_fast (Table::enter_fast) against what
// it must stay atomic with. Keys whose hashes collide (one tag for every key, or distinct tags all
// probing from one home), multi-key decisions while both of their keys are decided lock-free
// near the limit, more threads than cores on one key, and limiters whose clocks differ sharing
// one table while sweeps judge at yet another time. Each checks exact admissions at a frozen
// time (every admission leaves a distinct remaining). ThreadSanitizer runs this (label
// `concurrent`).
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <latch>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/core/all_of.hpp>
#include <ratelimit/memory/detail/table.hpp>
#include <ratelimit/ratelimit.hpp>

#include "support/admissions.hpp"

namespace lock_free_attack_test {

using namespace std::chrono_literals;
using ratelimit::InMemoryStorage;
using ratelimit::ManualClock;
using ratelimit::Operation;
using ratelimit::SlidingCounterModel;
using ratelimit::TokenBucketModel;
using ratelimit::detail::Hash128;

/// A second hash word that tells keys apart (SipHash-2-4 under a fixed test key).
std::uint64_t distinct_word(std::string_view key) {
  return ratelimit::detail::siphash<2, 4>({0x0123456789abcdef, 0xfedcba9876543210}, key.data(),
                                          key.size());
}

/// Every key has the same first word: one shard, one tag, one home; told apart only by the
/// second word (checked after the lock bit is taken).
struct OneTagHash {
  Hash128 operator()(std::string_view key) const noexcept {
    return {0x5555555555555555, distinct_word(key)};
  }
};

/// Distinct first words, all multiples of 64 below 2^26: one shard, distinct tags, and home 0
/// in any array of fewer than 2^38 slots, so the keys probe past each other (the first 64 in
/// the array, the rest in the overflow map).
struct OneHomeHash {
  Hash128 operator()(std::string_view key) const noexcept {
    const std::uint64_t w = distinct_word(key);
    return {(w % (std::uint64_t{1} << 20)) * 64, w};
  }
};

template <class Hash>
void colliding_keys_stay_exact() {
  // 3 threads spend 1 token at a time from 32 hot keys of 50 tokens (refill 1 per hour, so at
  // the frozen 10 s nothing refills: exactly 50 admissions each), while a fourth inserts churn
  // keys and resets each 16 later (shifting the slots after it, hot ones among them) and a
  // fifth reclaims at 10 s (dropping 200 old keys spent at 1 s under 1 per second, fresh since
  // 2 s). All keys collide (see the hashes), so lock-free decisions take bits of slots whose tag
  // matches theirs but whose key is another (back off on the check) or probe past other keys.
  constexpr int hot_keys = 32, threads = 3, rounds = 25;  // 3 x 25 = 75 attempts > 50
  constexpr std::int64_t tokens = 50;
  ratelimit::detail::Table<TokenBucketModel, Hash> table;
  const auto old_params = TokenBucketModel::make_params({1, ratelimit::per_second(1)});
  const auto hot_params = TokenBucketModel::make_params({tokens, ratelimit::per_hour(1)});
  for (int i = 0; i < 200; ++i)
    REQUIRE(table.apply(old_params, "old-" + std::to_string(i), 1s, Operation{}).allowed);
  const auto hot = [](int k) { return "hot-" + std::to_string(k); };
  std::vector<std::vector<std::int64_t>> seen(hot_keys);
  for (int k = 0; k < hot_keys; ++k) {
    const auto d = table.apply(hot_params, hot(k), 10s, Operation{});
    REQUIRE(d.allowed);
    seen[static_cast<std::size_t>(k)].push_back(d.remaining);
  }
  std::vector<std::vector<std::vector<std::int64_t>>> mine(
      threads, std::vector<std::vector<std::int64_t>>(hot_keys));
  std::atomic<int> running{threads};
  std::latch start(threads + 2);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int r = 0; r < rounds; ++r)
        for (int k = 0; k < hot_keys; ++k) {
          const auto d = table.apply(hot_params, hot(k), 10s, Operation{});
          if (d.allowed)
            mine[static_cast<std::size_t>(t)][static_cast<std::size_t>(k)].push_back(d.remaining);
        }
      --running;
    });
  pool.emplace_back([&] {
    start.arrive_and_wait();
    for (int i = 0; running.load() > 0; ++i) {
      (void)table.apply(hot_params, "churn-" + std::to_string(i), 10s, Operation{});
      if (i >= 16) table.reset("churn-" + std::to_string(i - 16));
    }
  });
  pool.emplace_back([&] {
    start.arrive_and_wait();
    while (running.load() > 0) (void)table.reclaim(10s);
  });
  for (auto& th : pool) th.join();
  for (int k = 0; k < hot_keys; ++k) {
    INFO("key " << hot(k));
    const auto i = static_cast<std::size_t>(k);
    // 50 tokens, no refill: admissions leave 49, ..., 0 once each.
    CHECK(rltest::merged(seen[i], mine, i) == rltest::countdown(tokens));
    CHECK(table.apply(hot_params, hot(k), 10s, Operation{1, true}).remaining == 0);
  }
}

/// Key "i" (0 to 7) has its home at slot i of a shard's first array (8 slots): the first word
/// is i x 2^61, so the tag's top 3 bits are i (the home in 8 slots is tag x 8 / 2^64) and its
/// low 6 bits 0 (shard 0); the second word tells keys apart.
struct SlotIndexHash {
  Hash128 operator()(std::string_view key) const noexcept {
    return {std::stoull(std::string(key)) << 61, distinct_word(key)};
  }
};

/// A token bucket whose state is padded to 24 bytes: the library's lock-free models all have
/// 16-byte states now, but the table takes any model's (a user's too).
struct WideBucketModel {
  static constexpr std::string_view name = "wide_bucket";
  using Params = TokenBucketModel::Params;
  struct State {
    TokenBucketModel::State bucket;
    std::int64_t pad = 0;
  };
  static ratelimit::Decision apply(const Params& p, State& s, std::chrono::nanoseconds now,
                                   const Operation& op) noexcept {
    return TokenBucketModel::apply(p, s.bucket, now, op);
  }
  static std::chrono::nanoseconds fresh_at(const Params& p, const State& s) noexcept {
    return TokenBucketModel::fresh_at(p, s.bucket);
  }
};

TEST_CASE("A decision writes one cache line at 5 of 8 slot positions (tag and state first)",
          "[table][lock_free]") {
  // A 24-byte state's slot is 40 bytes: the tag (8) and the state (24), which a lock-free
  // decision writes, then the check (8), only read. Slot i starts at 64 + 40 i bytes into its
  // line-aligned array (after the 64-byte header), so its written words are bytes
  // [64 + 40 i, 64 + 40 i + 32), in lines 1 + (40 i) / 64 to 1 + (40 i + 31) / 64:
  // i = 0: 0..31 -> 1 line; 1: 40..71 -> 2; 2: 80..111 -> 1; 3: 120..151 -> 2; 4: 160..191 -> 1;
  // 5: 200..231 -> 1; 6: 240..271 -> 2; 7: 280..311 -> 1. With the check before the state,
  // i = 4 would span two lines too (tag at 160..167, check 168..175, state 176..199).
  using SlotTable = ratelimit::detail::Table<WideBucketModel, SlotIndexHash>;
  static_assert(sizeof(WideBucketModel::State) == 24);
  static_assert(SlotTable::slot_bytes() == 40);
  const auto params = TokenBucketModel::from_rate(ratelimit::per_second(10));
  for (std::size_t i = 0; i < 8; ++i) {
    SlotTable table;  // one key: no resize
    const std::string key = std::to_string(i);
    REQUIRE(table.apply(params, key, 1s, Operation{}).allowed);
    const std::size_t first = 40 * i, last = 40 * i + 31;  // after the header's line
    CHECK(table.lines_written(key) == last / 64 - first / 64 + 1);
  }
  // Not held: no slot.
  SlotTable empty;
  CHECK(empty.lines_written("3") == 0);
}

TEMPLATE_TEST_CASE("A lock-free model's decision writes one cache line at every slot position",
                   "[table][lock_free]", TokenBucketModel, ratelimit::LeakyBucketModel,
                   ratelimit::FixedWindowModel, SlidingCounterModel) {
  // Their states are 16 bytes (GcraState: at_ns and one packed word; a window's time and
  // counts), so a slot is 8 + 16 + 8 = 32 bytes: slot i is bytes [64 + 32 i, 64 + 32 i + 32) of
  // its array, inside line 1 + i / 2, and the 24 bytes a decision writes (tag and state) with
  // it.
  using SlotTable = ratelimit::detail::Table<TestType, SlotIndexHash>;
  static_assert(sizeof(typename TestType::State) == 16);
  static_assert(SlotTable::slot_bytes() == 32);
  const auto params = TestType::from_rate(ratelimit::per_second(10));
  for (std::size_t i = 0; i < 8; ++i) {
    SlotTable table;
    const std::string key = std::to_string(i);
    REQUIRE(table.apply(params, key, 1s, Operation{}).allowed);
    CHECK(table.lines_written(key) == 1);
  }
}

TEST_CASE("Lock-free decisions stay exact when every key has the same tag",
          "[in_memory][concurrency][lock_free][hash]") {
  colliding_keys_stay_exact<OneTagHash>();
}

TEST_CASE("Lock-free decisions stay exact when every key probes from the same home",
          "[in_memory][concurrency][lock_free][hash]") {
  colliding_keys_stay_exact<OneHomeHash>();
}

/// Key "i" (decimal) has home slot i in an array of 11 slots (what a shard holding 7 keys
/// has: 8 slots, then 11 at the 6th insert), all in one shard: keys 0 .. 6 sit in a run at
/// their homes, so erasing key 0 scans the whole run (none of the others may shift back)
/// before it clears slot 0's tag.
struct RunHash {
  Hash128 operator()(std::string_view key) const {
    const std::uint64_t i = std::stoull(std::string(key));
    __extension__ using u128 = unsigned __int128;
    const auto start = static_cast<std::uint64_t>((static_cast<u128>(i) << 64) / 11);
    return {(start / 64 + 2) * 64 + 1, i + 1000};  // just past slot i's start; shard 1
  }
};

TEST_CASE("Resetting a key decided lock-free loses no key and leaves no stale state",
          "[in_memory][concurrency][lock_free][reset]") {
  // Two threads spend keys 0 .. 6 lock-free (10^9 tokens at a frozen time: always admitted)
  // while a third inserts and resets key 0 in a loop. A decision that took key 0's bit just
  // after the reset waited for it, and read the shard's lock only after the reset released it,
  // used to decide anyway on the emptied slot and write key 0's tag back into it, uncounted
  // (the table then counted one key fewer than it held) or beside the key re-inserted there.
  // Reproduced by delaying enter_fast between its compare-and-swap and its read of the lock
  // (a preemption there); without that delay the window is a few instructions, so this test
  // only guards it. Keys 1 .. 6 are never reset nor fresh: always held, and counted.
  constexpr int keys = 7, rounds = 3;
  constexpr std::int64_t tokens = 1'000'000'000;
  const auto params = TokenBucketModel::make_params({tokens, ratelimit::per_second(1000)});
  for (int round = 0; round < rounds; ++round) {
    ratelimit::detail::Table<TokenBucketModel, RunHash> table;
    for (int k = 0; k < keys; ++k)
      REQUIRE(table.apply(params, std::to_string(k), 10s, Operation{}).allowed);
    std::atomic<bool> stop{false};
    std::atomic<int> undercounted{0};
    std::latch start(3);
    std::vector<std::thread> pool;
    for (int t = 0; t < 2; ++t)
      pool.emplace_back([&, t] {
        start.arrive_and_wait();
        for (int i = 0; !stop.load(); ++i)
          (void)table.apply(params, std::to_string((i * (t + 1)) % keys), 10s, Operation{});
      });
    pool.emplace_back([&] {
      start.arrive_and_wait();
      for (int i = 0; i < 20'000; ++i) {
        // A pause after each, so that the shard's lock is mostly free: a decision that lost
        // its bit then finds the lock released, not taken again.
        (void)table.apply(params, "0", 10s, Operation{});
        for (int p = 0; p < 20; ++p) ratelimit::detail::cpu_relax();
        table.reset("0");
        for (int p = 0; p < 20; ++p) ratelimit::detail::cpu_relax();
        if (i % 64 == 0 && table.size() < keys - 1) ++undercounted;
      }
      stop = true;
    });
    for (auto& th : pool) th.join();
    CHECK(undercounted.load() == 0);
    // Keys 1 .. 6 held, key 0 held or not: 6 or 7 keys.
    const std::size_t held = table.size();
    CHECK((held == keys - 1 || held == keys));
    // Reset, every key is fresh (no copy of a reset state left behind) and none is counted.
    for (int k = 0; k < keys; ++k) table.reset(std::to_string(k));
    CHECK(table.size() == 0);
    for (int k = 0; k < keys; ++k)
      CHECK(table.apply(params, std::to_string(k), 10s, Operation{1, true}).remaining == tokens);
  }
}

TEST_CASE("Multi-key decisions stay all or nothing while both keys are decided lock-free",
          "[in_memory][concurrency][lock_free][decide_all]") {
  // Key "k" in two tables ("x" and "y"), 60 tokens each, refill 1 per hour: at the frozen 10 s
  // exactly 60 admissions per table. One thread spends "x" alone, one "y" alone (lock-free once
  // held), two spend both at once (try_acquire_all: decide_all). Each admission on a table
  // leaves a distinct remaining, 59 .. 0 (a commit that undid or doubled a lock-free spend
  // shows as a repeat or a gap), and each admitted pair spent both: singles_x + pairs = 60 =
  // singles_y + pairs.
  constexpr std::int64_t tokens = 60;
  constexpr int attempts = 80;  // per thread: more than the tokens
  ManualClock clock;
  clock.set(10s);
  InMemoryStorage storage;
  ratelimit::TokenBucket<ManualClock> x({tokens, ratelimit::per_hour(1)}, storage, clock, "x");
  ratelimit::TokenBucket<ManualClock> y({tokens, ratelimit::per_hour(1)}, storage, clock, "y");
  // Both held before the race (their first spend is an insert, under the lock).
  std::vector<std::int64_t> seen_x{x.try_acquire("k").remaining};
  std::vector<std::int64_t> seen_y{y.try_acquire("k").remaining};
  std::vector<std::int64_t> single_x, single_y;
  std::vector<std::vector<std::int64_t>> pair_x(2), pair_y(2);
  std::latch start(4);
  const auto singles = [&](ratelimit::TokenBucket<ManualClock>& limiter,
                           std::vector<std::int64_t>& seen) {
    start.arrive_and_wait();
    for (int i = 0; i < attempts; ++i)
      if (const auto d = limiter.try_acquire("k"); d.allowed) seen.push_back(d.remaining);
  };
  const auto both = [&](std::size_t t) {
    start.arrive_and_wait();
    for (int i = 0; i < attempts; ++i) {
      const auto d = ratelimit::try_acquire_all("k", 1, x, y);
      if (!d.allowed) continue;
      pair_x[t].push_back(d.decisions[0].remaining);
      pair_y[t].push_back(d.decisions[1].remaining);
    }
  };
  // An array, not a growing vector: g++ 12 at -O2 warns (-Warray-bounds, a false positive) in
  // vector<thread>'s growth here, and -Werror fails the build.
  std::array<std::thread, 4> pool{std::thread(singles, std::ref(x), std::ref(single_x)),
                                  std::thread(singles, std::ref(y), std::ref(single_y)),
                                  std::thread(both, 0), std::thread(both, 1)};
  for (auto& th : pool) th.join();
  const std::size_t pairs = pair_x[0].size() + pair_x[1].size();
  CHECK(rltest::merged(seen_x, {single_x, pair_x[0], pair_x[1]}) == rltest::countdown(tokens));
  CHECK(rltest::merged(seen_y, {single_y, pair_y[0], pair_y[1]}) == rltest::countdown(tokens));
  // 1 before the race + singles + pairs = 60 on each table.
  CHECK(1 + single_x.size() + pairs == static_cast<std::size_t>(tokens));
  CHECK(1 + single_y.size() + pairs == static_cast<std::size_t>(tokens));
  CHECK(x.peek("k").remaining == 0);
  CHECK(y.peek("k").remaining == 0);
}

TEST_CASE("More threads than cores on one key admit exactly the limit",
          "[in_memory][concurrency][lock_free]") {
  // 12 threads (the CI machine has 2 cores: the lock bit's holder is often preempted, and its
  // waiters must fall back to the shard's lock rather than spin forever) spend a token bucket
  // key and a fixed-window key of 1,000 each at a frozen time, 150 attempts per thread and key
  // (1,800 > 1,000): exactly 1,000 admissions per key, remaining 999 .. 0 once each. Also the
  // empty key, whose single state is decided under a `busy` word rather than a slot's bit.
  const std::string key = GENERATE(as<std::string>{}, "k", "");
  INFO("key: '" << key << "'");
  constexpr int threads = 12, attempts = 150;
  constexpr std::int64_t limit = 1000;
  ManualClock clock;
  clock.set(30s);
  InMemoryStorage storage;
  ratelimit::TokenBucket<ManualClock> bucket({limit, ratelimit::per_hour(1)}, storage, clock);
  ratelimit::FixedWindow<ManualClock> window(ratelimit::per_hour(limit), storage, clock);
  std::vector<std::int64_t> seen_bucket{bucket.try_acquire(key).remaining};
  std::vector<std::int64_t> seen_window{window.try_acquire(key).remaining};
  std::vector<std::vector<std::int64_t>> mine_bucket(threads), mine_window(threads);
  std::latch start(threads);
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int i = 0; i < attempts; ++i) {
        if (const auto d = bucket.try_acquire(key); d.allowed)
          mine_bucket[t].push_back(d.remaining);
        if (const auto d = window.try_acquire(key); d.allowed)
          mine_window[t].push_back(d.remaining);
      }
    });
  for (auto& th : pool) th.join();
  CHECK(rltest::merged(seen_bucket, mine_bucket) == rltest::countdown(limit));
  CHECK(rltest::merged(seen_window, mine_window) == rltest::countdown(limit));
}

TEST_CASE("Limiters with different clocks on one table stay exact while sweeps judge at a third",
          "[in_memory][concurrency][lock_free][clock]") {
  // One table "t", 40 tokens refilled at 1 per hour per key: `late` reads 100 s, `early` 10 s (a
  // clock that stepped back, or another host's), both spending 16 hot keys lock-free (the keys
  // inserted at 10 s, so the shard's latest time is behind what `late` decides at). A third thread
  // reclaims at 50 s, between them, while old keys (1 per second, spent at 1 s, fresh from
  // 2 s) are dropped around the hot ones. A hot key that a sweep judged fresh at the earlier
  // time and dropped would come back full for `early`: more than 40 admissions.
  constexpr int hot_keys = 16, rounds = 40;  // 2 threads x 40 = 80 attempts per key > 40
  ManualClock early_clock, late_clock;
  early_clock.set(1s);
  late_clock.set(100s);
  InMemoryStorage storage;
  ratelimit::TokenBucket<ManualClock> old({1, ratelimit::per_second(1)}, storage, early_clock, "t");
  ratelimit::TokenBucket<ManualClock> early({40, ratelimit::per_hour(1)}, storage, early_clock,
                                            "t");
  ratelimit::TokenBucket<ManualClock> late({40, ratelimit::per_hour(1)}, storage, late_clock, "t");
  for (int i = 0; i < 2'000; ++i) REQUIRE(old.try_acquire("old-" + std::to_string(i)));
  early_clock.set(10s);
  const auto hot = [](int k) { return "hot-" + std::to_string(k); };
  for (int k = 0; k < hot_keys; ++k) REQUIRE(early.try_acquire(hot(k)).remaining == 39);
  std::vector<std::vector<int>> admitted(2, std::vector<int>(hot_keys, 0));
  std::atomic<int> running{2};
  std::latch start(3);
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < 2; ++t)
    pool.emplace_back([&, t] {
      auto& limiter = t == 0 ? early : late;
      start.arrive_and_wait();
      for (int r = 0; r < rounds; ++r)
        for (int k = 0; k < hot_keys; ++k)
          if (limiter.try_acquire(hot(k)).allowed) ++admitted[t][static_cast<std::size_t>(k)];
      --running;
    });
  pool.emplace_back([&] {
    start.arrive_and_wait();
    while (running.load() > 0) (void)storage.reclaim(50s);
  });
  for (auto& th : pool) th.join();
  for (int k = 0; k < hot_keys; ++k) {
    INFO("key " << hot(k));
    const auto i = static_cast<std::size_t>(k);
    // 40 tokens, refill 1 per hour: from 10 s to 100 s, 90 / 3600 of a token, none whole; so
    // 40 admissions in all, 1 before the race and 39 during it, whoever's clock.
    CHECK(1 + admitted[0][i] + admitted[1][i] == 40);
    // Not fresh at 50 s (nor at 100 s): never dropped, so no clock sees capacity come back.
    CHECK(early.peek(hot(k)).remaining == 0);
    CHECK(late.peek(hot(k)).remaining == 0);
  }
}

}  // namespace lock_free_attack_test
