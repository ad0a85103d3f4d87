#pragma once
/// @file memory/in_memory_storage.hpp
/// The embedded default storage: per-key state in this process's memory.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <typeindex>
#include <utility>

#include "../core/decision.hpp"
#include "../core/storage.hpp"

namespace ratelimit {

namespace detail {

__extension__ using HashWide = unsigned __int128;  // g++ and clang++ both have it

/// The high and low halves of a 64x64-bit product, folded: the mixing step of the key hash.
constexpr std::uint64_t fold_multiply(std::uint64_t a, std::uint64_t b) noexcept {
  const HashWide p = static_cast<HashWide>(a) * b;
  return static_cast<std::uint64_t>(p) ^ static_cast<std::uint64_t>(p >> 64);
}

inline std::uint64_t load_u64(const char* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline std::uint64_t load_u32(const char* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// A mutex for the shards' short critical sections (one decision: tens of ns). Free: one CAS to
/// take it and one exchange to leave it, inline (std::mutex costs two calls into libc on top).
/// Held: a short spin, since the holder is about to leave, then a futex wait through
/// `std::atomic::wait`, so a holder that was preempted costs its waiters no CPU (with more
/// threads than cores, pure spinning would burn the time the holder needs to finish).
/// Thread safety: it is the synchronization; satisfies Lockable's lock/unlock.
class ShardLock {
 public:
  void lock() noexcept {
    std::uint32_t expected = free_;
    if (!state_.compare_exchange_strong(expected, held_, std::memory_order_acquire,
                                        std::memory_order_relaxed))
      lock_contended();
  }

  void unlock() noexcept {
    if (state_.exchange(free_, std::memory_order_release) == waited_) state_.notify_one();
  }

 private:
  static constexpr std::uint32_t free_ = 0, held_ = 1, waited_ = 2;
  static constexpr int spins_ = 100;

  static void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  void lock_contended() noexcept {
    for (int i = 0; i < spins_; ++i) {
      relax();
      std::uint32_t expected = free_;
      if (state_.load(std::memory_order_relaxed) == free_ &&
          state_.compare_exchange_weak(expected, held_, std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return;
    }
    // Mark the lock as waited on, so that the holder's unlock wakes one of us; whoever takes it
    // this way keeps the mark (it cannot know whether others still wait), costing at most one
    // spare wake-up.
    while (state_.exchange(waited_, std::memory_order_acquire) != free_)
      state_.wait(waited_, std::memory_order_relaxed);
  }

  std::atomic<std::uint32_t> state_{free_};
};

/// Byte equality of two ranges of `n` bytes, inline with 8-byte words for the short keys that
/// live in a slot (a call to memcmp cost more than the compare).
inline bool equal_bytes(const char* a, const char* b, std::size_t n) noexcept {
  if (n >= 8) {
    for (std::size_t i = 0; i + 8 < n; i += 8)
      if (load_u64(a + i) != load_u64(b + i)) return false;
    return load_u64(a + n - 8) == load_u64(b + n - 8);
  }
  if (n >= 4) return load_u32(a) == load_u32(b) && load_u32(a + n - 4) == load_u32(b + n - 4);
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

/// A 64-bit hash of arbitrary bytes, inline (std::hash is an out-of-line call and was hashed
/// twice per decision), 16 bytes per multiply. `seed` differs per table, so that a set of keys
/// that collide in one process does not collide in the next.
inline std::uint64_t hash_key(std::string_view key, std::uint64_t seed) noexcept {
  constexpr std::uint64_t k0 = 0x9e3779b97f4a7c15, k1 = 0xd1b54a32d192ed03, k2 = 0x8cb92ba72f3d8dd7;
  const char* p = key.data();
  std::size_t n = key.size();
  std::uint64_t h = seed ^ (n * k0);
  std::uint64_t a = 0, b = 0;
  if (n > 16) {
    for (; n > 16; n -= 16, p += 16) h = fold_multiply(load_u64(p) ^ k1, load_u64(p + 8) ^ h);
    // The last 16 bytes (overlapping what the loop read: harmless, the length is mixed in).
    a = load_u64(p + n - 16);
    b = load_u64(p + n - 8);
  } else if (n > 8) {
    a = load_u64(p);
    b = load_u64(p + n - 8);
  } else if (n >= 4) {
    a = load_u32(p);
    b = load_u32(p + n - 4);
  } else if (n > 0) {
    a = (std::uint64_t{static_cast<unsigned char>(p[0])} << 16) |
        (std::uint64_t{static_cast<unsigned char>(p[n / 2])} << 8) |
        static_cast<unsigned char>(p[n - 1]);
  }
  return fold_multiply(fold_multiply(a ^ k1, b ^ h) ^ k2, h ^ k0);
}

/// One model's keys for one limiter name, split into independently locked shards so that
/// threads deciding different keys rarely contend.
///
/// Each shard is an open-addressing table (linear probing, backward-shift deletion) of slots
/// that hold the key's hash, the key itself when it is short, and the model's state: for the
/// 16- and 24-byte states a slot is exactly one 64-byte cache line, so a decision on a key that
/// is not in cache costs one memory access (a node-based map costs three: bucket, the node
/// before, the node). Longer keys live on the heap, one more access when the hash matches.
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

  Decision apply(const typename M::Params& p, std::string_view key, std::chrono::nanoseconds now,
                 const Operation& op) {
    const std::uint64_t h = hash_key(key, seed_);
    Shard& shard = shards_[h % shard_count];
    const std::uint64_t tag = h | 1;  // 0 marks an empty slot
    std::lock_guard lock(shard.mutex);
    if (Slot* s = shard.find(tag, key)) return M::apply(p, s->state, now, op);
    // A key seen before may have been dropped as fresh at `horizon`: decide no earlier than that,
    // as if it had kept its state, so a clock that steps back never revives spent capacity.
    const auto t = now < shard.horizon ? shard.horizon : now;
    State fresh{};
    const Decision d = M::apply(p, fresh, t, op);
    if (!M::is_fresh(p, fresh, t)) shard.insert(p, t, tag, key, std::move(fresh));
    return d;
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

}  // namespace detail

/// Keeps every key's state in this process (the embedded default).
///
/// A handle: copies share the same tables, so one storage serves many limiters; limiters of
/// different algorithms or names never see each other's keys. Keys are arbitrary bytes.
/// Memory is bounded by the active keys: a key back to its fresh state is dropped during an
/// amortized sweep of its shard (no background thread), which never changes a decision: a
/// dropped key is decided no earlier than the sweep's time, the latest time it was known at.
/// Per key it costs one table slot: 64 bytes (one cache line) holding the hash, the key if it is
/// at most 28 bytes (36 for the fixed window) and the algorithm's state (`sizeof(Model::State)`:
/// 16 or 24 bytes for the buckets and counters). The sliding log's 56-byte state takes a larger
/// slot (28 + 56 + 12 = 96 bytes) and its log 16 bytes per entry on the heap. Longer keys add a
/// heap copy (their length + 8 bytes). Tables are kept 8/15 to 4/5 full, so with 64-byte slots
/// resident memory is about 80 to 120 bytes per key (measured: 95 at 1,000,000 keys).
/// Thread safety: every member is safe from many threads; each decision runs under its key's
/// shard lock.
class InMemoryStorage {
 public:
  /// An empty storage.
  InMemoryStorage() : registry_(std::make_shared<Registry>()) {}

  /// The binding of model `M` under limiter name `name`: every binding with the same `M` and
  /// `name` shares one table. Never throws for valid params.
  template <Model M>
  auto bind(std::string_view name, const typename M::Params& params) {
    return BindingOf<M>{registry_->template table<M>(name), params};
  }

  /// Keys currently held, over every algorithm and name (for monitoring and tests).
  std::size_t size() const { return registry_->size(); }

  /// A model bound to one table and one set of parameters; see `ratelimit::Binding`.
  template <Model M>
  struct BindingOf {
    std::shared_ptr<detail::Table<M>> table;
    typename M::Params params;

    Decision apply(std::string_view key, std::chrono::nanoseconds now, const Operation& op) {
      return table->apply(params, key, now, op);
    }
    void reset(std::string_view key) { table->reset(key); }
  };

 private:
  struct Registry {
    /// One table of some model, type-erased, with the function that counts its keys.
    struct Entry {
      std::shared_ptr<void> table;
      std::size_t (*size)(const void* table);
    };

    std::mutex mutex;
    std::map<std::pair<std::type_index, std::string>, Entry> tables;

    template <Model M>
    std::shared_ptr<detail::Table<M>> table(std::string_view name) {
      std::lock_guard lock(mutex);
      Entry& e = tables[{std::type_index(typeid(M)), std::string(name)}];
      if (!e.table) {
        e.table = std::make_shared<detail::Table<M>>();
        e.size = [](const void* t) { return static_cast<const detail::Table<M>*>(t)->size(); };
      }
      return std::static_pointer_cast<detail::Table<M>>(e.table);
    }

    std::size_t size() {
      std::lock_guard lock(mutex);
      std::size_t n = 0;
      for (const auto& [id, e] : tables) n += e.size(e.table.get());
      return n;
    }
  };

  std::shared_ptr<Registry> registry_;
};

}  // namespace ratelimit
