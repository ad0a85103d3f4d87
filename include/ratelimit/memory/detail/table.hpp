#pragma once
/// @file memory/detail/table.hpp
/// One model's keys for one limiter name: a sharded open-addressing table whose every operation
/// does a bounded amount of work under one shard's lock, colliding keys and resizes included.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../core/decision.hpp"
#include "../../core/storage.hpp"
#include "hash.hpp"
#include "shard.hpp"
#include "shard_lock.hpp"
#include "single_state.hpp"
#include "slot_array.hpp"

namespace ratelimit::detail {

/// A key's hash, as `Table::locate` returns it (the key's slot already being fetched).
struct KeyHash {
  Hash128 value;

  KeyHash() noexcept = default;
  explicit KeyHash(Hash128 h) noexcept : value(h) {}
  // A copy written out: then a KeyHash is not trivially copyable, so it is returned and passed
  // in memory (the caller's object, written in place) rather than in two registers, which
  // GCC then copied through the stack as two words stored and one 16-byte load: a
  // store-to-load forwarding stall of about 5 ns a decision.
  KeyHash(const KeyHash& o) noexcept : value(o.value) {}
  KeyHash& operator=(const KeyHash& o) noexcept {
    value = o.value;
    return *this;
  }
};

/// This thread's decisions on keyed tables, counted to give every sweep_every-th of them the
/// shard's upkeep (see Table::apply). Per thread, not per shard: a shared counter would be one
/// more cache line moving between cores at each decision.
inline thread_local std::uint32_t upkeep_turn = 0;

/// The last key this thread hashed, and for which table (see Table::hash_key). A service
/// deciding the same key again (a hot client, a limiter per tenant) then skips the keyed hash,
/// about a third of a decision on a short key.
struct KeyMemo {
  static constexpr std::size_t capacity = 48;  ///< longer keys are not remembered
  std::uint64_t table = 0;                     ///< Table::id_ (0: none)
  std::size_t size = 0;
  Hash128 hash;
  char bytes[capacity] = {};
};
inline thread_local KeyMemo key_memo;
/// Table ids: never reused, so a memo can never match a later table at the same address.
inline std::atomic<std::uint64_t> table_ids{0};

/// What a table holds, for monitoring and tests.
struct TableStats {
  std::size_t keys = 0;           ///< keys held (array and overflow)
  std::size_t overflow = 0;       ///< of which in the overflow maps (keys that found no slot)
  std::size_t slots = 0;          ///< slots allocated, resizes in progress included
  std::size_t bytes = 0;          ///< bytes of those slots and of the drop filters
  std::size_t largest_shard = 0;  ///< slots of the largest shard (what bounds a sweep pass)
  /// The pace's work (Table::pace) since the table began, in units (a slot or overflow entry
  /// examined, or a lock taken), and the most of it one decision did (at most pace_budget).
  std::uint64_t pace_work = 0;
  std::size_t pace_most = 0;
  /// Decisions that did pacing work.
  std::uint64_t pace_decisions = 0;
};

/// One model's keys for one limiter name, split into 64 independently locked shards so that
/// threads deciding different keys rarely contend. `Hash` maps a key to a Hash128 (default
/// SipHash-1-3 with 128-bit output under the process secret, see hash.hpp; tests swap in weak
/// ones). The empty key (a limiter used without a key) is not hashed: it has its own state
/// beside the shards.
///
/// Keys are not stored: a key is its 128-bit hash. Each shard is an open-addressing array
/// (linear probing, backward-shift deletion) of slots {tag: the first hash word with bit 0 set
/// and bit 1 (the slot's lock bit) clear (0 marks an empty slot, 4 a migrated one), the model's
/// state, check: the second word}:
/// 32 bytes for the 16-byte states (GCRA, fixed window, sliding counter), 40 for a 24-byte one,
/// more for the sliding log's; no heap copy of long keys and no byte compare. Why
/// this is safe: two distinct keys share a state only if both 64-bit words of their SipHash
/// collide. SipHash is a PRF under the process's 128-bit secret, so among n keys that happens
/// with probability about n^2 / 2^129 (1e-25 for 10 million keys; the shard and home bits
/// cost nothing, they are the same words), and nobody who does not know the secret can choose
/// keys that collide more often (what flooding and impersonating another key would need): the
/// same argument that lets the keyed hash resist flooding, with 128 bits instead of 64.
/// Memory: a 32-byte slot at the arrays' 0.56 to 0.7 load is 46 to 57 bytes per key, a 40-byte
/// one 57 to 71 (see InMemoryStorage for the measured figures). A 32-byte slot never straddles
/// two cache lines; a 40-byte one may, and `locate` fetches both. The tag and the state, which
/// a decision writes, come first: in 3 of 8 slot positions rather than 4 (the check first) they
/// span two lines, and with two threads deciding one key, each line written moves between their
/// cores at every decision (the check, only read, is copied to both once). Hence the library's
/// lock-free models keep 16-byte states (detail::GcraState, the windows' counts in 32 bits).
///
/// Bounded work per operation, whatever the keys:
/// - A key is placed at most `max_probe` slots from its home, and a lookup reads at most that
///   many; a key that finds no slot there goes to the shard's overflow map (ordered by the
///   128-bit hash, O(log n) comparisons). Colliding hashes thus cost at most `max_probe` slot reads
///   plus a map lookup, never a scan of the shard.
/// - A resize is incremental: the new array is allocated zeroed (fresh pages: no writes under
///   the lock), every later operation on the shard moves `migrate_step` slots of the old one, and
///   lookups read both until the old one is empty. Arrays of a page or more are mappings of
///   their own (ZeroedBlock): the old array's pages go back to the kernel as the migration
///   passes them (in `release_batch` steps), and the rest when it ends, so a resize holds
///   about 1.3 times the new array at its peak. The emptied block is kept as a spare for a
///   later array (`Shard::spares`: a lock-free decision may still read it).
/// - Reclamation is incremental: every decision under the shard's lock counts, and every
///   `sweep_every`-th of them, as well as every sweep_every-th decision of each thread (those
///   that find their key held are otherwise lock-free and counted nowhere) unless the shard
///   has nothing to sweep (`Shard::quiet`: then only its visits below go on), sweeps
///   sweep_every x `sweep_step` slots of the shard (and sweep_every overflow entries), dropping
///   up to as many keys back to their fresh state; every `foreign_every / sweep_every`-th sweep
///   of a shard also sweeps `foreign_step` slots of another shard that had no decision under
///   its lock since it was last visited (try_lock: never waits). A pass over a shard of C
///   slots that drops K keys thus takes at most (C + K) / sweep_step of its decisions under the
///   lock (K < 7/10 C), whatever the insert rate (inserts take the lock); a shard under 1/5
///   full after a pass shrinks. A shard holding at most `keep` keys is not swept.
///   `reclaim(now)` sweeps everything at once, in chunks of `chunk` slots per lock hold.
/// - Reclamation is also paced by time, since the sweeps above follow decisions (a shard that
///   light traffic seldom reaches kept its dead keys for ever). A schedule of steps, one every
///   `pace_step` (9.375 s) of the decisions' clock; a step sweeps one shard whole, in turn, as
///   `reclaim` does but keeping `keep` keys (the rest of a resize, the overflow map, every slot,
///   one shrink if sparse). Every keyed decision checks it (`pace`: one relaxed load, beside `id_`,
///   and a compare); while a step is due or under way, each does at most `pace_budget` (4096) units
///   of it and the next (a unit: a slot or overflow entry examined, a slot examined again after a
///   drop, a step begun), in lock holds of at most `chunk` slots, and leaves a cursor for the next
///   (measured: at most 0.15 ms of CPU, where catching up a 1,100,000-key table in one decision
///   took 35 ms). At most `shard_count` steps are owed: more would sweep a shard twice. The bound,
///   a time term and a decisions term: a key whose state is fresh from t (its model's `fresh_at`)
///   is no longer held, unless its shard holds at most `keep` keys, once the first keyed decision
///   on its table stamped at or after t + `pace_period` (10 minutes) and the L - 1 keyed decisions
///   after it have returned, where
///     L = ceil((U + U1) / pace_budget),  U = 64 + F + K + 3 S,  U1 = 1 + F + K1 + 3 S1,
///   S the table's slots (both arrays of a resize), K its keys, F its overflow keys, S1 and K1
///   those of its largest shard, each the most held from t on. At 1.6 to 1.8 slots a key, about
///   one decision per 650 keys (1,100,000 keys in 1.8 M slots: L is about 1,600; a lap measured
///   4.7 M units, 1,147 decisions). Why: (1) after any grant at time c the next step is due in
///   (c, c + pace_step], so the 64 steps after the one under way at t are all due by t +
///   pace_period, and a decision stamped at or after that owes them all: one per shard, each
///   begun after t, so each examines every key of its shard at a stamp at or after t. (2) A
///   step over a shard of at most C slots, F overflow and K keys takes at most 1 + F + K + 3 C
///   units: the pass's C slots and K re-examinations after drops, then its shrink's move of C;
///   a resize others begin meanwhile ends the pass (its move examines what the pass had not)
///   and adds one move of C. The step under way at t and the 64 owed are at most a lap (U) and
///   a shard (U1), and every decision with work owed does a full budget but the last: hence
///   L. It assumes stamps in the order decisions run (one thread, a clock that never steps
///   back); with threads, one that finds another pacing does none (try_lock), and a key may
///   wait for the next lap. Stamps out of order: the schedule only moves forward. A decision
///   stamped more than a period before the next step (after a time far ahead) restarts it from
///   its own time, owing nothing more, but at most once per period of such stamps (not before
///   the last restart's + pace_period; earlier ones are not paced): times alternating far
///   apart cost at most a lap of work per restart, never a sweep per decision. With no
///   decision at all nothing runs (there is no thread): call `reclaim`.
///
/// Decisions on a key already held in its shard's current array, for models whose state is
/// trivially copyable (all but the sliding log), take no lock: a compare-and-swap sets the
/// slot's lock bit, and the decision checks that the shard's lock is free (see `enter_fast`
/// for why this is atomic with everything done under the lock, multi-key decisions included).
///
/// A dropped key is decided no earlier than the time its state became fresh (its model's
/// `fresh_at`: the bucket full again, the window over; never before the latest time the state
/// kept): from then on the fresh state decides exactly as the kept one would, and a clock that
/// steps back below it never revives spent capacity. That time is the key's own: a request
/// stamped far ahead on another key (a clock stepping forward, an out-of-range `now`) changes
/// nothing for it. A key that never had state is decided at its own time, unless the shard's
/// drop filter (4096 bits, the last 512 drops) says it may have been dropped (about 5 % of
/// never-seen keys, false positive) or more than 512 keys were dropped from the shard since
/// the clock's reading; those are decided no earlier than the latest such time of the drops
/// they may be.
template <Model M, class Hash = SipKeyHash128>
class Table : public TableConstants {
  using State = typename M::State;
  using Params = typename M::Params;

 public:
  Table() = default;
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;

  /// Decides `key`: `apply(p, locate(key), key, now, op)` (the empty key: its single state,
  /// see SingleState). Without a lock for a key already held whose state is trivially copyable,
  /// otherwise under its shard's lock (the single state's).
  Decision apply(const Params& p, std::string_view key, std::chrono::nanoseconds now,
                 const Operation& op) {
    if (key.empty()) return single_.apply(p, now, op);
    return apply(p, locate(key), key, now, op);
  }

  /// Hashes `key` (not the empty key: a limiter with one state hashes nothing) and starts fetching
  /// the cache lines its decision will touch (its shard's lock and its home slot) without waiting
  /// for them, so that whatever the caller does next, such as reading the clock, overlaps the
  /// memory latency. Takes no lock: the slot address is a hint, possibly stale (a prefetch of a
  /// stale address is harmless).
  KeyHash locate(std::string_view key) const noexcept {
    if (key.empty()) return KeyHash{};  // the single state: nothing to hash or fetch
    return locate_keyed(key);
  }

 private:
  /// `locate` for a key that is not empty; out of line for the same reason as apply_keyed.
  [[gnu::noinline]] KeyHash locate_keyed(std::string_view key) const noexcept {
    const KeyHash h(hash_key(key));
    const Shard& shard = shard_of(h.value.first);
    // Acquire (a plain load on x86): the array's header and zeroed slots were written first.
    const Slot* slots = shard.published.load(std::memory_order_acquire);
    const std::size_t capacity = slots ? capacity_of(slots) : 0;
    if (capacity != 0) {
      // Every line the slot touches (3 of 8 40-byte slots straddle two lines), for writing:
      // a decision without the shard's lock takes the slot's lock bit.
      const auto first =
          reinterpret_cast<std::uintptr_t>(&slots[home_slot(tag_of(h.value), capacity)]);
      const std::uintptr_t last = first + sizeof(Slot) - 1;
      for (std::uintptr_t at = first & ~std::uintptr_t{cache_line - 1}; at <= last;
           at += cache_line)
        __builtin_prefetch(reinterpret_cast<const void*>(at), 1);
    }
    return h;
  }

 public:
  /// Decides `key`, whose `locate(key)` is `h`: a key already held, when its model's state is
  /// trivially copyable, without the shard's lock (see `enter_fast`), otherwise under it.
  Decision apply(const Params& p, const KeyHash& h, std::string_view key,
                 std::chrono::nanoseconds now, const Operation& op) {
    if (key.empty()) return single_.apply(p, now, op);
    return apply_keyed(p, h.value, now, op);
  }

 private:
  /// `apply` for a key that is not empty. Out of line: inline, its two paths (with and without
  /// the shard's lock) made every caller too large for the compiler to inline the single
  /// state's path and the model's decision into.
  [[gnu::noinline]] Decision apply_keyed(const Params& p, Hash128 h, std::chrono::nanoseconds now,
                                         const Operation& op) {
    pace(now);
    Shard& shard = shard_of(h.first);
    bool upkeep = false;
    if constexpr (lock_free) {
      // Every sweep_every-th decision of a thread takes the lock and does the shard's upkeep
      // (sweeping, as the decisions that find their key held no longer count in the shard).
      upkeep = ++upkeep_turn % sweep_every == 0;
      if (upkeep && shard.quiet.load(std::memory_order_relaxed)) {
        // Nothing to sweep here: skip the lock (with two threads on a hot key, each write of
        // the shard's first line moves it between their cores), but keep the visits' cadence.
        if (upkeep_turn % foreign_every == 0) visit_idle(shard, upkeep_turn / foreign_every, now);
        upkeep = false;
      }
      const std::uint64_t tag = tag_of(h);
      if (Slot* s = upkeep ? nullptr : enter_fast(shard, tag, h.second)) {
        // The bit is released once the decision is built, in the caller's return slot: built
        // in a temporary and copied out, its narrow stores stalled the copy's wide loads
        // (store-to-load forwarding fails).
        const Leave leave{*s, tag};
        return M::apply(p, s->held_state(), now, op);
      }
    }
    std::lock_guard lock(shard.mutex);
    return decide_in(shard, h, p, now, op, upkeep);
  }

 public:
  /// The lock that guards `key`'s slot: what `InMemoryStorage::decide_all` takes, in address
  /// order, before it calls `apply_locked` on several keys.
  ShardLock& lock_of(std::string_view key) noexcept {
    return key.empty() ? single_.lock : shard_of(hash_key(key).first).mutex;
  }

  /// Decides `key`; the caller holds `lock_of(key)`.
  Decision apply_locked(const Params& p, std::string_view key, std::chrono::nanoseconds now,
                        const Operation& op) {
    if (key.empty()) return single_.apply_locked(p, now, op);
    const Hash128 h = hash_key(key);
    return decide_in(shard_of(h.first), h, p, now, op, false);
  }

  /// Puts `key` back to its fresh state (drops it).
  void reset(std::string_view key) {
    if (key.empty()) return single_.reset();
    const Hash128 h = hash_key(key);
    Shard& shard = shard_of(h.first);
    std::lock_guard lock(shard.mutex);
    shard.erase(tag_of(h), h.second);
  }

  /// Keys held.
  std::size_t size() const { return stats().keys; }

  /// Bytes per slot: the two hash words and the state, aligned (32 for a 16-byte state, 40 for
  /// a 24-byte one). Slots follow a 64-byte header, so unless this divides 64 some span two
  /// cache lines.
  static constexpr std::size_t slot_bytes() noexcept { return sizeof(Slot); }

  /// The cache lines (1 or 2) holding what a lock-free decision on `key` writes, its slot's tag
  /// and state; 0 if the key is not in its shard's current array (the empty key's single
  /// state, a resize's old array, the overflow map). For benchmarks: with two threads deciding
  /// one key, every line written moves between their cores at each decision, and where a key's
  /// slot sits depends on the process's hash secret. Takes the shard's lock.
  std::size_t lines_written(std::string_view key) {
    if (key.empty()) return 0;
    const Hash128 h = hash_key(key);
    Shard& shard = shard_of(h.first);
    std::lock_guard lock(shard.mutex);
    const Slot* s = shard.cur.find(tag_of(h), h.second);
    if (s == nullptr) return 0;
    const auto first = reinterpret_cast<std::uintptr_t>(&s->tag);
    const auto last = reinterpret_cast<std::uintptr_t>(&s->state_bytes[sizeof(State) - 1]);
    return last / cache_line - first / cache_line + 1;
  }

  /// Keys, slots and bytes held (each shard read under its lock, one after the other).
  TableStats stats() const {
    TableStats s;
    {
      std::lock_guard lock(pace_mutex_);
      s.pace_work = pace_work_;
      s.pace_most = pace_most_;
      s.pace_decisions = pace_decisions_;
    }
    s.keys = single_.held();
    for (const Shard& shard : shards_) {
      std::lock_guard lock(shard.mutex);
      s.keys += shard.cur.size + shard.old.size + shard.overflow.size();
      s.overflow += shard.overflow.size();
      s.slots += shard.cur.capacity + shard.old.capacity;
      s.largest_shard = std::max(s.largest_shard, shard.cur.capacity + shard.old.capacity);
      s.bytes += (shard.cur.capacity + shard.old.capacity) * sizeof(Slot) +
                 (shard.filter ? filter_words * sizeof(std::uint64_t) : 0);
    }
    return s;
  }

  /// Drops every key that is fresh at `now` (under the parameters of a recent decision of its
  /// shard: the latest of every sweep_every-th, or the first), finishes any resize and shrinks
  /// sparse shards, holding each shard's lock for at most `chunk` slots at a time. Returns the
  /// number of keys dropped.
  std::size_t reclaim(std::chrono::nanoseconds now) {
    std::size_t dropped = single_.reclaim(now);
    for (Shard& shard : shards_) dropped += shard.reclaim(now);
    return dropped;
  }

  /// The time bound on dead keys (see the class comment): while steps are due, does at most
  /// `pace_budget` units of them (in lock holds of at most `chunk` slots); otherwise nothing but
  /// one relaxed load, of a word in the line the key memo's check reads anyway, and a compare.
  /// Every keyed decision calls it first; `InMemoryStorage::decide_all` calls it after
  /// releasing its locks. The caller must hold no shard lock of this table.
  void pace(std::chrono::nanoseconds now) {
    // Nothing to do when `now` is in [due - pace_period, due): before the next step's time and
    // not far behind it. Outside it (a step due, work owed, or a time far behind): pace_due.
    const auto from = static_cast<std::uint64_t>(pace_from_.load(std::memory_order_relaxed));
    if (static_cast<std::uint64_t>(now.count()) - from >=
        static_cast<std::uint64_t>(pace_period.count())) [[unlikely]]
      pace_due(now);
  }

 private:
  using Shard = detail::Shard<M>;
  using Slot = typename Shard::Slot;

  Shard& shard_of(std::uint64_t h) noexcept { return shards_[h % shard_count]; }
  const Shard& shard_of(std::uint64_t h) const noexcept { return shards_[h % shard_count]; }

  /// The key's hash; the thread's last key of this table is remembered with its hash (compared
  /// byte for byte, so the memo never returns another key's hash).
  Hash128 hash_key(std::string_view key) const noexcept {
    KeyMemo& memo = key_memo;
    if (memo.table == id_ && memo.size == key.size() &&
        equal_bytes(memo.bytes, key.data(), key.size()))
      return memo.hash;
    const Hash128 h = hash_(key);
    if (key.size() <= KeyMemo::capacity) {
      memo.table = id_;
      memo.size = key.size();
      std::memcpy(memo.bytes, key.data(), key.size());
      memo.hash = h;
    }
    return h;
  }

  /// Decides under the shard's lock; `upkeep`: sweep whatever the shard's count of decisions.
  Decision decide_in(Shard& shard, Hash128 h, const Params& p, std::chrono::nanoseconds now,
                     const Operation& op, bool upkeep) {
    const std::uint64_t tag = tag_of(h);
    const std::uint64_t check = h.second;
    // Only the shard's first line is written here (lock, counter): with two threads
    // on one key, every line written moves between their cores at each decision. The
    // parameters (a line or two) are kept for sweeps only when a sweep runs.
    if (!shard.has_params) [[unlikely]]
      shard.keep_params(p);
    Decision d;
    if (State* s = shard.find(tag, check)) {
      d = M::apply(p, *s, now, op);
    } else {
      // A key dropped as fresh is decided no earlier than the time it became fresh, so a clock
      // that steps back never revives spent capacity (see the class comment).
      const auto pin = shard.pinned_time(h.first);
      const auto t = now < pin ? pin : now;
      State state{};
      d = M::apply(p, state, t, op);
      if (!Shard::fresh(p, state, t)) shard.insert(tag, check, std::move(state));
    }
    if (shard.old.capacity != 0) shard.migrate(p, now, migrate_step);
    if (++shard.decisions % sweep_every == 0 || upkeep) {
      shard.keep_params(p);
      shard.sweep(p, now, sweep_every * sweep_step);
      if (!shard.overflow.empty()) shard.sweep_overflow(p, now, sweep_every);
      const std::size_t visits = foreign_every / sweep_every;
      if (++shard.sweeps % visits == 0) visit_idle(shard, shard.sweeps / visits, now);
    }
    const bool quiet = shard.nothing_to_sweep();
    if (shard.quiet.load(std::memory_order_relaxed) != quiet)
      shard.quiet.store(quiet, std::memory_order_relaxed);
    return d;
  }

  /// The start of a decision on a key already held in its shard's current array, without the
  /// shard's lock: one compare-and-swap takes the lock bit in the slot's tag word; the caller's
  /// model then decides on the slot's state in place, and a store releases the bit (`Leave`).
  /// With two threads on one key, only the slot's cache line moves between their cores (the
  /// shard's line is only read).
  ///
  /// Why it is atomic with everything done under the shard's lock (sweeps, resizes, inserts,
  /// `decide_all`'s multi-key decisions): after taking the bit, it reads the shard's lock and
  /// backs off (releases the bit, returns null) if anyone holds it; a holder of the shard's
  /// lock waits until a slot's bit is clear before it reads the slot's state (`Slot::state`)
  /// and changes a tag only from its bit-clear value (`store_tag`), so it can never take a
  /// bit away. Both sides are sequentially consistent, so of a decision taking a bit and a
  /// thread taking the lock, at least one sees the other (the store-load pattern of Dekker's
  /// algorithm): a decision that finds the lock free either took its bit before the holder's
  /// wait for it (the holder then waits for this decision) or after the holder released the
  /// lock; either way it still holds its bit on a slot that still holds its key.
  /// Arrays are never freed while the table lives (a resize keeps them for reuse, their pages
  /// given back), so a stale pointer to an array is still readable; the CAS on the exact tag
  /// fails on a slot whose key moved. Returns the slot, its bit taken; null, having changed
  /// nothing, when the key is not found (not held, in the old array of a resize, in the
  /// overflow map), the shard's lock is held, or the bit stays taken: the caller then decides
  /// under the lock.
  Slot* enter_fast(Shard& shard, std::uint64_t tag, std::uint64_t check) {
    // A holder of the shard's lock (an insert, another thread's upkeep) leaves it within tens
    // of ns: wait for that rather than queue behind it, since while this decision holds the
    // lock, the other threads' lock-free decisions would back off and queue too (a convoy).
    if (!shard.mutex.await_free()) return nullptr;
    Slot* const slots = shard.published.load(std::memory_order_acquire);
    const std::size_t capacity = slots ? capacity_of(slots) : 0;
    if (capacity == 0) return nullptr;
    std::size_t i = home_slot(tag, capacity);
    // Most keys sit at their home: the CAS goes there first, so that a slot another core holds
    // moves once (exclusive, for the CAS), not twice (shared for a read, then exclusive).
    std::uint64_t t = tag;
    if (!tag_ref(slots[i]).compare_exchange_strong(
            t, tag | slot_lock_bit, std::memory_order_seq_cst, std::memory_order_relaxed)) {
      // Held by another decision, or elsewhere: find it (at most max_probe slots), take its bit.
      for (std::size_t n = std::min(max_probe, capacity); (t & ~slot_lock_bit) != tag;
           t = load_tag(slots[i])) {
        if (t == 0 || --n == 0) return nullptr;
        if (++i == capacity) i = 0;
      }
      if (!take_bit(slots[i], tag)) return nullptr;
    }
    Slot* const s = &slots[i];
    if (shard.mutex.held() || s->check != check) {
      // Back off without having read the state. A lock holder that waits to change this tag
      // (`store_tag`) goes on once the bit is clear; the tag is restored only if nobody changed
      // it meanwhile all the same.
      std::uint64_t held = tag | slot_lock_bit;
      tag_ref(*s).compare_exchange_strong(held, tag, std::memory_order_release,
                                          std::memory_order_relaxed);
      return nullptr;
    }
    return s;
  }

  /// Releases a slot's bit (taken by enter_fast) when it goes out of scope.
  struct Leave {
    Slot& slot;
    std::uint64_t tag;
    ~Leave() { tag_ref(slot).store(tag, std::memory_order_release); }
  };

  /// Sets the lock bit of the slot holding `tag`, waiting a little while another decision holds
  /// it; false if the slot no longer holds `tag` or the wait ran out (the caller then takes the
  /// shard's lock, which waits without spinning).
  static bool take_bit(Slot& s, std::uint64_t tag) noexcept {
    for (int spins = 0;; ++spins) {
      std::uint64_t expected = tag;
      if (tag_ref(s).compare_exchange_weak(expected, tag | slot_lock_bit, std::memory_order_seq_cst,
                                           std::memory_order_relaxed))
        return true;
      if ((expected & ~slot_lock_bit) != tag || spins == decision_spins) return false;
      cpu_relax();
    }
  }

  /// `pace` outside the quiet window: one thread at a time (try_lock: a decision never waits
  /// for another's step). Grants the steps due by `now` (at most shard_count owed: more would
  /// sweep a shard twice for nothing), then does at most pace_budget units of the owed ones.
  [[gnu::noinline]] void pace_due(std::chrono::nanoseconds now) {
    const std::unique_lock lock(pace_mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    // The limiters clamp their times to [0, 2^62]; a direct caller's extreme time is held within
    // a quarter of the range so that the schedule's sums cannot overflow.
    constexpr std::int64_t limit = std::numeric_limits<std::int64_t>::max() / 4;
    const std::int64_t t = std::clamp<std::int64_t>(now.count(), -limit, limit);
    const std::int64_t step = pace_step.count();
    if (due_ == unpaced) {
      due_ = t + step;  // the first keyed decision: the schedule starts
    } else if (t >= due_) {
      // Steps due: one per pace_step since due_, the schedule moved past `t`.
      const std::int64_t k = (t - due_) / step + 1;
      owed_ = static_cast<std::size_t>(std::min<std::int64_t>(
          static_cast<std::int64_t>(shard_count), static_cast<std::int64_t>(owed_) + k));
      due_ += k * step;
    } else if (t < due_ - pace_period.count() &&
               (back_ == unpaced || t >= back_ + pace_period.count())) {
      // More than a period behind the schedule (a clock stepped back after a time far
      // ahead): it starts again from `t`, owing nothing more. At most once per period of
      // such times: explicit times alternating far apart must not re-anchor at every decision
      // (each re-anchor lets the next later-stamped decision owe a whole lap).
      back_ = t;
      due_ = t + step;
    }
    std::size_t budget = pace_budget;
    while (budget > 0 && (stepping_ || owed_ > 0)) {
      if (!stepping_) {
        stepping_ = true;
        --owed_;
        --budget;  // a step begun is a unit: 64 empty shards are work too
        cursor_ = PaceCursor{};
      }
      if (shards_[pace_next_].pace_slice(cursor_, now, keep, budget)) {
        stepping_ = false;
        pace_next_ = (pace_next_ + 1) % shard_count;
      }
    }
    if (const std::size_t work = pace_budget - budget; work != 0) {
      pace_work_ += work;
      pace_most_ = std::max(pace_most_, work);
      ++pace_decisions_;
    }
    // While a step is owed every decision comes here (the window is empty), so that the step
    // goes on at the next decision; otherwise the window is the one before due_.
    pace_from_.store(stepping_ || owed_ > 0 ? unpaced : due_ - pace_period.count(),
                     std::memory_order_relaxed);
  }

  /// Sweeps a bit of shard number `turn` after `self` (never `self`) if it had no decision since
  /// our last visit, so that a table whose traffic has moved elsewhere still gives its memory
  /// back. try_lock only: the caller may hold its own shard's lock (and, in decide_all, others).
  void visit_idle(Shard& self, std::size_t turn, std::chrono::nanoseconds now) {
    const std::size_t own = static_cast<std::size_t>(&self - shards_.data());
    Shard& other = shards_[(own + 1 + turn % (shard_count - 1)) % shard_count];
    if (!other.mutex.try_lock()) return;
    if (other.has_params && other.decisions == other.decisions_seen)
      other.maintain(other.params, now, foreign_step);
    other.decisions_seen = other.decisions;
    other.mutex.unlock();
  }

  /// Whether decisions on held keys go without the shard's lock: for states that are plain
  /// words (a sliding log's entries live on the heap, and its decisions may allocate).
  static constexpr bool lock_free = std::is_trivially_copyable_v<State>;

  [[no_unique_address]] Hash hash_;
  const std::uint64_t id_ = table_ids.fetch_add(1, std::memory_order_relaxed) + 1;
  /// What `pace` compares with: the next step's time minus pace_period (ns), or `unpaced`
  /// (every decision calls pace_due: before the first keyed decision, or while a step is
  /// owed). Beside `id_`, which every keyed decision reads: no line of its own. Written only
  /// under pace_mutex_.
  static constexpr std::int64_t unpaced = std::numeric_limits<std::int64_t>::min();
  std::atomic<std::int64_t> pace_from_{unpaced};
  SingleState<M> single_;  ///< the empty key's
  std::array<Shard, shard_count> shards_;
  // The pace's schedule, under pace_mutex_.
  mutable std::mutex pace_mutex_;  ///< held by the thread doing pacing work
  std::int64_t due_ = unpaced;     ///< the next step's time (ns; unpaced: none yet)
  std::int64_t back_ = unpaced;    ///< the time of the last restart from a time far behind
  std::size_t owed_ = 0;           ///< steps due, not begun (at most shard_count)
  bool stepping_ = false;          ///< a step is under way on pace_next_, at cursor_
  std::size_t pace_next_ = 0;      ///< the shard the current or next step sweeps
  PaceCursor cursor_;
  std::uint64_t pace_work_ = 0, pace_decisions_ = 0;  ///< as TableStats says
  std::size_t pace_most_ = 0;
};

}  // namespace ratelimit::detail
