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
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <typeindex>
#include <utility>
#include <vector>

#include "../core/decision.hpp"
#include "../core/storage.hpp"

#include "detail/table.hpp"

namespace ratelimit {

/// Keeps every key's state in this process (the embedded default).
///
/// A handle: copies share the same tables, so one storage serves many limiters; limiters of
/// different algorithms or names never see each other's keys. Keys are arbitrary bytes.
///
/// Hashing: keys are hashed with SipHash-1-3 under a 128-bit secret drawn from
/// `std::random_device` once per process (and perturbed per table), so nobody who does not know
/// the secret can choose keys that collide (hash flooding). The table keeps a key's 128-bit
/// SipHash output instead of the key: two distinct keys share a state only if all 128 bits
/// collide, about n^2 / 2^129 among n keys (1e-25 for 10 million) and not to be aimed at
/// without the secret (detail/table.hpp). Should the 64 bits that place a key collide anyway, a
/// key sits at most `Table::max_probe` (64) slots from its home and the rest go to an ordered
/// map: a decision costs at most 64 slot reads plus O(log n) comparisons of hashes, and every
/// operation holds its shard's lock for bounded work (resizes move 64 slots per operation). The
/// empty key (a limiter with a single state) is not hashed: its state sits beside the shards,
/// with its own lock in its cache line, is decided without that lock once it counts as a key
/// (detail/single_state.hpp), and is never swept. A limiter's `try_acquire` hashes its
/// key and starts fetching the slot before it reads the clock (`locate`), so that over many keys
/// the clock read overlaps the memory latency.
///
/// Memory follows the active keys, with no background thread: every decision under a shard's
/// lock sweeps 2 slots of its shard (one of 64) on average (16 slots every 8th decision, their
/// lines fetched together; also every 8th decision of a thread, so that lock-free decisions
/// sweep too, unless their shard holds at most 8 keys and has no resize or shrink due) and drops up
/// to as many keys back to their fresh state, and a shard under 1/5 full after a pass shrinks. A
/// key that became fresh is thus dropped within (C + K) / 2 (+ 8) decisions under its shard's lock,
/// whatever the insert rate (an insert takes the lock): C the shard's slots (under twice its keys
/// plus resize room), K the keys dropped on the way (K < 7/10 C). Every 8th sweep of a shard also
/// sweeps 64 slots of a shard that had no decision under its lock since, so a table whose traffic
/// moved elsewhere also gives memory back. Arrays a resize emptied are kept, their pages given
/// back, for later arrays of the same shard (a lock-free decision may still read one): address
/// space, not memory, up to a few times the largest. A shard holding at most 8 keys is not swept.
/// Dead keys also go within a stated time and number of decisions, whatever the traffic on their
/// shard: a key whose state is fresh from t (its model's `fresh_at`: the bucket full again, the
/// window over) is no longer held once the first keyed decision on its table (any key, any
/// shard, any thread; `decide_all` included) stamped at or after t + 10 minutes
/// (`detail::Table::pace_period`) and the L - 1 after it have returned, unless its shard holds
/// at most 8 keys; L is about one decision per 650 keys the table holds (exactly: see
/// detail/table.hpp; about 1,600 for 1,100,000 keys in 1.8 M slots). For that, every 9.375 s of the
/// decisions' clock one of the 64 shards is due to be swept whole, in turn; while a sweep is due,
/// each keyed decision does at most 4096 slots' worth of it (`detail::Table::pace_budget`, in lock
/// holds of at most 1024 slots; measured at most 0.15 ms of CPU, where catching up a whole
/// 1,100,000-key table in one decision took 35 ms), and otherwise only reads one word and
/// compares. A decision that finds another thread pacing goes on without waiting. This holds
/// for a clock that never steps back by more than 10 minutes (SteadyClock never does); see
/// detail/table.hpp for the argument. Explicit times far out of order (alternating more than 10
/// minutes apart) cost at most one lap of pacing work per 10 minutes of the earlier times, never
/// a sweep per decision; clamp untrusted ones all the same, since the later times drive the
/// schedule.
/// With no decision at all nothing runs (there is no thread): a service that may go quiet calls
/// `reclaim(SteadyClock{}.now())` from a timer, say every 10 minutes, and a key fresh at t is
/// gone after the first call with `now` >= t (docs/inprocess.md).
/// `reclaim(now)` drops every fresh key at once (for a service gone idle). Dropping never changes a
/// decision at or after the time the key became fresh (the model's `fresh_at`, the key's own
/// time); one stamped before it, by a clock that steps back, is decided at that time, so it cannot
/// revive spent capacity. A key that never had state is decided at its own time (but for a shard's
/// drop filter's false positives, see detail/table.hpp).
///
/// Per key it costs one table slot, whatever the key's length: the two hash words (16 bytes)
/// and the algorithm's state (`sizeof(Model::State)`): 32 bytes for the 16-byte states of the
/// buckets, the fixed window and the sliding counter; the sliding log's
/// 56-byte state takes 72 bytes and its log 16 bytes per entry on the heap. Arrays are kept
/// 1/5 to 7/10 full (about 0.56 after a growing resize). Slot arrays are mappings of their own,
/// given back to the kernel when freed, and a resize gives back the old array's pages as it
/// empties it, so at most about 1.3 times the new array is resident meanwhile. Measured at
/// 1,000,000 keys of 14 bytes (bench/inprocess_bench, MillionKeys, 3 interleaved runs), resident
/// bytes per key: 49 to 51 for the buckets, the fixed window and the sliding counter, 138 to
/// 140 for the sliding log at one entry per key; `std::unordered_map<std::string,
/// bucket>`, reserved, 89 in the same runs. That figure is read right after the millionth
/// insert; read every 5,000 inserts on the way, a token bucket's table with 40-byte slots peaked
/// at 77 (during resizes).
///
/// Atomicity (the multi-key protocol): a key's state changes either under its shard's lock or,
/// for a single-key decision on a key already held (all algorithms but the sliding log), under
/// a lock bit in its slot, taken with one compare-and-swap while the shard's lock is free: such
/// a decision backs off to the shard's lock if it finds it held, and whoever holds the shard's
/// lock waits for a slot's bit to clear before it reads or moves that slot (both sequentially
/// consistent, so one of the two always sees the other). With two threads on one key, only
/// the slot's cache line then moves between their cores. Every 8th decision of a thread, and
/// every insert, takes the shard's lock and does the shard's upkeep (the sweeps below).
/// `decide_all` takes the locks of all its keys' shards, each once, in ascending address order
/// (so two decisions never wait for each other in a cycle), dry-runs every part, commits them
/// only if all admit, then releases: no lock-free decision runs on its keys meanwhile. Sweeping
/// another shard only try-locks it. No other table or lock is involved, so a limiter and a rule
/// set may decide the same counter.
/// Thread safety: every member is safe from many threads.
class InMemoryStorage {
 public:
  /// Refunds and penalties reach the model unchanged, under the key's lock (`AdjustingStorage`).
  static constexpr bool adjusts = true;

  /// An empty storage.
  InMemoryStorage() : registry_(std::make_shared<Registry>()) {}

  /// One part of an all-or-nothing decision (see `MultiKeyStorage`), made by a binding's
  /// `part(key, op)`: it refers to the binding and the key, which must outlive `decide_all`.
  struct Part {
    /// How to reach the binding's table without knowing its model.
    struct Ops {
      detail::ShardLock& (*lock_of)(const void* binding, std::string_view key);
      Decision (*apply_locked)(const void* binding, std::string_view key,
                               std::chrono::nanoseconds now, const Operation& op);
      const void* (*table)(const void* binding);
      /// The table's time-bound sweep (detail::Table::pace), called with no lock held.
      void (*pace)(const void* binding, std::chrono::nanoseconds now);
    };
    const Ops* ops;
    const void* binding;
    std::string_view key;
    Operation op;
  };

  /// The binding of model `M` under limiter name `name`: every binding with the same `M` and
  /// `name` shares one table. Throws `std::invalid_argument` naming the field for `params` out
  /// of the model's range (`M::check_params`; the limiters' constructors check them first).
  template <Model M>
  auto bind(std::string_view name, const typename M::Params& params) {
    check_params<M>(params);
    return BindingOf<M>{registry_->template table<M>(name), params};
  }

  /// Decides every part at `now`, all or nothing (see `MultiKeyStorage` and the class comment).
  /// Throws `std::invalid_argument` if `out` is shorter than `parts` or a key appears twice.
  bool decide_all(std::span<const Part> parts, std::chrono::nanoseconds now,
                  std::span<Decision> out) {
    check_parts(parts, out.size());
    std::vector<detail::ShardLock*> locks;
    locks.reserve(parts.size());
    for (const Part& p : parts) locks.push_back(&p.ops->lock_of(p.binding, p.key));
    std::sort(locks.begin(), locks.end(), std::less<>{});
    locks.erase(std::unique(locks.begin(), locks.end()), locks.end());
    const bool all = decide_locked(parts, locks, now, out);
    // With the locks released: a due step of the time-bound sweep takes shard locks itself.
    for (const Part& p : parts) p.ops->pace(p.binding, now);
    return all;
  }

  /// Keys currently held, over every algorithm and name (for monitoring and tests).
  std::size_t size() const { return registry_->stats().keys; }

  /// Keys, slots and bytes of slot arrays held, over every algorithm and name.
  detail::TableStats stats() const { return registry_->stats(); }

  /// Drops now every key that is back to its fresh state at `now` (the limiters' clock reading,
  /// e.g. `SteadyClock{}.now()`), finishes resizes and shrinks sparse tables: memory is then
  /// what the keys not yet fresh need. For a service gone idle, where no decision sweeps. Each
  /// shard is locked for at most 1024 slots at a time, so decisions go on meanwhile. Freshness
  /// is judged with the parameters of a recent decision of each shard (the limiter's, unless
  /// `with_params` varies them). Returns the number of keys dropped. Never throws but
  /// `std::bad_alloc`.
  /// Thread safety: safe from many threads, concurrently with decisions.
  std::size_t reclaim(std::chrono::nanoseconds now) { return registry_->reclaim(now); }

  /// A model bound to one table and one set of parameters; see `ratelimit::Binding`.
  template <Model M>
  struct BindingOf {
    using Model = M;
    std::shared_ptr<detail::Table<M>> table;
    typename M::Params params;

    Decision apply(std::string_view key, std::chrono::nanoseconds now, const Operation& op) const {
      return table->apply(params, key, now, op);
    }
    /// Hashes `key` and starts fetching its slot, without waiting for it: the limiter calls it
    /// before reading the clock, so that the clock read overlaps the memory latency of a key
    /// not in cache. The empty key (a limiter with one state) is not hashed: it has its own state.
    detail::KeyHash locate(std::string_view key) const noexcept { return table->locate(key); }
    /// `apply` for a key already located (`at` = `locate(key)`).
    Decision apply(const detail::KeyHash& at, std::string_view key, std::chrono::nanoseconds now,
                   const Operation& op) const {
      return table->apply(params, at, key, now, op);
    }
    /// `with_params(p).apply(at, key, now, op)` without building that binding: a decision that
    /// carries its own parameters (the limiters' per-key parameters) takes no reference count.
    /// Throws as `with_params`, before anything changes.
    Decision apply_with(const typename M::Params& p, const detail::KeyHash& at,
                        std::string_view key, std::chrono::nanoseconds now,
                        const Operation& op) const {
      check_params<M>(p);
      return table->apply(p, at, key, now, op);
    }
    void reset(std::string_view key) const { table->reset(key); }
    /// The part of an all-or-nothing decision; `tag` is ignored (one process holds every key).
    Part part(std::string_view key, const Operation& op, std::string_view /*tag*/ = {}) const {
      return Part{&ops, this, key, op};
    }
    /// The same table decided with other parameters; throws `std::invalid_argument` naming the
    /// field for parameters out of the model's range (as `bind`): a state kept for parameters
    /// in range (a sliding counter's 32-bit counts) would misread beyond it.
    BindingOf with_params(const typename M::Params& p) const {
      check_params<M>(p);
      return BindingOf{table, p};
    }

   private:
    static const BindingOf& self(const void* b) { return *static_cast<const BindingOf*>(b); }
    static constexpr Part::Ops ops{
        [](const void* b, std::string_view key) -> detail::ShardLock& {
          return self(b).table->lock_of(key);
        },
        [](const void* b, std::string_view key, std::chrono::nanoseconds now, const Operation& op) {
          return self(b).table->apply_locked(self(b).params, key, now, op);
        },
        [](const void* b) -> const void* { return self(b).table.get(); },
        [](const void* b, std::chrono::nanoseconds now) { self(b).table->pace(now); }};
  };

 private:
  /// `M::check_params(p)` for the models that have one.
  template <Model M>
  static void check_params(const typename M::Params& p) {
    if constexpr (requires { M::check_params(p); }) M::check_params(p);
  }

  /// `decide_all`'s decisions, under all of `locks` (released even if a decision throws).
  static bool decide_locked(std::span<const Part> parts,
                            const std::vector<detail::ShardLock*>& locks,
                            std::chrono::nanoseconds now, std::span<Decision> out) {
    const LockAll held(locks);
    bool all = true;
    if (parts.size() > 1) {
      for (std::size_t i = 0; i < parts.size(); ++i) {
        Operation dry = parts[i].op;
        dry.peek = true;
        out[i] = parts[i].ops->apply_locked(parts[i].binding, parts[i].key, now, dry);
        all = all && out[i].allowed;
      }
    }
    // Under the locks nothing can have moved these keys since the dry runs, so each commit
    // admits as its dry run did.
    if (all)
      for (std::size_t i = 0; i < parts.size(); ++i) {
        if (parts.size() > 1 && parts[i].op.peek) continue;
        out[i] = parts[i].ops->apply_locked(parts[i].binding, parts[i].key, now, parts[i].op);
        all = all && out[i].allowed;
      }
    return all;
  }

  static void check_parts(std::span<const Part> parts, std::size_t out_size) {
    if (out_size < parts.size())
      throw std::invalid_argument("decide_all: out has " + std::to_string(out_size) +
                                  " decisions for " + std::to_string(parts.size()) + " parts");
    const auto table = [&](std::size_t i) { return parts[i].ops->table(parts[i].binding); };
    const auto same = [&](std::size_t i, std::size_t j) {
      if (table(i) != table(j) || parts[i].key != parts[j].key) return;
      throw std::invalid_argument("decide_all: parts " + std::to_string(j) + " and " +
                                  std::to_string(i) + " name the same key");
    };
    // A few parts (a limiter composition, a rule set's matches): every pair, no allocation.
    // More (a descriptor-list request of thousands): sorted by (table, key, position), two
    // parts on one key are neighbours, O(n log n); every pair took 2 s for 16,000 parts.
    constexpr std::size_t pairwise = 16;
    if (parts.size() <= pairwise) {
      for (std::size_t i = 0; i < parts.size(); ++i)
        for (std::size_t j = 0; j < i; ++j) same(i, j);
      return;
    }
    std::vector<std::size_t> order(parts.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      if (table(a) != table(b)) return std::less<>{}(table(a), table(b));
      if (parts[a].key != parts[b].key) return parts[a].key < parts[b].key;
      return a < b;
    });
    for (std::size_t k = 1; k < order.size(); ++k) same(order[k], order[k - 1]);
  }

  /// Holds a sorted set of shard locks for one `decide_all` (released even if a decision throws,
  /// e.g. bad_alloc while a table grows).
  class LockAll {
   public:
    explicit LockAll(const std::vector<detail::ShardLock*>& locks) : locks_(locks) {
      for (detail::ShardLock* l : locks_) l->lock();
    }
    ~LockAll() {
      for (auto it = locks_.rbegin(); it != locks_.rend(); ++it) (*it)->unlock();
    }
    LockAll(const LockAll&) = delete;
    LockAll& operator=(const LockAll&) = delete;

   private:
    const std::vector<detail::ShardLock*>& locks_;
  };

  struct Registry {
    /// One table of some model, type-erased, with the functions that need its type.
    struct Entry {
      std::shared_ptr<void> table;
      detail::TableStats (*stats)(const void* table);
      std::size_t (*reclaim)(void* table, std::chrono::nanoseconds now);
    };

    std::mutex mutex;
    std::map<std::pair<std::type_index, std::string>, Entry> tables;

    template <Model M>
    std::shared_ptr<detail::Table<M>> table(std::string_view name) {
      std::lock_guard lock(mutex);
      Entry& e = tables[{std::type_index(typeid(M)), std::string(name)}];
      if (!e.table) {
        e.table = std::make_shared<detail::Table<M>>();
        e.stats = [](const void* t) { return static_cast<const detail::Table<M>*>(t)->stats(); };
        e.reclaim = [](void* t, std::chrono::nanoseconds now) {
          return static_cast<detail::Table<M>*>(t)->reclaim(now);
        };
      }
      return std::static_pointer_cast<detail::Table<M>>(e.table);
    }

    /// The tables, copied out so that no table's work runs under the registry's lock.
    std::vector<Entry> entries() {
      std::lock_guard lock(mutex);
      std::vector<Entry> out;
      out.reserve(tables.size());
      for (const auto& [id, e] : tables) out.push_back(e);
      return out;
    }

    detail::TableStats stats() {
      detail::TableStats total;
      for (const Entry& e : entries()) {
        const detail::TableStats s = e.stats(e.table.get());
        total.keys += s.keys;
        total.overflow += s.overflow;
        total.slots += s.slots;
        total.bytes += s.bytes;
        total.largest_shard = std::max(total.largest_shard, s.largest_shard);
        total.pace_work += s.pace_work;
        total.pace_most = std::max(total.pace_most, s.pace_most);
        total.pace_decisions += s.pace_decisions;
      }
      return total;
    }

    std::size_t reclaim(std::chrono::nanoseconds now) {
      std::size_t n = 0;
      for (const Entry& e : entries()) n += e.reclaim(e.table.get(), now);
      return n;
    }
  };

  std::shared_ptr<Registry> registry_;
};

}  // namespace ratelimit
