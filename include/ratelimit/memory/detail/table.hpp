#pragma once
/// @file memory/detail/table.hpp
/// One model's keys for one limiter name: a sharded open-addressing table.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>

#include "../../core/decision.hpp"
#include "../../core/storage.hpp"
#include "hash.hpp"
#include "shard_lock.hpp"

namespace ratelimit::detail {

template <Model M>
class Table {
  using State = typename M::State;

 public:
  static constexpr std::size_t shard_count = 64;
  /// A shard is swept once it holds this many keys, then whenever it has doubled since.
  static constexpr std::size_t min_sweep = 64;
  /// The smallest table a shard allocates (slots).
  static constexpr std::size_t min_capacity = 8;

  Table()
      : seed_(fold_multiply(reinterpret_cast<std::uintptr_t>(this) ^ 0x6a09e667f3bcc909,
                            static_cast<std::uint64_t>(
                                std::chrono::steady_clock::now().time_since_epoch().count()) |
                                1)) {}
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;

  /// Decides `key` under its shard's lock.
  Decision apply(const typename M::Params& p, std::string_view key, std::chrono::nanoseconds now,
                 const Operation& op) {
    const std::uint64_t h = hash_key(key, seed_);
    Shard& shard = shards_[h % shard_count];
    std::lock_guard lock(shard.mutex);
    return decide_in(shard, h, p, key, now, op);
  }

  /// The lock that guards `key`'s slot: what `InMemoryStorage::decide_all` takes, in address
  /// order, before it calls `apply_locked` on several keys.
  ShardLock& lock_of(std::string_view key) noexcept {
    return shards_[hash_key(key, seed_) % shard_count].mutex;
  }

  /// Decides `key`; the caller holds `lock_of(key)`.
  Decision apply_locked(const typename M::Params& p, std::string_view key,
                        std::chrono::nanoseconds now, const Operation& op) {
    const std::uint64_t h = hash_key(key, seed_);
    return decide_in(shards_[h % shard_count], h, p, key, now, op);
  }

  void reset(std::string_view key) {
    const std::uint64_t h = hash_key(key, seed_);
    Shard& shard = shards_[h % shard_count];
    std::lock_guard lock(shard.mutex);
    shard.erase(h | 1, key);
  }

  std::size_t size() const {
    std::size_t n = 0;
    for (const Shard& shard : shards_) {
      std::lock_guard lock(shard.mutex);
      n += shard.size;
    }
    return n;
  }

 private:
  struct Shard;

  Decision decide_in(Shard& shard, std::uint64_t h, const typename M::Params& p,
                     std::string_view key, std::chrono::nanoseconds now, const Operation& op) {
    const std::uint64_t tag = h | 1;  // 0 marks an empty slot
    if (Slot* s = shard.find(tag, key)) return M::apply(p, s->state, now, op);
    // A key seen before may have been dropped as fresh at `horizon`: decide no earlier than that,
    // as if it had kept its state, so a clock that steps back never revives spent capacity.
    const auto t = now < shard.horizon ? shard.horizon : now;
    State fresh{};
    const Decision d = M::apply(p, fresh, t, op);
    if (!M::is_fresh(p, fresh, t)) shard.insert(p, t, tag, key, std::move(fresh));
    return d;
  }

  // Slot layout: tag (8 bytes), key length (4), key bytes or a heap pointer, state. The inline
  // key room is what is left of a 64-byte line (28 bytes for a 24-byte state: an IPv4 address,
  // a UUID's hex without dashes, a typical user id), and at least 20 bytes for larger states.
  static constexpr std::size_t line = 64;
  static constexpr std::size_t header = sizeof(std::uint64_t) + sizeof(std::uint32_t);
  static constexpr std::size_t fits_line = line - header - sizeof(State);
  static constexpr std::size_t room_unaligned =
      sizeof(State) + header + 20 <= line ? fits_line : 28;
  static constexpr std::size_t inline_room =
      room_unaligned - (header + room_unaligned) % alignof(State);
  static constexpr std::size_t slot_align =
      header + inline_room + sizeof(State) <= line ? line : alignof(State);
  static constexpr std::uint32_t spilled_length = 0xffffffff;

  struct alignas(slot_align) Slot {
    std::uint64_t tag = 0;     ///< the key's hash with bit 0 set; 0: empty
    std::uint32_t length = 0;  ///< key bytes if <= inline_room, else spilled_length
    char bytes[inline_room];   ///< the key, or (spilled) a pointer to [size_t length][bytes]
    State state{};
  };
  static_assert(inline_room >= sizeof(char*) + 8, "a slot must hold at least a heap pointer");

  static const char* spilled(const Slot& s) noexcept {
    const char* heap;
    std::memcpy(&heap, s.bytes, sizeof heap);
    return heap;
  }

  static bool key_equals(const Slot& s, std::string_view key) noexcept {
    const std::size_t n = key.size();
    if (n <= inline_room) return s.length == n && equal_bytes(s.bytes, key.data(), n);
    if (s.length != spilled_length) return false;
    const char* heap = spilled(s);
    std::size_t stored;
    std::memcpy(&stored, heap, sizeof stored);
    return stored == n && std::memcmp(heap + sizeof stored, key.data(), n) == 0;
  }

  static void store_key(Slot& s, std::string_view key) {
    const std::size_t n = key.size();
    if (n <= inline_room) {
      if (n > 0) std::memcpy(s.bytes, key.data(), n);
      s.length = static_cast<std::uint32_t>(n);
      return;
    }
    char* heap = new char[sizeof n + n];
    std::memcpy(heap, &n, sizeof n);
    std::memcpy(heap + sizeof n, key.data(), n);
    std::memcpy(s.bytes, &heap, sizeof heap);
    s.length = spilled_length;
  }

  static void free_key(Slot& s) noexcept {
    if (s.length == spilled_length) delete[] spilled(s);
  }

  /// Moves the key and state of `from` into the empty slot `to` (ownership of a spilled key
  /// moves too); `from` is left to be cleared or overwritten by the caller.
  static void move_slot(Slot& to, Slot& from) noexcept {
    to.tag = from.tag;
    to.length = from.length;
    std::memcpy(to.bytes, from.bytes, inline_room);
    to.state = std::move(from.state);
  }

  struct alignas(64) Shard {
    mutable ShardLock mutex;
    std::unique_ptr<Slot[]> slots;
    std::size_t capacity = 0;
    std::size_t size = 0;
    std::size_t sweep_at = min_sweep;  ///< sweep when an insert finds this many keys
    std::chrono::nanoseconds horizon{0};

    Shard() = default;
    Shard(const Shard&) = delete;
    Shard& operator=(const Shard&) = delete;
    ~Shard() {
      for (std::size_t i = 0; i < capacity; ++i)
        if (slots[i].tag != 0) free_key(slots[i]);
    }

    /// The slot a tag starts probing from: the tag scaled to [0, capacity) by a multiply, so
    /// the capacity need not be a power of two.
    std::size_t home(std::uint64_t tag) const noexcept {
      return static_cast<std::size_t>((static_cast<HashWide>(tag) * capacity) >> 64);
    }

    Slot* find(std::uint64_t tag, std::string_view key) noexcept {
      if (size == 0) return nullptr;
      for (std::size_t i = home(tag);;) {
        Slot& s = slots[i];
        if (s.tag == tag && key_equals(s, key)) return &s;
        if (s.tag == 0) return nullptr;
        if (++i == capacity) i = 0;
      }
    }

    /// Adds `key` (known to be absent), first sweeping (see `sweep_at`) or growing the table if
    /// it would pass 4/5 full.
    void insert(const typename M::Params& p, std::chrono::nanoseconds t, std::uint64_t tag,
                std::string_view key, State&& state) {
      if (size >= sweep_at)
        rebuild(p, t, true);
      else if ((size + 1) * 5 > capacity * 4)
        rebuild(p, t, false);
      std::size_t i = home(tag);
      while (slots[i].tag != 0)
        if (++i == capacity) i = 0;
      Slot& s = slots[i];
      store_key(s, key);
      s.tag = tag;
      s.state = std::move(state);
      ++size;
    }

    // Re-lays the keys in a table 15/8 their number (plus the key being added), i.e. 8/15 full:
    // 1.5x the room when the table filled up to 4/5.
    // With `sweep`, first drops every key back to fresh at `t`. That never changes a decision: a
    // dropped key is decided no earlier than `horizon`, the latest time it was known at. A shard
    // is swept once it holds `min_sweep` keys, then whenever it has doubled since, so the sweeps
    // cost amortized O(1) per insert, memory stays within about twice the keys that are not yet
    // back to fresh (the table shrinks when most keys were dropped), and no background thread
    // is needed.
    void rebuild(const typename M::Params& p, std::chrono::nanoseconds t, bool sweep) {
      std::size_t live = size;
      if (sweep) {
        bool dropped = false;
        for (std::size_t i = 0; i < capacity; ++i) {
          Slot& s = slots[i];
          if (s.tag == 0 || !M::is_fresh(p, s.state, t)) continue;
          free_key(s);
          s.tag = 0;
          --live;
          dropped = true;
        }
        if (dropped && horizon < t) horizon = t;
        sweep_at = std::max(min_sweep, live * 2);
      }
      const std::size_t new_capacity = std::max(min_capacity, (live + 1) * 15 / 8 + 1);
      std::unique_ptr<Slot[]> old = std::exchange(slots, std::make_unique<Slot[]>(new_capacity));
      const std::size_t old_capacity = std::exchange(capacity, new_capacity);
      for (std::size_t i = 0; i < old_capacity; ++i) {
        Slot& from = old[i];
        if (from.tag == 0) continue;
        std::size_t j = home(from.tag);
        while (slots[j].tag != 0)
          if (++j == capacity) j = 0;
        move_slot(slots[j], from);
      }
      size = live;
    }

    /// Removes `key` if present, shifting back the keys that probed past it so that no lookup
    /// needs a tombstone.
    void erase(std::uint64_t tag, std::string_view key) noexcept {
      Slot* s = find(tag, key);
      if (s == nullptr) return;
      std::size_t hole = static_cast<std::size_t>(s - slots.get());
      free_key(*s);
      for (std::size_t j = hole;;) {
        if (++j == capacity) j = 0;
        Slot& next = slots[j];
        if (next.tag == 0) break;
        const std::size_t h = home(next.tag);
        // `next` may fill the hole only if its home is not cyclically within (hole, j].
        const bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
        if (stays) continue;
        move_slot(slots[hole], next);
        hole = j;
      }
      Slot& last = slots[hole];
      last.tag = 0;
      last.length = 0;
      last.state = State{};
      --size;
    }
  };

  std::uint64_t seed_;
  std::array<Shard, shard_count> shards_;
};

}  // namespace ratelimit::detail
