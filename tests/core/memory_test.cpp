// Bounded memory: InMemoryStorage bounds its memory by the active keys (a key whose state is
// back to fresh is dropped, which never changes a decision) without a background thread, so
// that a service fed ever new keys does not grow without end. In-memory storage only (size()
// is its own).
//
// Traffic comes in generations: generation g's keys are all new and busy during [10 g s,
// 10 g s + 1 s); 10 s later every one of them is fresh again under each algorithm (buckets of
// 3 at 3/s refill in <= 1 s, windows of 1 s forget in <= 2 W). Keeping every key would hold
// G x K keys after G generations; dropping the fresh ones must keep size() to a small multiple
// of one generation, while every decision, on new keys, revisited live keys and revisited
// dropped keys alike, equals the naive reference model's (which never forgets anything).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/core/all_of.hpp>
#include <ratelimit/ratelimit.hpp>

#include "../support/algorithms.hpp"
#include "../support/expect.hpp"

using namespace std::chrono_literals;
using ratelimit::InMemoryStorage;
using ratelimit::ManualClock;

namespace {

template <class Algo>
void generations(std::int64_t keys_per_generation, int generation_count) {
  INFO("algorithm: " << Algo::name << ", " << keys_per_generation << " keys x " << generation_count
                     << " generations");
  const rltest::Shape shape{3, ratelimit::per_second(3)};
  ManualClock clock;
  InMemoryStorage storage;
  auto limiter = Algo::make(shape, storage, clock);
  std::unordered_map<std::string, typename Algo::Reference> refs;
  const auto key_of = [](std::int64_t g, std::int64_t i) {
    return "g" + std::to_string(g) + "-" + std::to_string(i);
  };
  const auto decide = [&](const std::string& key, std::int64_t cost, bool peek) {
    auto it = refs.find(key);
    if (it == refs.end()) it = refs.emplace(key, Algo::reference(shape)).first;
    const auto want = it->second.decide(clock.now(), cost, peek);
    const auto got = peek ? limiter.peek(key) : limiter.try_acquire(key, cost);
    if (got != want) {
      INFO("key " << key << " at " << clock.now().count() << " ns, cost " << cost
                  << (peek ? " (peek)" : ""));
      REQUIRE(got == want);
    }
  };

  // Every decision sweeps Table::sweep_step slots of its shard, so a pass over a shard of C
  // slots takes C / sweep_step of its decisions (detail/table.hpp). Each generation brings
  // about 1.34 K decisions (K tries, K/7 peeks, K/13 + K/10 revisits) spread over the shards;
  // a shard is kept at most 7/10 full and about 0.53 after a resize, so a pass takes about one
  // generation's decisions and the keys not yet dropped belong to at most the current and the
  // two previous generations: size() <= 3 K, plus each shard's minimum array.
  using Table = ratelimit::detail::Table<typename Algo::Model>;
  const auto bound =
      static_cast<std::size_t>(3 * keys_per_generation) + Table::shard_count * Table::min_capacity;
  REQUIRE(bound < static_cast<std::size_t>(generation_count * keys_per_generation));

  std::size_t largest = 0;
  for (std::int64_t g = 0; g < generation_count; ++g) {
    const auto start = std::chrono::seconds{10 * g};
    for (std::int64_t i = 0; i < keys_per_generation; ++i) {
      // Spread over the generation's first second, whole ms, several requests per instant.
      clock.set(start + std::chrono::milliseconds{i * 1000 / keys_per_generation});
      decide(key_of(g, i), 1 + i % 2, false);
      if (i % 7 == 0) decide(key_of(g, i), 1, true);
      // A live key of this generation again: it must have kept its state.
      if (i % 13 == 5) decide(key_of(g, i - 5), 2, false);
      // A key of an older generation: fresh again, probably dropped; decided as fresh.
      if (g > 0 && i % 10 == 3)
        decide(key_of((g * 7 + i) % g, (i * 31) % keys_per_generation), 1 + i % 3, false);
    }
    const std::size_t size = storage.size();
    largest = std::max(largest, size);
    INFO("after generation " << g << ": " << size << " keys held");
    CHECK(size <= bound);
  }
  // Keeping everything would have meant generation_count x keys_per_generation keys.
  INFO("largest size " << largest << ", bound " << bound);
  CHECK(largest <= bound);
}

}  // namespace

TEST_CASE("A token bucket's in-memory storage drops idle keys without changing a decision",
          "[token_bucket][in_memory][memory]") {
  generations<rltest::TokenBucketAlgo>(100'000, 5);
}

TEST_CASE("A leaky bucket's in-memory storage drops idle keys without changing a decision",
          "[leaky_bucket][in_memory][memory]") {
  generations<rltest::LeakyBucketAlgo>(10'000, 5);
}

TEST_CASE("A fixed window's in-memory storage drops idle keys without changing a decision",
          "[fixed_window][in_memory][memory]") {
  generations<rltest::FixedWindowAlgo>(10'000, 5);
}

TEST_CASE("A sliding log's in-memory storage drops idle keys without changing a decision",
          "[sliding_log][in_memory][memory]") {
  generations<rltest::SlidingLogAlgo>(10'000, 5);
}

TEST_CASE("A sliding counter's in-memory storage drops idle keys without changing a decision",
          "[sliding_counter][in_memory][memory]") {
  generations<rltest::SlidingCounterAlgo>(10'000, 5);
}

TEST_CASE("A sliding log key's live entries never exceed N and its storage stays below 2N",
          "[sliding_log][in_memory][memory]") {
  // The model's state directly (it is public): N = 3 per W = 1000 ns, timestamps 1 ns apart so
  // that no two entries merge, and steady traffic at the limit so that entries keep expiring.
  using M = ratelimit::SlidingLogModel;
  const M::Params p{3, 1000};
  M::State s;
  std::size_t largest_live = 0, largest_held = 0;
  for (std::int64_t t = 0; t < 20'000; t += 1 + t % 400) {
    const auto d = M::apply(p, s, std::chrono::nanoseconds{t}, ratelimit::Operation{});
    largest_live = std::max(largest_live, s.entries.size());
    largest_held = std::max(largest_held, s.entries.capacity());
    if (d.allowed) CHECK(d.remaining == 3 - static_cast<std::int64_t>(s.entries.size()));
  }
  CHECK(largest_live <= 3);
  CHECK(largest_held < 2 * 3);
}

TEST_CASE("A sliding log key never holds more than N entries, expired ones included",
          "[sliding_log][in_memory][memory]") {
  // A sliding log key never holds more than N entries, or its memory is not bounded by N.
  // Regression: the log used to drop expired entries lazily (once they were half of a vector),
  // holding up to 2N - 2.
  using M = ratelimit::SlidingLogModel;
  const M::Params p{3, 1000};
  M::State s;
  // Entries at 0, 1, 2; at 1000 the one at 0 has expired (1000 - W = 0) and a fourth is added.
  for (const std::int64_t t : {0, 1, 2, 1000})
    REQUIRE(M::apply(p, s, std::chrono::nanoseconds{t}, ratelimit::Operation{}).allowed);
  CHECK(s.entries.size() <= 3);
  CHECK(s.entries.capacity() <= 3);  // the ring never grows past N slots
}

namespace single_state_test {

// A limiter used without a key: its one state sits beside the table's shards (detail/table.hpp,
// `Single`). Its bookkeeping must match a keyed state's where a user can see it (size, reset,
// reclaim, all-or-nothing decisions), and it is never dropped, so a clock that steps back after
// a reclaim still finds the spent capacity.
TEST_CASE("A limiter without a key keeps its one state exactly, beside the table",
          "[in_memory][single_state]") {
  ManualClock clock;
  clock.set(10s);
  InMemoryStorage storage;
  // A bucket of 2 refilled at 1 per second: 1 token every 1 s.
  ratelimit::TokenBucket<ManualClock> limiter(
      ratelimit::TokenBucketConfig{2, ratelimit::per_second(1)}, storage, clock);
  CHECK(storage.size() == 0);                   // nothing decided yet
  CHECK(limiter.try_acquire().remaining == 1);  // 2 - 1
  CHECK(storage.size() == 1);                   // the one state, counted as a key
  CHECK(limiter.try_acquire().remaining == 0);  // 1 - 1
  CHECK_FALSE(limiter.try_acquire());           // empty until 11 s
  CHECK(storage.reclaim(clock.now()) == 0);     // not fresh: 2 tokens missing
  CHECK(storage.size() == 1);

  // At 12 s both tokens are back (1 per s): fresh, so reclaim stops counting it...
  clock.set(12s);
  CHECK(storage.reclaim(clock.now()) == 1);
  CHECK(storage.size() == 0);
  // ...but keeps the state: back at 10 s the bucket is still empty (decided at its latest time,
  // 10 s, where both tokens were spent).
  clock.set(10s);
  CHECK_FALSE(limiter.try_acquire());

  // reset() forgets it: at 10 s a fresh bucket of 2.
  limiter.reset();
  CHECK(storage.size() == 0);
  CHECK(limiter.try_acquire().remaining == 1);  // 2 - 1

  // All or nothing with another limiter's single state on the same storage: `limiter` holds
  // 1 token, `other` 2; a cost of 2 fails on the first, so neither spends.
  ratelimit::TokenBucket<ManualClock> other(
      ratelimit::TokenBucketConfig{2, ratelimit::per_second(1)}, storage, clock, "other");
  const auto both = ratelimit::try_acquire_all("", 2, limiter, other);
  CHECK_FALSE(both.allowed);
  CHECK(other.peek().remaining == 2);    // untouched
  CHECK(limiter.peek().remaining == 1);  // untouched
  // A cost of 1 fits both: each spends it.
  CHECK(ratelimit::try_acquire_all("", 1, limiter, other).allowed);
  CHECK(other.peek().remaining == 1);    // 2 - 1
  CHECK(limiter.peek().remaining == 0);  // 1 - 1
}

}  // namespace single_state_test

// --- slot arrays that give memory back ---------------------------------------------------------

namespace zeroed_block_test {

/// Which of the `pages` pages from `at` are resident (mincore), as a string of '1' and '0'.
std::string residency(const void* at, std::size_t pages) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v(pages);
  REQUIRE(mincore(const_cast<void*>(at), pages * page, v.data()) == 0);
  std::string s;
  for (const unsigned char c : v) s += (c & 1) ? '1' : '0';
  return s;
}

}  // namespace zeroed_block_test

TEST_CASE("A slot array's pages stay untouched until written and go back as its prefix is released",
          "[in_memory][memory]") {
  // Regression: arrays freed by resizes stayed resident (calloc'd from the heap
  // once glibc had raised its mmap threshold), 177 bytes per key at 1,000,000 keys.
  using ratelimit::detail::ZeroedBlock;
  using zeroed_block_test::residency;
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  ZeroedBlock block(8 * page, 64);
  auto* bytes = static_cast<unsigned char*>(block.data());
  REQUIRE(bytes != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(bytes) % page == 0);  // a mapping of its own
  // Nothing written yet: no page resident (a fresh array costs no page faults).
  CHECK(residency(bytes, 8) == "00000000");
  for (std::size_t i = 0; i < 8 * page; i += 512) bytes[i] = 7;
  CHECK(residency(bytes, 8) == "11111111");
  // 2.5 pages released with a batch of 4 pages: fewer than a batch due, nothing happens yet.
  block.release_prefix(2 * page + page / 2, 4 * page);
  CHECK(residency(bytes, 8) == "11111111");
  // 5.5 pages: 5 whole pages due (>= one batch), given back; the sixth is partly live.
  block.release_prefix(5 * page + page / 2, 4 * page);
  CHECK(residency(bytes, 8) == "00000111");
  // Given-back pages read as zeros again.
  CHECK(bytes[0] == 0);
  CHECK(bytes[5 * page] == 7);
  // The whole block: the rest goes at once, however small (the end of a migration).
  block.release_prefix(8 * page, 4 * page);
  CHECK(residency(bytes + 5 * page, 3) == "000");
  // A block under a page comes from calloc, zeroed and aligned.
  ZeroedBlock small(100, 64);
  auto* s = static_cast<unsigned char*>(small.data());
  CHECK(reinterpret_cast<std::uintptr_t>(s) % 64 == 0);
  CHECK(std::all_of(s, s + 100, [](unsigned char c) { return c == 0; }));
}

namespace key_memo_test {

using namespace std::chrono_literals;

TEST_CASE("The per-thread memo of the last key hashed never gives a key another's state",
          "[in_memory][hash]") {
  // A bucket of 3 tokens, no refill at a frozen time: every key's k-th spend leaves 3 - k. The
  // memo remembers one key per thread; alternating keys of equal length, a key and its
  // prefix, the same key in two tables, keys at the memo's 48-byte limit and beyond, each key
  // must count on its own: the 1st, 2nd and 3rd spend of each leave 2, 1, 0, the 4th is denied.
  ratelimit::ManualClock clock;
  clock.set(1s);
  ratelimit::InMemoryStorage storage;
  ratelimit::TokenBucket<ratelimit::ManualClock> a({3, ratelimit::per_hour(1)}, storage, clock,
                                                   "a");
  ratelimit::TokenBucket<ratelimit::ManualClock> b({3, ratelimit::per_hour(1)}, storage, clock,
                                                   "b");
  const std::string k48(48, 'k'), k49(49, 'k');
  const std::vector<std::string> keys{"x", "y", "xy", std::string("x\0", 2), k48, k49};
  for (std::int64_t spend = 1; spend <= 4; ++spend)
    for (const std::string& key : keys)
      for (auto* limiter : {&a, &b}) {
        INFO("key of " << key.size() << " bytes, spend " << spend);
        const auto d = limiter->try_acquire(key);
        CHECK(d.allowed == (spend <= 3));
        if (spend <= 3) CHECK(d.remaining == 3 - spend);
      }
  // "x", "y", "xy", "x\0", the 48-byte and the 49-byte key, in each of the two tables.
  CHECK(storage.size() == 2 * 6);
}

}  // namespace key_memo_test
