// Dead keys go within a stated time, whatever the traffic (in-memory storage only).
//
// The fault pinned: reclamation ran only per decision of a shard (a sweep of the shard the
// decision touched, and now and then a visit to a shard with no decision since), never per
// time. After a spike of 1,100,000 one-shot keys, 72 simulated hours of light traffic on a few
// keys still held most of them (1,094,385 with this test's traffic, one decision a minute on
// four keys): the shards that light traffic rarely reached kept theirs for ever. Now a table paces
// itself by the decisions' clock (detail::Table::pace): every pace_step, one step sweeps the next
// shard whole, spread over keyed decisions at most pace_budget units each. The bound (derived in
// table.hpp): a key fresh from t is gone, but for `keep` keys per shard, once the first keyed
// decision stamped at or after t + pace_period (10 minutes) and the L - 1 after it have
// returned, L = ceil((U + U1) / pace_budget) (see `decisions_term` below).
//
// Two more faults pinned here. One decision could be made to pay for the whole table: the
// decision that caught up after a quiet period swept every shard due, up to all 64 (12 to 18 ms
// for 100,000 dead keys); and explicit times alternating more than a period apart made every
// later-stamped decision restart the schedule and sweep the whole table.
#include <chrono>
#include <cstddef>
#include <string>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

#include "support/sanitized.hpp"

using namespace std::chrono_literals;
using ratelimit::InMemoryStorage;
using ratelimit::ManualClock;
namespace dead_keys_test {

using Table = ratelimit::detail::Table<ratelimit::TokenBucketModel>;

// A tenth in a sanitizer build (support/sanitized.hpp): the bound's terms follow the spike.
constexpr std::size_t spike = rltest::sanitized ? 110'000 : 1'100'000;
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

/// L of the bound (table.hpp): ceil((U + U1) / pace_budget), U = 64 + F + K + 3 S the units of a
/// lap over the table, U1 = 1 + F + K1 + 3 S1 of one shard, from the most slots `slots`, keys
/// `keys` and overflow keys held, and the most slots of one shard `shard_slots`; a shard's keys
/// K1 are at most its slots plus the overflow (every key is in a slot or the overflow map).
std::size_t decisions_term(std::size_t slots, std::size_t keys, std::size_t overflow,
                           std::size_t shard_slots) {
  const std::size_t lap = Table::shard_count + overflow + keys + 3 * slots;
  const std::size_t one = 1 + overflow + (shard_slots + overflow) + 3 * shard_slots;
  return (lap + one + Table::pace_budget - 1) / Table::pace_budget;
}

/// The most slots a table can hold after `s`, when `inserts` more keys come and nothing grows
/// otherwise: each insert may start one growing resize of its shard, to 7/4 of its keys plus
/// room (1.75 x (7/10 of its slots + its overflow) + 1/45 of its slots: under 2 x (its slots +
/// the overflow)), both arrays held meanwhile: so many more slots per insert, and a shard at
/// most its slots and that.
struct Most {
  std::size_t slots, shard_slots;
};
Most most_after(const ratelimit::detail::TableStats& s, std::size_t inserts) {
  const std::size_t grown = 2 * (s.largest_shard + s.overflow);  // live keys include overflow
  return {s.slots + inserts * grown, s.largest_shard + grown};
}

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
  // The decisions term, from what the table holds at the spike's end, the 4 light keys still to
  // come (the only inserts after it; sweeps only shrink).
  const auto at_spike = storage.stats();
  const Most most = most_after(at_spike, light_keys);
  const std::size_t L =
      decisions_term(most.slots, spike + light_keys, at_spike.overflow, most.shard_slots);
  // Light traffic decides once a minute: the first decision stamped at or after 2 s +
  // pace_period is the one at past_bound, so the bound holds once the one L - 1 minutes later
  // has returned (about 1,800 minutes for 1.1 M keys at 1.6 slots a key).
  const auto bound_at = past_bound + std::chrono::minutes{static_cast<std::int64_t>(L) - 1};
  INFO("slots " << at_spike.slots << ", largest shard " << at_spike.largest_shard << ", L " << L);
  REQUIRE(bound_at <= 72h);
  // Light traffic: one decision a minute, on 4 keys in turn, for 72 hours. Each light key
  // spends its token every 4 minutes and gets it back 1 s later: always admitted.
  std::size_t decisions = 0;
  std::size_t admitted = 0;
  for (auto t = 1min; t <= 72h; t += 1min) {
    clock.set(t);
    admitted += limiter.try_acquire("light-" + std::to_string(decisions++ % light_keys)).allowed;
    if (t == bound_at || (t > bound_at && t.count() % 60 == 0)) {  // then hourly
      INFO("at " << t.count() << " min: " << storage.size() << " keys held, bound " << bound);
      REQUIRE(storage.size() <= bound);
    }
  }
  // No decision paid for more than the budget, though a lap over this table is over a
  // thousand budgets.
  const auto after = storage.stats();
  CHECK(after.pace_most <= Table::pace_budget);
  CHECK(admitted == decisions);  // 72 x 60 = 4320, every one admitted
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
  // table keeps at most `keep` per shard. The decisions term from the storage's totals (at
  // least each table's) and 4 inserts in each table.
  constexpr std::size_t both = 2 * light_keys + 2 * Table::shard_count * Table::keep;
  const auto at_spike = storage.stats();
  const Most most = most_after(at_spike, 2 * light_keys);
  const std::size_t L =
      decisions_term(most.slots, n + 2 * light_keys, at_spike.overflow, most.shard_slots);
  const auto bound_at = past_bound + std::chrono::minutes{static_cast<std::int64_t>(L) - 1};
  std::size_t decisions = 0;
  for (auto t = 1min; t <= bound_at; t += 1min) {
    clock.set(t);
    const std::string key = "light-" + std::to_string(decisions++ % light_keys);
    REQUIRE(ratelimit::try_acquire_all(key, 1, limiter, other).allowed);
  }
  INFO(storage.size() << " keys held at " << bound_at.count() << " min, bound " << both);
  CHECK(storage.size() <= both);
  CHECK(storage.stats().pace_most <= Table::pace_budget);
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
  // A decision stamped at the clock's end (2^62 ns): the schedule jumps there and a whole lap
  // is owed, done pace_budget units per decision by the decisions that follow, whatever their
  // stamps: the ones at 2^62 drop every one-shot key (fresh then), which is allowed: dropping
  // never changes a decision (each dropped key is pinned to its own fresh time).
  REQUIRE(limiter.try_acquire("far", 1, ratelimit::max_clock_time));
  // Back to the clock's own time: the first decision, at 1 s (more than a period before 2^62),
  // restarts the schedule from there (the first restart); the next ones pace as before. New
  // keys, fresh from 2 s (or 3 s for one the drop filter cannot tell from a dropped key:
  // decided no earlier than that key's fresh time, 2 s).
  one_shot_keys(limiter, clock, n, "second-");
  // The bound from 3 s: the first decision stamped at or after 603 s is the one at 630 s, then
  // L - 1 more, one every 30 s.
  const auto held = storage.stats();
  const Most most = most_after(held, light_keys);
  const std::size_t L =
      decisions_term(most.slots, held.keys + light_keys, held.overflow, most.shard_slots);
  const auto bound_at = 630s + 30s * (static_cast<std::int64_t>(L) - 1);
  std::size_t decisions = 0;
  for (auto t = 30s; t <= bound_at; t += 30s) {
    clock.set(t);
    limiter.try_acquire("light-" + std::to_string(decisions++ % light_keys));
  }
  // Held: the far key (not fresh until 2^62 + 1 s), the light keys, `keep` per shard.
  const std::size_t kept = 1 + light_keys + Table::shard_count * Table::keep;
  INFO(storage.size() << " keys held, bound " << kept << ", L " << L);
  CHECK(storage.size() <= kept);
}

TEST_CASE("After a spike and a quiet hour, no decision does more than the pace's budget",
          "[in_memory][memory][reclaim][regression]") {
  // The fault pinned: the decision that found steps due after a quiet period swept every shard
  // due, up to the whole table (35 ms of CPU for 1.1 M keys). Now each does at most
  // pace_budget units, the work spread over the decisions that follow.
  ManualClock clock;
  InMemoryStorage storage;
  ratelimit::TokenBucket<ManualClock> limiter({1, ratelimit::per_second(1)}, storage, clock);
  constexpr std::size_t n = 100'000;
  one_shot_keys(limiter, clock, n);  // at 1 s: no step due yet (the first at 1 s + 9.375 s)
  REQUIRE(storage.stats().pace_work == 0);
  const auto at_spike = storage.stats();
  const Most most = most_after(at_spike, light_keys);
  const std::size_t L =
      decisions_term(most.slots, n + light_keys, at_spike.overflow, most.shard_slots);
  // An hour later (every key fresh since 2 s, 64 steps owed at once), one decision a second.
  std::size_t decisions = 0;
  for (std::chrono::seconds t = 1h; decisions < L; t += 1s) {
    clock.set(t);
    limiter.try_acquire("light-" + std::to_string(decisions++ % light_keys));
    const auto s = storage.stats();
    INFO("decision " << decisions << ": " << s.pace_most << " units at most, budget "
                     << Table::pace_budget);
    REQUIRE(s.pace_most <= Table::pace_budget);
  }
  // The first decision stamped at or after 2 s + pace_period was the first of these; L of them
  // have returned: only `keep` per shard and the light keys are left.
  const auto s = storage.stats();
  INFO(s.keys << " keys held after " << L << " decisions");
  CHECK(s.keys <= bound);
  // The lap was spread: its work took at least work / budget decisions, more than one.
  CHECK(s.pace_work > Table::pace_budget);
  CHECK(s.pace_decisions * Table::pace_budget >= s.pace_work);
}

TEST_CASE("Explicit times alternating far apart do not make every decision sweep the table",
          "[in_memory][memory][reclaim][clock][regression]") {
  // The fault pinned: a caller alternating an explicit time at the clock's end with the
  // present (client-supplied times) made every later-stamped decision restart the schedule
  // and sweep the whole table. Now a stamp more than a period behind restarts the schedule at
  // most once per pace_period of such stamps, and the pacing work stays within what restarts
  // allow, each at most one lap.
  ManualClock clock;
  InMemoryStorage storage;
  ratelimit::TokenBucket<ManualClock> limiter({1, ratelimit::per_second(1)}, storage, clock);
  constexpr std::size_t n = 20'000;
  one_shot_keys(limiter, clock, n);  // at 1 s: the schedule starts there
  const auto at_spike = storage.stats();
  // N decisions: one at 2^62, then one at the present, which moves 1 s per pair.
  constexpr std::size_t pairs = 5'000;
  for (std::size_t i = 0; i < pairs; ++i) {
    limiter.try_acquire("far", 1, ratelimit::max_clock_time);
    limiter.try_acquire("near", 1, 2s + std::chrono::seconds{i});
  }
  // Steps granted: the first far decision owes a lap (64 steps, capped there); a near one
  // restarts the schedule (R restarts, the first at 2 s, then at most one per 600 s of the
  // near stamps, which span 4,999 s: R <= 1 + 4999 / 600 = 9), and only the far decision
  // after a restart owes steps again, at most 64 more (it tops up to 64): at most
  // 64 x (1 + R) = 640 steps. A step's units: 1 + F + K1 + 3 S1 (table.hpp), with S1, K1
  // as in decisions_term after the 2 inserts (far, near).
  const std::size_t restarts = 1 + (pairs - 1) / 600;
  const std::size_t steps = Table::shard_count * (1 + restarts);
  const Most most = most_after(at_spike, 2);
  const std::size_t per_step =
      1 + at_spike.overflow + (most.shard_slots + at_spike.overflow) + 3 * most.shard_slots;
  const auto s = storage.stats();
  INFO(s.pace_work << " units of pacing work over " << 2 * pairs << " decisions, bound "
                   << steps * per_step << "; a sweep per far decision: " << pairs * at_spike.slots);
  CHECK(s.pace_work <= steps * per_step);
  CHECK(s.pace_most <= Table::pace_budget);
  // The bound says something: a sweep of the table at every far decision is far more.
  CHECK(steps * per_step < pairs * at_spike.slots);
}

}  // namespace dead_keys_test
