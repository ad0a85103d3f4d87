#pragma once
/// @file redis/detail/over_limit_cache.hpp
/// The over-limit cache: what Redis last said about keys it denied, so that this instance
/// answers their next requests itself (RedisOptions::over_limit_cache).
///
/// This file is the container, blind to models: a bounded, sharded map from (binding, client
/// key) to a type-erased cached state, and the "one request at a time asks Redis" rule for a
/// key whose cached state would admit. A binding (redis/over_limit.hpp) decides with the model
/// on the cached state, so the cache's answers are the model's: a denial answered here is the
/// denial Redis would give if nothing else had happened to the key (others' spending only makes
/// Redis deny more), and nothing is ever admitted here.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../../core/decision.hpp"
#include "../../memory/detail/hash.hpp"

namespace ratelimit::detail {

/// A cached state; OverLimit<M> (redis/over_limit.hpp) knows its real type (a key's entry is only
/// ever read by bindings of one model: the binding's key tail names the algorithm).
struct CachedState {
  virtual ~CachedState() = default;
};

/// Which entry: the binding's Redis key tail (algorithm and limiter name) and the client key.
/// `tail` is kept for messages and debugging; the tail's hash identifies it.
struct CacheKey {
  std::string_view tail;
  std::string_view key;
  std::uint64_t tail_hash;  ///< `OverLimitCache::tail_hash(tail)`, computed once per binding
};

/// Thread safety: every member is safe from many threads. Waiters (see `lookup`) run on the
/// thread that settles the probe they waited for, after its shard's lock is released.
class OverLimitCache {
 public:
  /// What `lookup` found.
  enum class Found {
    none,   ///< no usable entry: ask Redis
    hit,    ///< a denial, answered from the cache
    probe,  ///< the cached state would admit: the caller asks Redis for the key, alone, and
            ///< must then call `learn` or `release` with probe = true
    wait,   ///< another request is asking Redis for this key: `waiter` runs when it is back
  };

  /// Keys longer than this are never cached, so the cache's memory stays bounded by its
  /// capacity whatever the keys (at most max_key_size + about 300 bytes per entry).
  static constexpr std::size_t max_key_size = 256;

  /// `capacity` entries at most (0: nothing is cached).
  explicit OverLimitCache(std::size_t capacity) : capacity_(capacity) {}

  /// What a cached state says about one request.
  enum class Verdict {
    deny,     ///< denied, exactly (the decision is filled in)
    admit,    ///< it would admit: Redis must decide, one request per key at a time
    unknown,  ///< it cannot tell (another cost, other parameters, too late): ask Redis freely
  };

  /// Looks `k` up. `eval(const CachedState&, Decision&)` gives the state's `Verdict` on the
  /// request (filling in the decision when it denies). When another request is asking Redis
  /// for the key and the state would admit, `make_waiter()` gives what to run once that
  /// request is back (called under the shard's lock, so it must only allocate); an empty
  /// function gives `none` (the caller cannot wait: an I/O thread).
  /// `may_probe` false (a dry run, whose answer changes nothing to wait for): a state that
  /// would admit gives `none`.
  template <class Eval, class MakeWaiter>
  Found lookup(const CacheKey& k, Eval&& eval, Decision& out, MakeWaiter&& make_waiter,
               bool may_probe = true) {
    if (capacity_ == 0 || k.key.size() > max_key_size) return Found::none;
    const std::uint64_t h = hash(k);
    Shard& s = shard_of(h);
    std::lock_guard lock(s.mutex);
    // A flooded key is looked up again and again: the shard's last hit goes first (skipping
    // the table's modulo and bucket chase).
    Entry* found = s.last != nullptr && s.last_key->hash == h && Equal::same(*s.last_key, k)
                       ? s.last
                       : nullptr;
    if (found == nullptr) {
      const auto it = s.map.find(Probe{h, k});
      if (it == s.map.end()) return Found::none;
      found = &it->second;
      s.last = found;
      s.last_key = &it->first;
    }
    Entry& e = *found;
    const Verdict v = eval(*e.state, out);
    if (v == Verdict::unknown || (v == Verdict::admit && !may_probe)) return Found::none;
    if (v == Verdict::deny) {
      // Under the shard's lock: a plain store, not a locked add, on the hot path.
      s.hits.store(s.hits.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return Found::hit;
    }
    if (e.probing) {
      std::function<void()> waiter = make_waiter();
      if (!waiter) return Found::none;
      e.waiters.push_back(std::move(waiter));
      return Found::wait;
    }
    e.probing = true;
    return Found::probe;
  }

  /// Records what Redis said about `k`: `state` (null: forget the key), exact until `expires`
  /// (on the cache's time line: the entry may be dropped for room after it). `create`: insert
  /// the key if absent. `probe`: the caller was the key's probe (its waiters are released).
  /// `now` (the same time line) lets expired entries make room first.
  void learn(const CacheKey& k, std::unique_ptr<CachedState> state, std::int64_t expires,
             bool create, bool probe, std::int64_t now) {
    with_entry(k, [&](Shard& s, Iterator it, std::uint64_t h, Woken& woken) {
      if (it == s.map.end()) {
        if (state != nullptr && create) insert(s, h, k, std::move(state), expires, now, woken);
        return;
      }
      Entry& e = it->second;
      // A reply that was not the probe's must not take the entry from under the probe.
      if (state == nullptr && (!e.probing || probe)) {
        woken = std::move(e.waiters);
        erase(s, it);
        return;
      }
      if (state != nullptr) {
        e.state = std::move(state);
        s.by_expiry.erase(e.by_expiry);
        e.by_expiry = s.by_expiry.emplace(expires, &it->first);
      }
      if (probe) {
        e.probing = false;
        woken = std::move(e.waiters);
      }
    });
  }

  /// The probe of `k` ended without an answer (Redis failed): its waiters go on by themselves.
  void release(const CacheKey& k) {
    with_entry(k, [](Shard& s, Iterator it, std::uint64_t, Woken& woken) {
      if (it == s.map.end()) return;
      it->second.probing = false;
      woken = std::move(it->second.waiters);
    });
  }

  /// Forgets `k` (a reset through this instance); its waiters go on.
  void forget(const CacheKey& k) { learn(k, nullptr, 0, false, true, 0); }

  /// Forgets every key.
  void clear() {
    for (Shard& s : shards_) {
      std::vector<std::function<void()>> woken;
      {
        std::lock_guard lock(s.mutex);
        for (auto& [key, e] : s.map)
          for (auto& w : e.waiters) woken.push_back(std::move(w));
        size_.fetch_sub(s.map.size(), std::memory_order_relaxed);
        s.last = nullptr;
        s.map.clear();
        s.by_expiry.clear();
      }
      for (auto& w : woken) run(w);
    }
  }

  /// What a binding keeps to name its keys: its tail's share of every key's hash.
  std::uint64_t tail_hash(std::string_view tail) const noexcept {
    return hash_(tail) * 0x9e3779b97f4a7c15ULL;
  }

  /// Decisions answered from the cache so far.
  std::uint64_t hits() const noexcept {
    std::uint64_t n = 0;
    for (const Shard& s : shards_) n += s.hits.load(std::memory_order_relaxed);
    return n;
  }
  /// Keys held now.
  std::uint64_t size() const noexcept { return size_.load(std::memory_order_relaxed); }

 private:
  static constexpr std::size_t shard_count = 16;

  /// A key as stored: the client key's bytes, the tail's hash standing for the tail (tails are
  /// the library's, never a client's: a collision of two of one process's 64-bit keyed hashes
  /// is not a risk worth a second compare), and the whole key's hash.
  struct StoredKey {
    std::string bytes;
    std::uint64_t tail_hash;
    std::uint64_t hash;
  };
  /// A key looked up (no copy).
  struct Probe {
    std::uint64_t hash;
    CacheKey key;
  };
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(const StoredKey& k) const noexcept { return k.hash; }
    std::size_t operator()(const Probe& k) const noexcept { return k.hash; }
  };
  struct Equal {
    using is_transparent = void;
    static bool same(const StoredKey& a, const CacheKey& b) noexcept {
      return a.tail_hash == b.tail_hash && a.bytes.size() == b.key.size() &&
             equal_bytes(a.bytes.data(), b.key.data(), b.key.size());
    }
    bool operator()(const StoredKey& a, const StoredKey& b) const noexcept {
      return a.tail_hash == b.tail_hash && a.bytes == b.bytes;
    }
    bool operator()(const StoredKey& a, const Probe& b) const noexcept { return same(a, b.key); }
    bool operator()(const Probe& a, const StoredKey& b) const noexcept { return same(b, a.key); }
  };
  struct Entry {
    std::unique_ptr<CachedState> state;
    std::multimap<std::int64_t, const StoredKey*>::iterator by_expiry;
    bool probing = false;
    std::vector<std::function<void()>> waiters;
  };
  struct Shard {
    std::mutex mutex;
    std::unordered_map<StoredKey, Entry, Hash, Equal> map;
    std::multimap<std::int64_t, const StoredKey*> by_expiry;  ///< soonest first
    std::atomic<std::uint64_t> hits{0};                       ///< written under `mutex`
    Entry* last = nullptr;  ///< the last entry found (null after it is erased)
    const StoredKey* last_key = nullptr;
  };
  using Iterator = std::unordered_map<StoredKey, Entry, Hash, Equal>::iterator;

  /// The client key's keyed hash (flooding-resistant: see memory/detail/hash.hpp), mixed with
  /// the tail's, which the client does not choose.
  std::uint64_t hash(const CacheKey& k) const noexcept { return hash_(k.key) ^ k.tail_hash; }
  Shard& shard_of(std::uint64_t h) noexcept { return shards_[h >> 60]; }

  using Woken = std::vector<std::function<void()>>;

  /// Runs `f(shard, k's entry or end, k's hash, woken)` under the shard's lock, then the
  /// waiters `f` put in `woken`, after the lock is released (they may look the key up again).
  template <class F>
  void with_entry(const CacheKey& k, F&& f) {
    if (capacity_ == 0 || k.key.size() > max_key_size) return;
    Woken woken;
    {
      const std::uint64_t h = hash(k);
      Shard& s = shard_of(h);
      std::lock_guard lock(s.mutex);
      f(s, s.map.find(Probe{h, k}), h, woken);
    }
    for (auto& w : woken) run(w);
  }

  /// `counted` false: the caller keeps the key's place in the count (see insert).
  void erase(Shard& s, Iterator it, bool counted = true) {
    if (s.last == &it->second) s.last = nullptr;
    s.by_expiry.erase(it->second.by_expiry);
    s.map.erase(it);
    if (counted) size_.fetch_sub(1, std::memory_order_acq_rel);
  }

  /// Inserts under the shard's lock: this shard's expired entries leave first; when the cache
  /// is full, the shard's entry that ends first leaves if it ends before the new one (else the
  /// new one is not kept). The count is reserved before inserting, so `capacity` holds across
  /// shards.
  void insert(Shard& s, std::uint64_t h, const CacheKey& k, std::unique_ptr<CachedState> state,
              std::int64_t expires, std::int64_t now, Woken& woken) {
    const auto drop_first = [&](bool counted) {
      const auto it = s.map.find(*s.by_expiry.begin()->second);  // always there: kept in step
      for (auto& w : it->second.waiters) woken.push_back(std::move(w));
      erase(s, it, counted);
    };
    // At most a few per insert, so an insert's work stays bounded.
    for (int i = 0; i < 4 && !s.by_expiry.empty() && s.by_expiry.begin()->first <= now; ++i)
      drop_first(true);
    if (size_.fetch_add(1, std::memory_order_acq_rel) >= capacity_) {
      size_.fetch_sub(1, std::memory_order_acq_rel);
      if (s.by_expiry.empty() || s.by_expiry.begin()->first >= expires) return;
      drop_first(false);  // its place in the count passes to the new key
    }
    auto [it, inserted] = s.map.try_emplace(StoredKey{std::string(k.key), k.tail_hash, h}, Entry{});
    it->second.state = std::move(state);
    it->second.by_expiry = s.by_expiry.emplace(expires, &it->first);
    if (!inserted) size_.fetch_sub(1, std::memory_order_acq_rel);  // not reached: k was absent
  }

  static void run(std::function<void()>& f) noexcept {
    try {
      f();
    } catch (...) {  // a waiter is a decision's continuation: its own errors are its own
    }
  }

  const std::size_t capacity_;
  SipKeyHash hash_;
  std::array<Shard, shard_count> shards_;
  std::atomic<std::uint64_t> size_{0};
};

/// Releases a key's probe unless dismissed: a probe that ends by an exception must not leave
/// its waiters waiting. Thread safety: one thread.
class ProbeGuard {
 public:
  /// Guards `key`'s probe in `cache` (null: nothing to guard).
  ProbeGuard(OverLimitCache* cache, const CacheKey& key) noexcept : cache_(cache), key_(key) {}
  ~ProbeGuard() {
    if (cache_ != nullptr) cache_->release(key_);
  }
  ProbeGuard(const ProbeGuard&) = delete;
  ProbeGuard& operator=(const ProbeGuard&) = delete;
  /// The probe is settled elsewhere.
  void dismiss() noexcept { cache_ = nullptr; }

 private:
  OverLimitCache* cache_;
  CacheKey key_;
};

}  // namespace ratelimit::detail
