#pragma once
/// @file rules/service.hpp
/// The rate limit service's core, as Envoy calls it: descriptor-list requests for any domain of
/// a `RulesConfig`, decided on one storage, with the configuration swapped atomically while
/// serving.
///
/// ```cpp
/// std::vector<std::filesystem::path> files = {"config/a.yaml", "config/b.yaml"};
/// ratelimit::RateLimitService<ratelimit::RedisStorage> service(
///     ratelimit::RulesConfig::from_files(files), ratelimit::RedisStorage(options));
/// auto r = service.should_rate_limit({"messaging",
///                                     {{{{"message_type", "marketing"}, {"to_number", n}}},
///                                      {{{"to_number", n}}}}});
/// service.reload(ratelimit::RulesConfig::from_files(files));  // e.g. on a file change
/// ```

#include <concepts>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../algorithms/registry.hpp"
#include "../core/clock.hpp"
#include "../core/completion.hpp"
#include "../core/listener.hpp"
#include "../memory/in_memory_storage.hpp"
#include "config.hpp"
#include "rule_set.hpp"
#include "rules.hpp"

namespace ratelimit {

/// Serves descriptor-list requests (`RuleSet::decide(const RateLimitRequest&)`) for every
/// domain of a `RulesConfig`, on one storage and clock (see `RuleSet` for `Storage`, `C` and
/// `Registry`).
///
/// Reload: `reload` builds the new configuration's rule sets beside the serving ones, then
/// swaps them in one step: every request is decided wholly under the old configuration or
/// wholly under the new one, never a mix. Counters live in the storage under each limit's
/// `Rule::id` (domain, descriptor path and unit), so a limit whose path and unit did not change
/// keeps its counts across a reload (its rate, name, algorithm parameters or flags may change:
/// a changed algorithm starts afresh, its state being another model's); any other limit starts
/// afresh, and the counters of removed limits expire in the storage.
/// Thread safety: `should_rate_limit`, `should_rate_limit_async`, `reload` and `config` are safe
/// from many threads.
template <class Storage = InMemoryStorage, Clock C = SystemClock, class Registry = Algorithms>
class RateLimitService {
  using Set = RuleSet<Storage, C, Registry>;

 public:
  /// Binds every domain's rules to `storage`. Throws `std::invalid_argument` as `RuleSet`'s
  /// constructor.
  explicit RateLimitService(RulesConfig config, Storage storage = {}, C clock = {})
      : storage_(std::move(storage)), clock_(std::move(clock)) {
    current_ = build(std::move(config), 1);
  }

  /// Decides `request` under the current configuration (see `RuleSet::decide(const
  /// RateLimitRequest&)`); a domain no file names matches nothing (admitted, every status "no
  /// limit"), as in the reference. Throws as that call.
  RateLimitResponse should_rate_limit(const RateLimitRequest& request) {
    const std::shared_ptr<const Snapshot> snap = snapshot();
    const auto it = snap->sets.find(request.domain);
    if (it == snap->sets.end()) {
      RateLimitResponse none;
      none.statuses.resize(request.descriptors.size());
      return none;
    }
    return it->second->decide(request);
  }

  /// `should_rate_limit` without blocking (see `RuleSet::decide_async(const RateLimitRequest&,
  /// F&&)`): `done(RateLimitResponse)` is called exactly once, on the storage's I/O thread or
  /// here before this returns. The request is decided under the configuration current when
  /// this is called, even if a reload swaps it before `done` runs.
  template <class F>
  requires std::invocable<F&, RateLimitResponse>
  void should_rate_limit_async(const RateLimitRequest& request, F&& done) {
    const std::shared_ptr<const Snapshot> snap = snapshot();
    const auto it = snap->sets.find(request.domain);
    if (it == snap->sets.end()) {
      RateLimitResponse none;
      none.statuses.resize(request.descriptors.size());
      auto complete = detail::make_completion<RateLimitResponse>(std::forward<F>(done));
      detail::complete_safely(complete, std::move(none));
      return;
    }
    it->second->decide_async(request, std::forward<F>(done));
  }

  /// Replaces the configuration atomically (see the class comment). The new rule sets are
  /// bound before the swap: if that throws (`std::invalid_argument`), the service keeps
  /// serving the old configuration unchanged. Returns the new generation (1 for the
  /// constructor's configuration, then +1 per reload).
  std::uint64_t reload(RulesConfig config) {
    std::uint64_t next = 0;
    {
      const std::lock_guard<std::mutex> lock(mu_);
      next = current_->generation + 1;
    }
    auto fresh = build(std::move(config), next);
    const std::lock_guard<std::mutex> lock(mu_);
    // The listeners as they are now (under the lock: an attach cannot slip between).
    for (const auto& [name, set] : fresh->sets)
      for (const auto& [listener, options] : listeners_) set->attach_listener(listener, options);
    // Two reloads racing: the later generation wins, whichever finishes building first.
    if (fresh->generation <= current_->generation) fresh = rebuild_generation(*fresh);
    current_ = std::move(fresh);
    return current_->generation;
  }

  /// Attaches a listener to every domain's rule set, now and after every reload (see
  /// `RuleSet::attach_listener`). Thread safety: safe from many threads, also while deciding.
  void attach_listener(std::shared_ptr<Listener> listener, ListenerOptions options = {}) {
    if (!listener) return;
    const std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, set] : current_->sets) set->attach_listener(listener, options);
    listeners_.emplace_back(std::move(listener), options);
  }

  /// Detaches every attachment of `listener`; returns whether it was attached.
  /// Thread safety: safe from many threads, also while deciding.
  bool detach_listener(const Listener& listener) {
    const std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, set] : current_->sets) set->detach_listener(listener);
    return std::erase_if(listeners_, [&](const auto& l) { return l.first.get() == &listener; }) > 0;
  }

  /// The configuration being served, and its generation.
  std::shared_ptr<const RulesConfig> config() const { return snapshot()->config; }
  std::uint64_t generation() const { return snapshot()->generation; }
  /// The storage handle.
  Storage& storage() noexcept { return storage_; }

 private:
  struct Snapshot {
    std::shared_ptr<const RulesConfig> config;
    std::unordered_map<std::string, std::shared_ptr<Set>> sets;
    std::uint64_t generation = 0;
  };

  std::shared_ptr<const Snapshot> snapshot() const {
    const std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }

  std::shared_ptr<const Snapshot> build(RulesConfig config, std::uint64_t generation) {
    auto snap = std::make_shared<Snapshot>();
    snap->generation = generation;
    snap->config = std::make_shared<const RulesConfig>(std::move(config));
    for (const Rules& rules : snap->config->domains())
      snap->sets.emplace(rules.domain(), std::make_shared<Set>(rules, storage_, clock_));
    return snap;
  }

  std::shared_ptr<const Snapshot> rebuild_generation(const Snapshot& s) const {
    auto copy = std::make_shared<Snapshot>(s);
    copy->generation = current_->generation + 1;
    return copy;
  }

  Storage storage_;
  C clock_;
  mutable std::mutex mu_;
  std::shared_ptr<const Snapshot> current_;
  std::vector<std::pair<std::shared_ptr<Listener>, ListenerOptions>> listeners_;  ///< under mu_
};

}  // namespace ratelimit
