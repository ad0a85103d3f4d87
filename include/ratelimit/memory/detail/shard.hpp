#pragma once
/// @file memory/detail/shard.hpp
/// One of a table's 64 shards: its lock, its slot arrays (a resize's old and new), the overflow
/// map of keys that found no slot, the sweep that drops fresh keys, and the drop filter that
/// pins a dropped key to the time it became fresh.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "../../core/storage.hpp"
#include "hash.hpp"
#include "shard_lock.hpp"
#include "slot_array.hpp"
#include "zeroed_block.hpp"

namespace ratelimit::detail {

/// The sizes and cadences of a table and its shards (see Table's comment for what they bound).
struct TableConstants {
  static constexpr std::size_t shard_count = 64;
  /// The smallest array a shard allocates (slots).
  static constexpr std::size_t min_capacity = 8;
  /// The most slots a key sits from its home (and a lookup reads in one array).
  static constexpr std::size_t max_probe = max_probe_slots;
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
  /// Slots per lock hold in `reclaim` and in the pace's sweeps.
  static constexpr std::size_t chunk = 1024;
  /// The most pacing work one decision does (Table::pace), in units: a slot or overflow entry
  /// examined (a slot examined again after a drop counts again), and one per shard step
  /// begun. In lock holds of at most `chunk` slots; a step left unfinished resumes at the next
  /// decision.
  static constexpr std::size_t pace_budget = 4 * chunk;
  /// A shard holding at most this many keys is not swept (`reclaim` ignores it): so a small
  /// table never forgets, and decides exactly as if no key were ever dropped even when the
  /// clock steps back.
  static constexpr std::size_t keep = 8;
  /// The time bound on a dead key (Table::pace): every pace_step of the decisions' clock, one
  /// step of sweeping a shard whole, in turn (spread over decisions, pace_budget units each),
  /// so every shard is swept once per pace_period = shard_count x pace_step plus the
  /// decisions that work takes, whatever the traffic on it.
  static constexpr std::chrono::nanoseconds pace_period = std::chrono::minutes{10};
  static constexpr std::chrono::nanoseconds pace_step = pace_period / shard_count;  // 9.375 s
  /// The drop filter: its bits, in 64-bit words, and the drops it holds before it is cleared.
  static constexpr std::size_t filter_words = 4096 / 64;
  static constexpr std::size_t filter_keys = 512;
};

/// Where the table's pace stands in the shard it is sweeping: the pace sweeps a shard over
/// several decisions (each does at most `pace_budget` units), so it resumes from here.
struct PaceCursor {
  static constexpr std::uint64_t none = ~std::uint64_t{0};
  std::uint64_t array = none;  ///< `Shard::arrays` of the array `at` indexes (none: not begun)
  std::size_t at = 0;          ///< the next `cur` slot to examine
  Hash128 overflow_at;         ///< the next overflow entry (the first hash >= it)
  bool overflow_done = false;  ///< the overflow map was swept
  bool shrunk = false;         ///< a shrink was started (once per step)
};

/// One shard of a `Table<M>`. Thread safety: every member is for the holder of `mutex`, but
/// `quiet` and `published` (read without it: hints) and the slots' tags (Table::enter_fast).
template <Model M>
struct alignas(64) Shard : TableConstants {
  using State = typename M::State;
  using Params = typename M::Params;
  using Array = SlotArray<State>;
  using Slot = typename Array::Slot;

  /// Whether `s` decides like a fresh state from `now` on, so that it may be dropped.
  static bool fresh(const Params& p, const State& s, std::chrono::nanoseconds now) noexcept {
    return M::fresh_at(p, s) <= now;
  }

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
  bool sparse() const noexcept { return cur.capacity > min_capacity && live() * 5 < cur.capacity; }

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
    if (best == spares.end()) return Array(ZeroedBlock(bytes, cache_line), n);
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
      const std::size_t n = (old.block.size() - array_header_bytes) / sizeof(Slot);
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
      store_tag(s, slot_moved);
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
    return {static_cast<std::size_t>(tag >> 8) % 4096, static_cast<std::size_t>(tag >> 20) % 4096};
  }

  void erase(std::uint64_t tag, std::uint64_t check) {
    if (Slot* s = cur.find(tag, check)) {
      cur.erase_at(static_cast<std::size_t>(s - cur.slots));
    } else if (Slot* o = old.find(tag, check, migrate_at)) {
      clear(*o);
      store_tag(*o, slot_moved);
      --old.size;
      finish_migration();
    } else if (!overflow.empty()) {
      const auto it = overflow.find(Hash128{tag, check});
      if (it != overflow.end()) overflow.erase(it);
    }
  }

  /// See Table::reclaim: chunks of `chunk` slots, the lock released between them. Drops keys
  /// only while the shard holds more than `floor` (0 for reclaim; `keep` for the table's pace,
  /// which must not make a small shard forget).
  std::size_t reclaim(std::chrono::nanoseconds now, std::size_t floor = 0) {
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
        migrate(params, now, chunk, floor);
      } else if (!overflow.empty() && swept == none) {
        // The overflow map first, whole (it only holds keys that found no slot).
        for (auto it = overflow.begin(); it != overflow.end();) {
          if (live() > floor && fresh(params, it->second, now)) {
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
          if (load_tag(s) != 0 && live() > floor && fresh(params, s.state(), now)) {
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

  /// One lock hold of the table's pace step over this shard (see Table::pace): at most
  /// min(`budget`, chunk) units (a slot or overflow entry examined), taken from `budget`. In
  /// order: the rest of a resize, the overflow map, every `cur` slot (a slot examined again
  /// after a drop counts again), then one shrink if the shard is sparse, whose move is the
  /// first part again. Drops keys fresh at `now` while the shard holds more than `floor`.
  /// Returns true once the step is done; `c` is where the next call resumes.
  bool pace_slice(PaceCursor& c, std::chrono::nanoseconds now, std::size_t floor,
                  std::size_t& budget) {
    std::lock_guard lock(mutex);
    if (!has_params) return true;  // never decided: nothing held
    std::size_t n = std::min(budget, chunk);
    budget -= n;
    const bool done = pace_work(c, now, floor, n);
    budget += n;  // what was left
    return done;
  }

  /// pace_slice's work under the lock, `n` units at most (spent from `n`).
  bool pace_work(PaceCursor& c, std::chrono::nanoseconds now, std::size_t floor, std::size_t& n) {
    for (;;) {
      if (old.capacity != 0) {
        if (n == 0) return false;
        const std::size_t k = std::min(n, old.capacity - migrate_at);
        migrate(params, now, k, floor);
        finish_migration();
        n -= k;
      } else if (!c.overflow_done) {
        auto it = overflow.lower_bound(c.overflow_at);
        for (; n > 0 && it != overflow.end(); --n) {
          if (live() > floor && fresh(params, it->second, now)) {
            record_drop(params, it->first.first, it->second);
            it = overflow.erase(it);
          } else {
            ++it;
          }
        }
        if (it != overflow.end()) {
          c.overflow_at = it->first;
          return false;
        }
        c.overflow_done = true;
      } else if (c.array != arrays || c.at < cur.capacity) {
        if (c.array != arrays) {
          // The pass begins, or a resize began since it did: the migration just finished (the
          // first branch) examined every key the pass had not, dropping the fresh ones, and
          // the new array holds only keys that were not fresh when moved, or inserted since.
          c.at = c.array == PaceCursor::none ? 0 : cur.capacity;
          c.array = arrays;
        }
        for (; n > 0 && c.at < cur.capacity; --n) {
          Slot& s = cur.slots[c.at];
          if (load_tag(s) != 0 && live() > floor && fresh(params, s.state(), now)) {
            record_drop(params, key_tag(s), s.state());
            cur.erase_at(c.at);
          } else {
            ++c.at;
          }
        }
        if (c.at < cur.capacity) return false;
      } else if (!c.shrunk && sparse()) {
        c.shrunk = true;
        start_resize(chunk);
        c.array = arrays;
        c.at = cur.capacity;  // the new array holds only kept keys
      } else {
        return true;
      }
    }
  }
};

}  // namespace ratelimit::detail
