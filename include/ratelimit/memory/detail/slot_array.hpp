#pragma once
/// @file memory/detail/slot_array.hpp
/// A table shard's open-addressing array: slots of {tag, state, check}, linear probing within
/// `max_probe_slots` of a key's home, backward-shift deletion, and the tag protocol that lets a
/// decision take one slot without its shard's lock (see Table::enter_fast).

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>
#include <utility>

#include "hash.hpp"
#include "shard_lock.hpp"
#include "zeroed_block.hpp"

namespace ratelimit::detail {

/// Bytes of a cache line (what a prefetch fetches, what an array's header fills).
inline constexpr std::size_t cache_line = 64;
/// A decision without the shard's lock holds this bit of its slot's tag (see Table::enter_fast).
inline constexpr std::uint64_t slot_lock_bit = 2;
/// The tag of an old array's slot already migrated by a resize.
inline constexpr std::uint64_t slot_moved = 4;
/// The most slots a key sits from its home (and a lookup reads in one array).
inline constexpr std::size_t max_probe_slots = 64;
/// Every array starts with one line holding its capacity, so that a lock-free decision
/// holding only the array's address (`Shard::published`) reads a capacity that matches it.
inline constexpr std::size_t array_header_bytes = cache_line;

/// A key's tag: its first hash word with bit 0 set (0 marks an empty slot) and the lock bit
/// clear. Bits 0 and 1 carry nothing: every key of a shard has the same low 6 bits.
constexpr std::uint64_t tag_of(Hash128 h) noexcept { return (h.first | 1) & ~slot_lock_bit; }

/// One key's slot: tag, state, check (see Table's comment). The state is constructed only while
/// the slot is occupied, so a zeroed array is a valid empty one (and fresh pages need no
/// writing).
template <class State>
struct Slot {
  /// A key's tag, possibly with slot_lock_bit; 0: empty; `slot_moved`: migrated. Always accessed
  /// as an atomic (tag_ref): lock-free decisions read and take it without the shard's lock.
  std::uint64_t tag;
  alignas(State) unsigned char state_bytes[sizeof(State)];
  std::uint64_t check;  ///< second hash word

  /// The state, for a holder of the shard's lock: waits until no lock-free decision holds the
  /// slot (see Table::enter_fast). An empty slot has no state to wait for.
  State& state() noexcept {
    for (int spins = 0; tag_ref(*this).load(std::memory_order_seq_cst) & slot_lock_bit; ++spins)
      back_off(spins);
    return held_state();
  }
  /// The state, for the holder of the slot's lock bit.
  State& held_state() noexcept { return *std::launder(reinterpret_cast<State*>(state_bytes)); }

  friend std::atomic_ref<std::uint64_t> tag_ref(Slot& s) noexcept {
    return std::atomic_ref<std::uint64_t>(s.tag);
  }
};

/// The tag as last stored, lock bit included (relaxed: what it guards is read only after a
/// CAS or under the shard's lock).
template <class State>
std::uint64_t load_tag(const Slot<State>& s) noexcept {
  return tag_ref(const_cast<Slot<State>&>(s)).load(std::memory_order_relaxed);
}
/// The key's tag without the lock bit (for the holder of the shard's lock).
template <class State>
std::uint64_t key_tag(const Slot<State>& s) noexcept {
  return load_tag(s) & ~slot_lock_bit;
}
/// Publishes a tag (release: the slot's check and state are written first), for the holder
/// of the shard's lock, once no lock-free decision holds the slot's bit. A decision may take
/// the bit after the lock holder last waited for it (`Slot::state`); overwriting the bit then
/// would let that decision, had it not yet read the shard's lock, find the lock released
/// and decide on a slot emptied or reused meanwhile (its own key's tag written back into an
/// empty slot, or a state changed beside another decision's). Waiting keeps its bit until it
/// has seen the lock held and backed off.
template <class State>
void store_tag(Slot<State>& s, std::uint64_t tag) noexcept {
  for (int spins = 0;; ++spins) {
    std::uint64_t expected = key_tag(s);
    if (tag_ref(s).compare_exchange_weak(expected, tag, std::memory_order_release,
                                         std::memory_order_relaxed))
      return;
    back_off(spins);
  }
}
/// Publishes the tag of an empty slot (0 or `slot_moved`: no lock-free decision takes their bit).
template <class State>
void store_empty_slot_tag(Slot<State>& s, std::uint64_t tag) noexcept {
  tag_ref(s).store(tag, std::memory_order_release);
}

/// The slot a tag starts probing from in an array of `capacity` slots: the tag scaled to
/// [0, capacity) by a multiply, so the capacity need not be a power of two.
inline std::size_t home_slot(std::uint64_t tag, std::size_t capacity) noexcept {
  return static_cast<std::size_t>((static_cast<HashWide>(tag) * capacity) >> 64);
}

/// The capacity word in the header line before the first slot.
template <class State>
std::atomic_ref<std::uint64_t> capacity_ref(const Slot<State>* slots) noexcept {
  auto* header = reinterpret_cast<const std::uint64_t*>(
      reinterpret_cast<const unsigned char*>(slots) - array_header_bytes);
  return std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(header));
}
/// The capacity of the array starting at `slots` (read without the shard's lock).
template <class State>
std::size_t capacity_of(const Slot<State>* slots) noexcept {
  return static_cast<std::size_t>(capacity_ref(slots).load(std::memory_order_relaxed));
}

/// Fills the empty slot `s` with a key's hash and state.
template <class State>
void fill(Slot<State>& s, std::uint64_t tag, std::uint64_t check, State&& state) {
  ::new (static_cast<void*>(s.state_bytes)) State(std::move(state));
  s.check = check;
  store_empty_slot_tag(s, tag);
}

/// Empties an occupied slot's state, leaving the tag to the caller.
template <class State>
void clear(Slot<State>& s) noexcept {
  s.state().~State();
}

/// Moves the hash and state of occupied `from` into empty `to`; `from` is left without a
/// state, its tag to the caller.
template <class State>
void move_slot(Slot<State>& to, Slot<State>& from) noexcept {
  ::new (static_cast<void*>(to.state_bytes)) State(std::move(from.state()));
  from.state().~State();
  to.check = from.check;
  store_tag(to, key_tag(from));
}

/// A zero-filled array of slots (ZeroedBlock: a mapping of its own from a page up, its pages
/// untouched until keys land in them, given back to the kernel when freed).
/// Thread safety: for the holder of its shard's lock; lock-free decisions only take a slot's
/// bit (Table::enter_fast).
template <class State>
struct SlotArray {
  using Slot = detail::Slot<State>;
  static_assert(std::is_trivially_destructible_v<Slot>);

  ZeroedBlock block;
  Slot* slots = nullptr;
  std::size_t capacity = 0;
  std::size_t size = 0;  ///< occupied slots

  SlotArray() = default;
  /// `n` slots in `b` (zeroed, at least bytes_for(n) bytes), the header written.
  SlotArray(ZeroedBlock&& b, std::size_t n) : block(std::move(b)) {
    slots = reinterpret_cast<Slot*>(static_cast<unsigned char*>(block.data()) + array_header_bytes);
    capacity = n;
    capacity_ref(slots).store(n, std::memory_order_relaxed);
  }
  static std::size_t bytes_for(std::size_t n) noexcept {
    return array_header_bytes + n * sizeof(Slot);
  }
  SlotArray(SlotArray&& o) noexcept
      : block(std::move(o.block)),
        slots(std::exchange(o.slots, nullptr)),
        capacity(std::exchange(o.capacity, 0)),
        size(std::exchange(o.size, 0)) {}
  SlotArray& operator=(SlotArray&& o) noexcept {
    if (this != &o) {
      release();
      block = std::move(o.block);
      slots = std::exchange(o.slots, nullptr);
      capacity = std::exchange(o.capacity, 0);
      size = std::exchange(o.size, 0);
    }
    return *this;
  }
  ~SlotArray() { release(); }

  /// Frees the block; occupied slots are emptied first (none once a migration is done).
  void release() noexcept {
    if (size > 0)
      for (std::size_t i = 0; i < capacity; ++i)
        if (load_tag(slots[i]) & 1) clear(slots[i]);
    block.reset();
    slots = nullptr;
    capacity = size = 0;
  }

  std::size_t home(std::uint64_t tag) const noexcept { return home_slot(tag, capacity); }

  std::size_t probe_limit() const noexcept { return std::min(max_probe_slots, capacity); }

  /// The slot holding the key of hash (tag, check), or null: at most max_probe_slots read,
  /// `slot_moved` ones skipped, and so are the slots below `moved_below` without reading them
  /// (an old array's migrated prefix, whose pages may have been given back: they read as empty).
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

  /// An empty slot within max_probe_slots of the tag's home, or null.
  Slot* free_slot(std::uint64_t tag) noexcept {
    std::size_t i = home(tag);
    for (std::size_t n = probe_limit(); n > 0; --n) {
      if (load_tag(slots[i]) == 0) return &slots[i];
      if (++i == capacity) i = 0;
    }
    return nullptr;
  }

  /// Empties slot `hole`, shifting back the keys that probed past it so that no lookup needs
  /// a tombstone (and every key stays within max_probe_slots of its home: keys only move
  /// closer).
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

}  // namespace ratelimit::detail
