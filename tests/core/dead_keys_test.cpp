// Dead keys go within a stated time, whatever the traffic (in-memory storage only).
//
// The fault pinned: reclamation ran only per decision of a shard (a sweep of the shard the
// decision touched, and now and then a visit to a shard with no decision since), never per
// time. After a spike of 1,100,000 one-shot keys, 72 simulated hours of light traffic on a few
// keys still held most of them (1,094,385 with this test's traffic, one decision a minute on
// four keys): the shards that light traffic rarely reached kept theirs for ever. Now a table paces
// itself by the decisions' clock (detail::Table::pace): every pace_step, one keyed decision sweeps
// the next shard whole, so a key whose state became fresh at t is gone after the first keyed
// decision stamped at or after t + pace_period (10 minutes), but for `keep` keys per shard, which
// are never swept.
#include <chrono>
#include <cstddef>
#include <string>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

using namespace std::chrono_literals;
using ratelimit::InMemoryStorage;
using ratelimit::ManualClock;
namespace dead_keys_test {

using Table = ratelimit::detail::Table<ratelimit::TokenBucketModel>;

constexpr std::size_t spike = 1'100'000;
constexpr std::size_t light_keys = 4;

/// `n` distinct one-shot keys at 1 s: each spends the one token of a bucket refilled at 1 per
/// second, so each is full again, fresh (its model's fresh_at), at 2 s.
template <class Limiter>
void one_shot_keys(Limiter& limiter, ManualClock& clock, std::size_t n,
                   std::string key = "one-shot-") {
  clock.set(1s);
  const std::size_t prefix = key.size();
  for (std::size_t i = 0; i < n; ++i) {
    key.resize(prefix);
    key += std::to_string(i);
    REQUIRE(limiter.try_acquire(key));
  }
}

/// What the bound leaves: every one-shot key is fresh from t = 2 s, so once a keyed decision
/// stamped at or after t + pace_period has returned, only keys not fresh (at most the light
/// keys) are held, and in each of the shard_count shards at most `keep` keys a pace does not
/// drop (it stops at `keep`, so a shard holds at most keep + its keys not fresh).
constexpr std::size_t bound = light_keys + Table::shard_count * Table::keep;  // 4 + 64 x 8 = 516

/// The first whole minute at or after 2 s + pace_period: when light traffic, one decision a
/// minute, first decides past the bound's time. 2 s + 600 s = 602 s, so 660 s.
constexpr auto past_bound =
    std::chrono::duration_cast<std::chrono::minutes>(2s + Table::pace_period + 59s);

TEST_CASE("After 1.1 M one-shot keys, 72 hours of light traffic hold no dead key past the bound",
          "[in_memory][memory][reclaim][regression]") {
  ManualClock clock;
  InMemoryStorage storage;
  ratelimit::TokenBucket<ManualClock> limiter({1, ratelimit::per_second(1)}, storage, clock);
  one_shot_keys(limiter, clock, spike);
  REQUIRE(storage.size() == spike);
  REQUIRE(bound < spike);
  // Light traffic: one decision a minute, on 4 keys in turn, for 72 hours. Each light key
  // spends its token every 4 minutes and gets it back 1 s later: always admitted.
  std::size_t decisions = 0;
  std::size_t admitted = 0;
  for (auto t = 1min; t <= 72h; t += 1min) {
    clock.set(t);
    admitted += limiter.try_acquire("light-" + std::to_string(decisions++ % light_keys)).allowed;
    if (t >= past_bound && t.count() % 60 == 0) {  // hourly from the bound's time on
      INFO("at " << t.count() << " min: " << storage.size() << " keys held, bound " << bound);
      REQUIRE(storage.size() <= bound);
    }
    if (t == past_bound) {
      INFO("at " << t.count() << " min, the first decision past the bound's time: "
                 << storage.size() << " keys held, bound " << bound);
      CHECK(storage.size() <= bound);
    }
  }
  CHECK(admitted == decisions);  // 72 x 60 = 4320, every one admitted
  const auto after = storage.stats();
  INFO("after 72 h: " << after.keys << " keys in " << after.slots << " slots");
  CHECK(after.keys <= bound);
  // Every shard was swept whole after its keys went: the pace's reclaim shrinks a shard under
  // 1/5 full (to 7/4 its keys plus room), so at most 5 slots per key held or the smallest
  // array (min_capacity slots) per shard.
  CHECK(after.slots <= 5 * after.keys + Table::shard_count * Table::min_capacity);
}

TEST_CASE("Light traffic through all-or-nothing decisions also bounds the dead keys by time",
          "[in_memory][memory][reclaim]") {
  // decide_all decides under the shards' locks, where a pace step (which takes shard locks
  // itself) cannot run: it paces once it has released them. Here the only traffic after the
  // spike is try_acquire_all on two limiters sharing the storage.
  ManualClock clock;
  InMemoryStorage storage;
  ratelimit::TokenBucket<ManualClock> limiter({1, ratelimit::per_second(1)}, storage, clock);
  ratelimit::TokenBucket<ManualClock> other({1, ratelimit::per_second(1)}, storage, clock, "other");
  constexpr std::size_t n = 50'000;
  one_shot_keys(limiter, clock, n);
  REQUIRE(storage.size() == n);
  // One all-or-nothing decision a minute on 4 keys in turn (each limiter holds them): the same
  // bound, over both tables: `other`'s keys are never fresh for long but at most 4, and each
  // table keeps at most `keep` per shard.
  constexpr std::size_t both = 2 * light_keys + 2 * Table::shard_count * Table::keep;
  std::size_t decisions = 0;
  for (auto t = 1min; t <= past_bound; t += 1min) {
    clock.set(t);
    const std::string key = "light-" + std::to_string(decisions++ % light_keys);
    REQUIRE(ratelimit::try_acquire_all(key, 1, limiter, other).allowed);
  }
  INFO(storage.size() << " keys held at " << past_bound.count() << " min, bound " << both);
  CHECK(storage.size() <= both);
}

TEST_CASE("A pace step is due once per pace_step of the decisions' clock and survives a step back",
          "[in_memory][memory][reclaim][clock]") {
  // With no decision, nothing runs (no thread): reclaim(now) is what a service gone quiet
  // calls. With decisions, a clock that went far ahead and came back restarts the schedule
  // instead of stopping it.
  ManualClock clock;
  InMemoryStorage storage;
  ratelimit::TokenBucket<ManualClock> limiter({1, ratelimit::per_second(1)}, storage, clock);
  constexpr std::size_t n = 20'000;
  one_shot_keys(limiter, clock, n);  // fresh from 2 s
  // A decision stamped at the clock's end (2^62 ns): the schedule jumps there. Its own pace
  // sweeps every shard at 2^62 (all the one-shot keys are fresh then), which is allowed:
  // dropping never changes a decision (each dropped key is pinned to its own fresh time).
  REQUIRE(limiter.try_acquire("far", 1, ratelimit::max_clock_time));
  // Back to the clock's own time: the first decision, at 1 s (more than a period before 2^62),
  // restarts the schedule from there, sweeping nothing; the next ones pace as before. New keys,
  // fresh from 2 s (or 3 s for one the drop filter cannot tell from a dropped key: decided no
  // earlier than that key's fresh time, 2 s).
  one_shot_keys(limiter, clock, n, "second-");
  std::size_t decisions = 0;
  for (auto t = 30s; t <= 30s + Table::pace_period + 1min; t += 30s) {
    clock.set(t);
    limiter.try_acquire("light-" + std::to_string(decisions++ % light_keys));
  }
  // Every second-batch key is fresh by 3 s, so gone once a decision stamped at or after
  // 3 s + pace_period (603 s) has returned; the decisions went on to 30 s + 11 min = 690 s.
  // Held: the far key (not fresh until 2^62 + 1 s), the light keys, `keep` per shard.
  const std::size_t kept = 1 + light_keys + Table::shard_count * Table::keep;
  INFO(storage.size() << " keys held, bound " << kept);
  CHECK(storage.size() <= kept);
}

}  // namespace dead_keys_test
