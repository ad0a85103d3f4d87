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
#include "shard_lock.hpp"
#include "single_state.hpp"
#include "zeroed_block.hpp"

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
class Table {
  using State = typename M::State;
  using Params = typename M::Params;

 public:
  static constexpr std::size_t shard_count = 64;
  /// The smallest array a shard allocates (slots).
  static constexpr std::size_t min_capacity = 8;
  /// The most slots a key sits from its home (and a lookup reads in one array).
  static constexpr std::size_t max_probe = 64;
  /// Slots of its own shard every decision sweeps, on average: every `sweep_every`-th decision
  /// of a shard sweeps sweep_every x sweep_step slots at once, their cache lines fetched
  /// together (fetching them one by one, two per decision, cost two memory latencies per
  /// decision).
  static constexpr std::size_t sweep_step = 2;
  static constexpr std::size_t sweep_every = 8;
  /// Slots of the old array every operation moves during a resize (their lines fetched
  /// together). The total work of a resize does not depend on it; the time both arrays are
  /// held does: at 16, with inserts landing on most pages of the new array while the old one
  /// was still mostly held, 1,000,000 keys peaked at 105 resident bytes per key (40-byte
  /// slots), at 64 at 77.
  static constexpr std::size_t migrate_step = 64;
  /// Bytes of an old array's migrated prefix given back to the kernel at once (one madvise).
  static constexpr std::size_t release_batch = 64 * 1024;
  /// Every this many decisions a shard also sweeps `foreign_step` slots of an idle shard.
  static constexpr std::size_t foreign_every = 64;  // a multiple of sweep_every
  static constexpr std::size_t foreign_step = 64;
  /// Slots per lock hold in `reclaim`.
  static constexpr std::size_t chunk = 1024;
  /// A shard holding at most this many keys is not swept (`reclaim` ignores it): so a small
  /// table never forgets, and decides exactly as if no key were ever dropped even when the
  /// clock steps back.
  static constexpr std::size_t keep = 8;

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
      const auto first = reinterpret_cast<std::uintptr_t>(&slots[home(tag_of(h.value), capacity)]);
      const std::uintptr_t last = first + sizeof(Slot) - 1;
      for (std::uintptr_t at = first & ~std::uintptr_t{line - 1}; at <= last; at += line)
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
    return last / line - first / line + 1;
  }

  /// Keys, slots and bytes held (each shard read under its lock, one after the other).
  TableStats stats() const {
    TableStats s;
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

 private:
  struct Shard;
  struct Slot;

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
      if (!fresh(p, state, t)) shard.insert(tag, check, std::move(state));
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
    std::size_t i = home(tag, capacity);
    // Most keys sit at their home: the CAS goes there first, so that a slot another core holds
    // moves once (exclusive, for the CAS), not twice (shared for a read, then exclusive).
    std::uint64_t t = tag;
    if (!tag_ref(slots[i]).compare_exchange_strong(t, tag | lock_bit, std::memory_order_seq_cst,
                                                   std::memory_order_relaxed)) {
      // Held by another decision, or elsewhere: find it (at most max_probe slots), take its bit.
      for (std::size_t n = std::min(max_probe, capacity); (t & ~lock_bit) != tag;
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
      std::uint64_t held = tag | lock_bit;
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
      if (tag_ref(s).compare_exchange_weak(expected, tag | lock_bit, std::memory_order_seq_cst,
                                           std::memory_order_relaxed))
        return true;
      if ((expected & ~lock_bit) != tag || spins == decision_spins) return false;
      cpu_relax();
    }
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

  // Slot layout: tag, state, check (see the class comment). The state is constructed only
  // while the slot is occupied, so a zeroed array is a valid empty one (and fresh pages need
  // no writing).
  static constexpr std::size_t line = 64;
  /// A decision without the shard's lock holds this bit of its slot's tag (see enter_fast).
  static constexpr std::uint64_t lock_bit = 2;
  static constexpr std::uint64_t moved = 4;  ///< tag of an old-array slot already migrated
  /// Whether decisions on held keys go without the shard's lock: for states that are plain
  /// words (a sliding log's entries live on the heap, and its decisions may allocate).
  static constexpr bool lock_free = std::is_trivially_copyable_v<State>;

  /// A key's tag: its first hash word with bit 0 set (0 marks an empty slot) and the lock bit
  /// clear. Bits 0 and 1 carry nothing: every key of a shard has the same low 6 bits.
  static constexpr std::uint64_t tag_of(Hash128 h) noexcept { return (h.first | 1) & ~lock_bit; }

  struct Slot {
    /// A key's tag, possibly with lock_bit; 0: empty; `moved`: migrated. Always accessed as an
    /// atomic (tag_ref): lock-free decisions read and take it without the shard's lock.
    std::uint64_t tag;
    alignas(State) unsigned char state_bytes[sizeof(State)];
    std::uint64_t check;  ///< second hash word

    /// The state, for a holder of the shard's lock: waits until no lock-free decision holds the
    /// slot (see enter_fast). An empty slot has no state to wait for.
    State& state() noexcept {
      for (int spins = 0; tag_ref(*this).load(std::memory_order_seq_cst) & lock_bit; ++spins)
        back_off(spins);
      return held_state();
    }
    /// The state, for the holder of the slot's lock bit.
    State& held_state() noexcept { return *std::launder(reinterpret_cast<State*>(state_bytes)); }
  };
  static_assert(std::is_trivially_destructible_v<Slot>);

  static std::atomic_ref<std::uint64_t> tag_ref(Slot& s) noexcept {
    return std::atomic_ref<std::uint64_t>(s.tag);
  }
  /// The tag as last stored, lock bit included (relaxed: what it guards is read only after a
  /// CAS or under the shard's lock).
  static std::uint64_t load_tag(const Slot& s) noexcept {
    return tag_ref(const_cast<Slot&>(s)).load(std::memory_order_relaxed);
  }
  /// The key's tag without the lock bit (for the holder of the shard's lock).
  static std::uint64_t key_tag(const Slot& s) noexcept { return load_tag(s) & ~lock_bit; }
  /// Publishes a tag (release: the slot's check and state are written first), for the holder
  /// of the shard's lock, once no lock-free decision holds the slot's bit. A decision may take
  /// the bit after the lock holder last waited for it (`Slot::state`); overwriting the bit then
  /// would let that decision, had it not yet read the shard's lock, find the lock released
  /// and decide on a slot emptied or reused meanwhile (its own key's tag written back into an
  /// empty slot, or a state changed beside another decision's). Waiting keeps its bit until it
  /// has seen the lock held and backed off.
  static void store_tag(Slot& s, std::uint64_t tag) noexcept {
    for (int spins = 0;; ++spins) {
      std::uint64_t expected = key_tag(s);
      if (tag_ref(s).compare_exchange_weak(expected, tag, std::memory_order_release,
                                           std::memory_order_relaxed))
        return;
      back_off(spins);
    }
  }
  /// Publishes the tag of an empty slot (0 or `moved`: no lock-free decision takes their bit).
  static void store_empty_slot_tag(Slot& s, std::uint64_t tag) noexcept {
    tag_ref(s).store(tag, std::memory_order_release);
  }

  /// The slot a tag starts probing from in an array of `capacity` slots: the tag scaled to
  /// [0, capacity) by a multiply, so the capacity need not be a power of two.
  static std::size_t home(std::uint64_t tag, std::size_t capacity) noexcept {
    return static_cast<std::size_t>((static_cast<HashWide>(tag) * capacity) >> 64);
  }

  /// Every array starts with one line holding its capacity, so that a lock-free decision
  /// holding only the array's address (`Shard::published`) reads a capacity that matches it.
  static constexpr std::size_t header_bytes = line;
  static std::atomic_ref<std::uint64_t> capacity_ref(const Slot* slots) noexcept {
    auto* header = reinterpret_cast<const std::uint64_t*>(
        reinterpret_cast<const unsigned char*>(slots) - header_bytes);
    return std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(header));
  }
  static std::size_t capacity_of(const Slot* slots) noexcept {
    return static_cast<std::size_t>(capacity_ref(slots).load(std::memory_order_relaxed));
  }

  /// Fills the empty slot `s` with a key's hash and state.
  static void fill(Slot& s, std::uint64_t tag, std::uint64_t check, State&& state) {
    ::new (static_cast<void*>(s.state_bytes)) State(std::move(state));
    s.check = check;
    store_empty_slot_tag(s, tag);
  }

  /// Empties an occupied slot's state, leaving the tag to the caller.
  static void clear(Slot& s) noexcept { s.state().~State(); }

  /// Moves the hash and state of occupied `from` into empty `to`; `from` is left without a
  /// state, its tag to the caller.
  static void move_slot(Slot& to, Slot& from) noexcept {
    ::new (static_cast<void*>(to.state_bytes)) State(std::move(from.state()));
    from.state().~State();
    to.check = from.check;
    store_tag(to, key_tag(from));
  }

  /// Whether `s` decides like a fresh state from `now` on, so that it may be dropped.
  static bool fresh(const Params& p, const State& s, std::chrono::nanoseconds now) noexcept {
    return M::fresh_at(p, s) <= now;
  }

  /// A zero-filled array of slots (ZeroedBlock: a mapping of its own from a page up, its pages
  /// untouched until keys land in them, given back to the kernel when freed).
  struct Array {
    ZeroedBlock block;
    Slot* slots = nullptr;
    std::size_t capacity = 0;
    std::size_t size = 0;  ///< occupied slots

    Array() = default;
    /// `n` slots in `b` (zeroed, at least bytes_for(n) bytes), the header written.
    Array(ZeroedBlock&& b, std::size_t n) : block(std::move(b)) {
      slots = reinterpret_cast<Slot*>(static_cast<unsigned char*>(block.data()) + header_bytes);
      capacity = n;
      capacity_ref(slots).store(n, std::memory_order_relaxed);
    }
    static std::size_t bytes_for(std::size_t n) noexcept { return header_bytes + n * sizeof(Slot); }
    Array(Array&& o) noexcept
        : block(std::move(o.block)),
          slots(std::exchange(o.slots, nullptr)),
          capacity(std::exchange(o.capacity, 0)),
          size(std::exchange(o.size, 0)) {}
    Array& operator=(Array&& o) noexcept {
      if (this != &o) {
        release();
        block = std::move(o.block);
        slots = std::exchange(o.slots, nullptr);
        capacity = std::exchange(o.capacity, 0);
        size = std::exchange(o.size, 0);
      }
      return *this;
    }
    ~Array() { release(); }

    /// Frees the block; occupied slots are emptied first (none once a migration is done).
    void release() noexcept {
      if (size > 0)
        for (std::size_t i = 0; i < capacity; ++i)
          if (load_tag(slots[i]) & 1) clear(slots[i]);
      block.reset();
      slots = nullptr;
      capacity = size = 0;
    }

    std::size_t home(std::uint64_t tag) const noexcept { return Table::home(tag, capacity); }

    std::size_t probe_limit() const noexcept { return std::min(max_probe, capacity); }

    /// The slot holding the key of hash (tag, check), or null: at most max_probe slots read,
    /// `moved` ones skipped, and so are the slots below `moved_below` without reading them (an
    /// old array's migrated prefix, whose pages may have been given back: they read as empty).
    Slot* find(std::uint64_t tag, std::uint64_t check, std::size_t moved_below = 0) noexcept {
      if (size == 0) return nullptr;
      std::size_t i = home(tag);
      for (std::size_t n = probe_limit(); n > 0; --n) {
        if (i < moved_below) {
          if (++i == capacity) i = 0;
          continue;
        }
        Slot& s = slots[i];
        const std::uint64_t t = key_tag(s);
        if (t == tag && s.check == check) return &s;
        if (t == 0) return nullptr;
        if (++i == capacity) i = 0;
      }
      return nullptr;
    }

    /// An empty slot within max_probe of the tag's home, or null.
    Slot* free_slot(std::uint64_t tag) noexcept {
      std::size_t i = home(tag);
      for (std::size_t n = probe_limit(); n > 0; --n) {
        if (load_tag(slots[i]) == 0) return &slots[i];
        if (++i == capacity) i = 0;
      }
      return nullptr;
    }

    /// Empties slot `hole`, shifting back the keys that probed past it so that no lookup needs
    /// a tombstone (and every key stays within max_probe of its home: keys only move closer).
    void erase_at(std::size_t hole) noexcept {
      clear(slots[hole]);
      for (std::size_t j = hole;;) {
        if (++j == capacity) j = 0;
        Slot& next = slots[j];
        const std::uint64_t t = key_tag(next);
        if (t == 0) break;
        const std::size_t h = home(t);
        // `next` may fill the hole only if its home is not cyclically within (hole, j].
        const bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
        if (stays) continue;
        move_slot(slots[hole], next);
        hole = j;
      }
      store_tag(slots[hole], 0);
      --size;
    }
  };

  static constexpr std::size_t filter_words = 4096 / 64;
  static constexpr std::size_t filter_keys = 512;

  struct alignas(64) Shard {
    // The first cache line holds all that a decision on a key already held writes (the lock,
    // the counter; see decide_in). `cur` follows: read by every decision,
    // written by inserts.
    mutable ShardLock mutex;
    bool has_params = false;
    /// `nothing_to_sweep()` as of the last decision under the lock: a thread's upkeep turn
    /// then skips the lock (see apply_keyed). Written under the lock, read without it: a hint.
    /// Only inserts (under the lock, which recompute it) can add keys or slots; a `reset` or
    /// `reclaim` since can at most leave a shrink due on an array of at most 5 x keep slots,
    /// done at the shard's next decision under the lock.
    std::atomic<bool> quiet{false};
    /// `cur.slots` (its capacity in the array's header), for lock-free decisions and `locate`'s
    /// prefetch, which read it without the lock. Null until the first array.
    std::atomic<Slot*> published{nullptr};
    std::size_t decisions = 0;  ///< under the lock (lock-free ones are not counted)
    std::size_t sweeps = 0;     ///< upkeeps done, for the cadence of visits
    std::size_t sweep_at = 0;   ///< next `cur` slot to sweep
    Array cur;                  ///< where keys are inserted
    // Read by decisions, written only by resizes and sweeps (a line that is only read is shared
    // by the cores, not moved).
    Array old;                       ///< being emptied into `cur` by a resize (capacity 0: none)
    std::size_t migrate_at = 0;      ///< next `old` slot to move
    std::size_t decisions_seen = 0;  ///< `decisions` when another shard last visited
    /// Keys that found no slot within max_probe of their home, by (tag, check).
    std::map<Hash128, State> overflow;
    Hash128 overflow_next;  ///< the overflow sweep's position (the next hash >= it)
    /// Of the latest decision that swept (every sweep_every-th) or of the first: what reclaim
    /// and visits sweep with.
    Params params{};
    // Drops, for pinning: keys dropped since the filter was last cleared set 2 of its bits and
    // are pinned to `recent_horizon`; every key to `old_horizon` (drops before that).
    std::unique_ptr<std::uint64_t[]> filter;
    std::size_t filtered = 0;
    std::chrono::nanoseconds recent_horizon{0};
    std::chrono::nanoseconds old_horizon{0};
    /// Blocks of earlier arrays, their pages given back, kept for later arrays: a lock-free
    /// decision may still read an array after a resize replaced it, so no array's memory is
    /// freed while the table lives. A new array takes the smallest spare of its size to twice
    /// it, so the spares of a shard stay within a few times its largest array's address space
    /// (at most about three per doubling of size), none of it resident but small calloc'd ones.
    std::vector<ZeroedBlock> spares;
    std::uint64_t arrays = 0;  ///< arrays started (`cur`'s number), for reclaim's position

    Shard() = default;
    Shard(const Shard&) = delete;
    Shard& operator=(const Shard&) = delete;

    std::size_t live() const noexcept { return cur.size + old.size + overflow.size(); }

    /// Whether `cur` is under 1/5 full and larger than the smallest array: it should shrink.
    bool sparse() const noexcept {
      return cur.capacity > min_capacity && live() * 5 < cur.capacity;
    }

    /// Whether an upkeep would do nothing here: at most `keep` keys (not swept), no resize
    /// going on, and no array to shrink (see `sweep`).
    bool nothing_to_sweep() const noexcept {
      return live() <= keep && old.capacity == 0 && !sparse();
    }

    void keep_params(const Params& p) {
      params = p;
      has_params = true;
    }

    State* find(std::uint64_t tag, std::uint64_t check) {
      if (Slot* s = cur.find(tag, check)) return &s->state();
      if (Slot* s = old.find(tag, check, migrate_at)) return &s->state();
      if (!overflow.empty()) {
        const auto it = overflow.find(Hash128{tag, check});
        if (it != overflow.end()) return &it->second;
      }
      return nullptr;
    }

    /// Adds the key of hash (tag, check) (known to be absent), starting a resize first if `cur`
    /// would pass 7/10 full.
    void insert(std::uint64_t tag, std::uint64_t check, State&& state) {
      if (old.capacity == 0 && (cur.size + 1) * 10 > cur.capacity * 7) start_resize();
      if (Slot* s = cur.capacity ? cur.free_slot(tag) : nullptr) {
        fill(*s, tag, check, std::move(state));
        ++cur.size;
      } else {
        overflow.emplace(Hash128{tag, check}, std::move(state));
      }
    }

    /// Starts moving the keys into an array of 7/4 the live keys plus room for the inserts
    /// that can come while the old one is emptied (one per operation, which moves `step`
    /// slots), so `cur` stays under 7/10 full meanwhile.
    void start_resize(std::size_t step = migrate_step) {
      const std::size_t room = (cur.capacity / step + 1) * 10 / 7;
      const std::size_t n = std::max(min_capacity, (live() + 1) * 7 / 4 + room);
      Array next = new_array(n);
      spares.reserve(spares.size() + 1);  // for `old`'s block, when its migration ends
      old = std::move(cur);
      cur = std::move(next);
      migrate_at = 0;
      sweep_at = 0;
      ++arrays;
      published.store(cur.slots, std::memory_order_release);
    }

    /// An array of `n` zeroed slots, in a spare block if one fits (see `spares`).
    Array new_array(std::size_t n) {
      const std::size_t bytes = Array::bytes_for(n);
      auto best = spares.end();
      for (auto it = spares.begin(); it != spares.end(); ++it)
        if (it->size() >= bytes && it->size() / 2 <= bytes &&
            (best == spares.end() || it->size() < best->size()))
          best = it;
      if (best == spares.end()) return Array(ZeroedBlock(bytes, line), n);
      ZeroedBlock block = std::move(*best);
      spares.erase(best);
      return Array(std::move(block), n);
    }

    /// Ends a resize once `old` is empty: its block becomes a spare, its pages given back (a
    /// calloc'd one, too small to give back, gets its tags cleared instead, so that it reads
    /// as empty to a lock-free decision holding a stale pointer and is ready to be used again).
    void finish_migration() noexcept {
      if (old.capacity == 0 || (old.size != 0 && migrate_at < old.capacity)) return;
      old.size = 0;  // every slot was moved or cleared: nothing for release() to destroy
      if (!old.block.recycle()) {
        Slot* const slots = old.slots;
        const std::size_t n = (old.block.size() - header_bytes) / sizeof(Slot);
        for (std::size_t i = 0; i < n; ++i) tag_ref(slots[i]).store(0, std::memory_order_relaxed);
      }
      spares.push_back(std::move(old.block));  // room reserved by start_resize: never throws
      old = Array{};
    }

    /// Bounded upkeep after a decision: moves migrate_step slots of a resize, sweeps `slots`
    /// slots of `cur` and one overflow entry, dropping the keys fresh at `now`.
    void maintain(const Params& p, std::chrono::nanoseconds now, std::size_t slots) {
      if (old.capacity != 0) migrate(p, now, migrate_step);
      sweep(p, now, slots);
      if (!overflow.empty()) sweep_overflow(p, now, 1);
    }

    void migrate(const Params& p, std::chrono::nanoseconds now, std::size_t n,
                 std::size_t floor = keep) {
      for (std::size_t i = migrate_at; i < migrate_at + n && i < old.capacity; ++i)
        __builtin_prefetch(&old.slots[i]);
      for (; n > 0 && migrate_at < old.capacity && old.size > 0; --n, ++migrate_at) {
        Slot& s = old.slots[migrate_at];
        const std::uint64_t tag = key_tag(s);
        if (!(tag & 1)) continue;
        if (live() > floor && fresh(p, s.state(), now)) {
          record_drop(p, tag, s.state());
          clear(s);
        } else if (Slot* to = cur.free_slot(tag)) {
          move_slot(*to, s);
          ++cur.size;
        } else {
          overflow.emplace(Hash128{tag, s.check}, std::move(s.state()));
          clear(s);
        }
        store_tag(s, moved);
        --old.size;
      }
      // The moved prefix is never read again (lookups skip it): its pages go back to the
      // kernel as the migration passes them, so an array being emptied shrinks as the new
      // one fills.
      old.block.release_prefix(migrate_at * sizeof(Slot), release_batch);
      finish_migration();
    }

    /// Sweeps `n` slots of `cur` from the cursor and drops up to `n` keys on the way, stopping
    /// early at a droppable key beyond that: a pass over C slots that drops K keys takes at
    /// most (C + K) / n calls. After an erase the same slot is examined again (a later key may
    /// have shifted into it); keys only shift towards their homes, so a pass still sees every
    /// key. At the end of a pass a shard under 1/5 full shrinks.
    void sweep(const Params& p, std::chrono::nanoseconds now, std::size_t n) {
      if (live() <= keep) {  // nothing to drop: only give back a large array
        if (old.capacity == 0 && sparse()) start_resize();
        return;
      }
      for (std::size_t i = sweep_at; i < sweep_at + n && i < cur.capacity; ++i)
        __builtin_prefetch(&cur.slots[i]);
      for (std::size_t drops = n; n > 0 && cur.capacity != 0;) {
        if (sweep_at >= cur.capacity) {
          sweep_at = 0;
          if (old.capacity == 0 && sparse()) start_resize();
          return;
        }
        Slot& s = cur.slots[sweep_at];
        if (load_tag(s) != 0 && live() > keep && fresh(p, s.state(), now)) {
          if (drops == 0) return;
          record_drop(p, key_tag(s), s.state());
          cur.erase_at(sweep_at);
          --drops;
        } else {
          ++sweep_at;
          --n;
        }
      }
    }

    void sweep_overflow(const Params& p, std::chrono::nanoseconds now, std::size_t n) {
      for (; n > 0 && !overflow.empty() && live() > keep; --n) {
        auto it = overflow.lower_bound(overflow_next);
        if (it == overflow.end()) it = overflow.begin();
        auto next = std::next(it);
        overflow_next = next == overflow.end() ? Hash128{} : next->first;
        if (fresh(p, it->second, now)) {
          record_drop(p, it->first.first, it->second);
          overflow.erase(it);
        }
      }
    }

    /// Notes that the key with `tag` and `state` (fresh under `p`) was dropped: it is decided no
    /// earlier than its model's `fresh_at`, and so is a key never seen that the filter cannot
    /// tell from it. The key's own time, never another key's: a request stamped far ahead on one
    /// key must not hold back the others (it once pinned them to the shard's latest time, 2^62
    /// after one out-of-range `now`).
    void record_drop(const Params& p, std::uint64_t tag, const State& state) {
      const auto fresh_at = M::fresh_at(p, state);
      if (!filter) filter = std::make_unique<std::uint64_t[]>(filter_words);
      if (filtered == filter_keys) {
        old_horizon = std::max(old_horizon, recent_horizon);
        std::fill_n(filter.get(), filter_words, 0);
        filtered = 0;
        recent_horizon = std::chrono::nanoseconds{0};
      }
      for (const std::size_t bit : filter_bits(tag))
        filter[bit / 64] |= std::uint64_t{1} << (bit % 64);
      ++filtered;
      recent_horizon = std::max(recent_horizon, fresh_at);
    }

    /// The time a key with hash `h`, not held, is decided no earlier than.
    std::chrono::nanoseconds pinned_time(std::uint64_t h) const noexcept {
      if (filtered == 0) return old_horizon;
      for (const std::size_t bit : filter_bits(h | 1))
        if (!(filter[bit / 64] >> (bit % 64) & 1)) return old_horizon;
      return std::max(old_horizon, recent_horizon);
    }

    /// Two bit positions from hash bits that neither the shard (low 6) nor the home (high)
    /// depend on.
    static std::array<std::size_t, 2> filter_bits(std::uint64_t tag) noexcept {
      return {static_cast<std::size_t>(tag >> 8) % 4096,
              static_cast<std::size_t>(tag >> 20) % 4096};
    }

    void erase(std::uint64_t tag, std::uint64_t check) {
      if (Slot* s = cur.find(tag, check)) {
        cur.erase_at(static_cast<std::size_t>(s - cur.slots));
      } else if (Slot* o = old.find(tag, check, migrate_at)) {
        clear(*o);
        store_tag(*o, moved);
        --old.size;
        finish_migration();
      } else if (!overflow.empty()) {
        const auto it = overflow.find(Hash128{tag, check});
        if (it != overflow.end()) overflow.erase(it);
      }
    }

    /// See Table::reclaim: chunks of `chunk` slots, the lock released between them.
    std::size_t reclaim(std::chrono::nanoseconds now) {
      std::size_t dropped = 0;
      std::size_t at = 0;
      // The array `at` indexes, by its number (`arrays`): a new array may reuse an earlier one's
      // block, so its address does not tell them apart.
      constexpr std::uint64_t none = ~std::uint64_t{0};
      std::uint64_t swept = none;
      int shrinks = 0;  // each shrink divides the slots by about chunk / 2: a few suffice
      for (;;) {
        std::lock_guard lock(mutex);
        if (!has_params) return dropped;
        const std::size_t before = live();
        if (old.capacity != 0) {
          migrate(params, now, chunk, 0);
        } else if (!overflow.empty() && swept == none) {
          // The overflow map first, whole (it only holds keys that found no slot).
          for (auto it = overflow.begin(); it != overflow.end();) {
            if (fresh(params, it->second, now)) {
              record_drop(params, it->first.first, it->second);
              it = overflow.erase(it);
            } else {
              ++it;
            }
          }
          swept = arrays;
          at = 0;
        } else if (swept != arrays || at < cur.capacity) {
          if (swept != arrays) {
            swept = arrays;
            at = 0;
          }
          for (std::size_t n = chunk; n > 0 && at < cur.capacity; --n) {
            Slot& s = cur.slots[at];
            if (load_tag(s) != 0 && fresh(params, s.state(), now)) {
              record_drop(params, key_tag(s), s.state());
              cur.erase_at(at);
            } else {
              ++at;
            }
          }
        } else if (shrinks < 4 && sparse()) {
          ++shrinks;
          start_resize(chunk);
          swept = arrays;
          at = cur.capacity;  // the new array holds only kept keys
        } else {
          dropped += before - live();
          return dropped;
        }
        dropped += before - live();
      }
    }
  };

  [[no_unique_address]] Hash hash_;
  const std::uint64_t id_ = table_ids.fetch_add(1, std::memory_order_relaxed) + 1;
  SingleState<M> single_;  ///< the empty key's
  std::array<Shard, shard_count> shards_;
};

}  // namespace ratelimit::detail
