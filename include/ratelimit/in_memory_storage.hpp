#pragma once
/// @file in_memory_storage.hpp
/// The embedded default storage: per-key state in this process's memory.

#include <array>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <typeindex>
#include <unordered_map>
#include <utility>

#include "decision.hpp"
#include "storage.hpp"

namespace ratelimit {

namespace detail {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

/// One model's keys for one limiter name, split into independently locked shards so that
/// threads deciding different keys rarely contend.
template <Model M>
class Table {
 public:
  static constexpr std::size_t shard_count = 64;
  /// A shard is swept once it holds this many keys, then whenever it has doubled since.
  static constexpr std::size_t min_sweep = 64;

  Decision apply(const typename M::Params& p, std::string_view key, std::chrono::nanoseconds now,
                 const Operation& op) {
    const std::size_t h = StringHash{}(key);
    Shard& shard = shards_[h % shard_count];
    std::lock_guard lock(shard.mutex);
    if (const auto it = shard.map.find(key); it != shard.map.end())
      return M::apply(p, it->second, now, op);
    // A key seen before may have been dropped as fresh at `horizon`: decide no earlier than that,
    // as if it had kept its state, so a clock that steps back never revives spent capacity.
    const auto t = now < shard.horizon ? shard.horizon : now;
    typename M::State fresh{};
    const Decision d = M::apply(p, fresh, t, op);
    if (!M::is_fresh(p, fresh, t)) {
      if (shard.map.size() >= shard.sweep_at) sweep(p, shard, t);
      shard.map.emplace(std::string(key), std::move(fresh));
    }
    return d;
  }

  void reset(std::string_view key) {
    Shard& shard = shards_[StringHash{}(key) % shard_count];
    std::lock_guard lock(shard.mutex);
    if (const auto it = shard.map.find(key); it != shard.map.end()) shard.map.erase(it);
  }

  std::size_t size() const {
    std::size_t n = 0;
    for (const Shard& shard : shards_) {
      std::lock_guard lock(shard.mutex);
      n += shard.map.size();
    }
    return n;
  }

 private:
  struct alignas(64) Shard {
    mutable std::mutex mutex;
    std::unordered_map<std::string, typename M::State, StringHash, std::equal_to<>> map;
    std::size_t sweep_at = min_sweep;
    std::chrono::nanoseconds horizon{0};
  };

  // Amortized O(1) per insert: a shard is scanned only after it doubled, so memory stays within
  // about twice the keys that are not yet back to fresh, with no background thread.
  static void sweep(const typename M::Params& p, Shard& shard, std::chrono::nanoseconds now) {
    bool dropped = false;
    for (auto it = shard.map.begin(); it != shard.map.end();) {
      if (M::is_fresh(p, it->second, now)) {
        it = shard.map.erase(it);
        dropped = true;
      } else {
        ++it;
      }
    }
    if (dropped && shard.horizon < now) shard.horizon = now;
    shard.sweep_at = shard.map.size() * 2 > min_sweep ? shard.map.size() * 2 : min_sweep;
  }

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
/// Per key it costs the algorithm's state (`sizeof(Model::State)`, 16 to 24 bytes; the sliding
/// log adds 16 bytes per distinct admitted timestamp) plus the key's bytes and the hash node.
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
    std::mutex mutex;
    std::map<std::pair<std::type_index, std::string>, std::shared_ptr<void>> tables;
    std::map<std::pair<std::type_index, std::string>, std::function<std::size_t()>> sizes;

    template <Model M>
    std::shared_ptr<detail::Table<M>> table(std::string_view name) {
      std::lock_guard lock(mutex);
      auto& slot = tables[{std::type_index(typeid(M)), std::string(name)}];
      if (!slot) {
        auto t = std::make_shared<detail::Table<M>>();
        sizes[{std::type_index(typeid(M)), std::string(name)}] = [raw = t.get()] {
          return raw->size();
        };
        slot = t;
      }
      return std::static_pointer_cast<detail::Table<M>>(slot);
    }

    std::size_t size() {
      std::lock_guard lock(mutex);
      std::size_t n = 0;
      for (const auto& [id, f] : sizes) n += f();
      return n;
    }
  };

  std::shared_ptr<Registry> registry_;
};

}  // namespace ratelimit
