#pragma once
/// @file rules/rule_set.hpp
/// `RuleSet`: rules bound to a storage and a clock, deciding requests under every limit that
/// applies (every applying limit must admit; a denial by one consumes nothing from the others).
/// One engine, the descriptor-list one (`decide(const RateLimitRequest&)`); the flat request
/// (`decide(entries)`) is decided as the descriptor list `Rules::descriptors_of` makes of it.
///
/// ## Atomicity
/// `RuleSet::decide` hands the limits that apply to the storage's `decide_all`, each with its
/// hits (in the flat form, the request's cost): all admit and spend, or nothing changes
/// anywhere; shadow- and quota-mode limits that deny are dropped and the rest decided again,
/// where the reference service counts every descriptor even when another is over its limit. The
/// storage is the unit of atomicity (in process: the counters' shard locks, taken in a fixed order;
/// on Redis: one script), so a rule set is atomic with respect to every other decision on its
/// counters, a limiter's included. On Redis Cluster a request's keys must share a slot: per-client
/// limits share the client's hash tag (`RuleMatch::tag`); a request that also matches a shared
/// limit spans slots and is decided by the failure policy (degraded). See docs/cluster.md.
///
/// ## Lockouts
/// A rule with `block_duration` (`Rule::block_duration`) keeps `Lockout`'s lock beside each of
/// its counters (a one-token bucket named the rule's id + "/lockout" on the same storage). A
/// request with such a rule makes one storage call before its rounds (each such counter's lock
/// and a peek of its limit, all in one `decide_all` of dry runs): a counter found locked takes
/// no part in the rounds and is decided as the lock's denial (`DescriptorStatus::locked`,
/// `remaining` 0, `retry_after` the lock's time left), denying the request as its limit would
/// (shadow: dropped; quota: counted as a quota denial). After the rounds, each such counter that
/// its limit denied (in a round or the dry run) takes its lock, in one more call; its denial then
/// waits at least `block_duration`. The lock and the rounds are separate calls, as in `Lockout`.

#include <algorithm>
#include <array>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../algorithms/registry.hpp"
#include "../algorithms/sliding_counter.hpp"
#include "../algorithms/token_bucket.hpp"
#include "../core/clock.hpp"
#include "../core/completion.hpp"
#include "../core/decision.hpp"
#include "../core/listener.hpp"
#include "../core/rate.hpp"
#include "../core/storage.hpp"
#include "../http/headers.hpp"
#include "../memory/in_memory_storage.hpp"
#include "detail/rounds.hpp"
#include "report.hpp"
#include "request.hpp"
#include "result.hpp"
#include "rule.hpp"
#include "rules.hpp"

namespace ratelimit {

/// A rules file bound to a storage and a clock: decides requests under every matching limit.
///
/// `Storage` is any storage that holds every algorithm of `Registry` and decides several keys
/// at once (`InMemoryStorage` by default, `RedisStorage`, `RedisClusterStorage`). `C` defaults
/// to `SystemClock` so that windows are calendar-aligned and several hosts sharing a store agree
/// on the time. `Registry` lists the algorithms its rules may name (default `Algorithms`).
///
/// Atomicity belongs to the storage: a request's limits are one `decide_all` call (see
/// core/storage.hpp), all or nothing with respect to every other decision on those counters,
/// whether made by this rule set, another, or a limiter named `Rule::id` on the same storage.
/// Thread safety: `decide` is safe from many threads.
template <class Storage = InMemoryStorage, Clock C = SystemClock, class Registry = Algorithms>
class RuleSet {
  static_assert(MultiKeyStorage<Storage>,
                "ratelimit::RuleSet: the Storage must decide several keys at once "
                "(`decide_all`, see MultiKeyStorage in core/storage.hpp)");
  static_assert(
      [] {
        bool all = true;
        Registry::for_each([&]<class M>() { all = all && StorageFor<Storage, M>; });
        return all;
      }(),
      "ratelimit::RuleSet: the Storage must hold every algorithm of the registry "
      "(`bind<Model>(name, params)` for each; see StorageFor in core/storage.hpp)");

 public:
  /// Binds every rule to `storage` under its `Rule::id`. Throws `std::invalid_argument` if the
  /// storage cannot represent a rule (the file's ranges are already the algorithms' ranges), or
  /// if a rule names an algorithm that `Registry` does not list.
  explicit RuleSet(Rules rules, Storage storage = {}, C clock = {})
      : rules_(std::make_shared<const Rules>(std::move(rules))),
        storage_(std::move(storage)),
        clock_(std::move(clock)) {
    auto bindings = std::make_shared<std::vector<RuleBindings>>();
    for (const Rule& r : rules_->rules()) bindings->push_back({bind(r), bind_lock(r)});
    bindings_ = std::move(bindings);
    bind_overrides();
  }

  /// Decides a request of `cost` units (>= 1) with these descriptor entries (the flat
  /// matching): a thin form of `decide(const RateLimitRequest&)` on the descriptor list
  /// `Rules::descriptors_of(request)` with `hits_addend = cost`, so `shadow_mode`,
  /// `quota_mode` and `replaces` mean the same in both forms. Admitted iff no enforced limit
  /// denies, in which case each limit decided spends `cost`; denied otherwise, and then no limit
  /// spends anything. Throws `std::invalid_argument` if cost < 1; a storage may throw per its
  /// failure policy.
  RuleSetDecision decide(std::span<const DescriptorEntry> request, std::int64_t cost = 1) {
    const RateLimitRequest list = flat_request(request, cost);
    return detail::flat_decision(list, decide(list));
  }

  /// `decide` without blocking: returns at once; `done(RuleSetDecision)` gets the decision
  /// exactly once, on the storage's I/O thread (Redis: each round of the descriptor-list
  /// decision is one `decide_all_async`) or here before this returns (in process, or when
  /// Redis is not tried): see core/completion.hpp. The request is copied; the
  /// outcomes' `Rule` pointers stay valid while this set or a copy of the decision's set lives.
  /// Throws `std::invalid_argument` if cost < 1 (and then never calls `done`).
  /// Thread safety: safe from many threads.
  template <class F>
  requires std::invocable<F&, RuleSetDecision>
  void decide_async(std::span<const DescriptorEntry> request, std::int64_t cost, F&& done) {
    auto list = std::make_shared<const RateLimitRequest>(flat_request(request, cost));
    auto complete = detail::make_completion<RuleSetDecision>(std::forward<F>(done));
    decide_async(*list, [list, complete](RateLimitResponse r) mutable {
      detail::complete_safely(complete, detail::flat_decision(*list, r));
    });
  }

  /// As above, through a future (its `get` blocks: not on the storage's I/O thread).
  std::future<RuleSetDecision> decide_async(std::span<const DescriptorEntry> request,
                                            std::int64_t cost = 1) {
    auto promise = std::make_shared<std::promise<RuleSetDecision>>();
    auto future = promise->get_future();
    decide_async(request, cost, [promise](RuleSetDecision d) { promise->set_value(std::move(d)); });
    return future;
  }

  /// Same, from an initializer list: `set.decide({{"api_key", "K"}, {"path", "/login"}})`.
  RuleSetDecision decide(std::initializer_list<DescriptorEntry> request, std::int64_t cost = 1) {
    return decide(std::span<const DescriptorEntry>(request.begin(), request.size()), cost);
  }

  /// Decides a descriptor-list request as Envoy's rate limit service matches it (see
  /// `Rules::lookup`): each descriptor lands on at most one limit (or uses its own override);
  /// a limit whose name another applying limit (unlimited ones included) `replaces` is not
  /// decided; the rest are decided all or nothing (all admit and spend their hits, or nothing
  /// changes anywhere), where a shadow-mode limit decides and spends as if enforced but a
  /// denial by it only drops it from the request (reported in `shadow_denials`), and
  /// quota-mode limits drop out the same way unless every one of them denies, which denies the
  /// request. Descriptors landing on one counter are decided once with their hits summed.
  /// A request for another domain than the rules' matches nothing (admitted). The reference
  /// service instead counts every descriptor even when another is over the limit, and counts a
  /// denied request's hits. Throws `std::invalid_argument` for a negative hits_addend, or an
  /// override above 10^9, negative or with an invalid unit; a storage may throw per its
  /// failure policy.
  /// Thread safety: safe from many threads.
  RateLimitResponse decide(const RateLimitRequest& request) {
    const detail::ObserverSet* obs = observers_.current();
    if (obs == nullptr) [[likely]]
      return decide_list(request);
    const bool sample = detail::sample_latency();
    const auto start =
        sample ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    RateLimitResponse r = decide_list(request);
    const auto latency =
        sample ? std::chrono::steady_clock::now() - start : std::chrono::nanoseconds{-1};
    detail::report_response(*obs, *rules_, request, r, latency);
    return r;
  }

  /// `decide(const RateLimitRequest&)` without blocking: returns at once; `done(RateLimitResponse)`
  /// gets the response exactly once, on the storage's I/O thread (Redis: each round is one
  /// `decide_all_async`, the next submitted from the previous one's completion) or here before
  /// this returns (in process): see core/completion.hpp. The request is copied as needed; the
  /// set may be destroyed before `done` runs. Throws as `decide` before any round (and then
  /// never calls `done`).
  /// Thread safety: safe from many threads.
  template <class F>
  requires std::invocable<F&, RateLimitResponse>
  void decide_async(const RateLimitRequest& request, F&& done) {
    auto complete = detail::make_completion<RateLimitResponse>(std::forward<F>(done));
    if (const detail::ObserverSet* obs = observers_.current()) {
      complete = [set = obs->shared_from_this(), rules = rules_, req = request,
                  inner = std::move(complete)](RateLimitResponse r) {
        detail::report_response(*set, *rules, req, r, std::chrono::nanoseconds{-1});
        inner(std::move(r));
      };
    }
    auto state = std::make_shared<ListState>(prepare_list(request));
    if constexpr (requires(std::function<void(std::vector<Decision>&&, bool)> f) {
                    storage_.decide_all_async(std::span<const typename Storage::Part>{},
                                              std::chrono::nanoseconds{}, f);
                  }) {
      run_rounds(storage_, std::move(state), bindings_, override_bindings_, std::move(complete));
    } else {
      // Not `decide`: it would tell the listeners too, and `complete` already does.
      detail::complete_safely(complete, decide_list(request));
    }
  }

  /// Attaches a listener: it hears of each matching limit's decision for every request
  /// (`decide` and `decide_async`, both forms), named by `metric_name`, with the rule's client
  /// (`RuleOutcome::client`, e.g. "api_key=K") only if `options.with_keys`. Per request and
  /// limit: `limited` when the limit denied (a shadow-mode limit: `shadow_limited`, with
  /// `Decision::shadow_denied`), `degraded` when a failure policy decided, `allowed` when the
  /// request was admitted; a limit that admitted a request another limit denied (its dry run)
  /// and checks without hits are not reported. What a listener throws is swallowed. Each
  /// attach or detach keeps about 40 B plus 24 B per listener until the set is destroyed.
  /// Thread safety: safe from many threads, also while deciding.
  void attach_listener(std::shared_ptr<Listener> listener, ListenerOptions options = {}) {
    observers_.attach(std::move(listener), options);
  }
  /// Detaches every attachment of `listener`; returns whether it was attached. A decision
  /// under way may still call it. Thread safety: safe from many threads.
  bool detach_listener(const Listener& listener) { return observers_.detach(&listener); }

  /// The metric name of `rule` for a request whose value for a descriptor key is
  /// `value_of(key)` (nullptr if absent), as Envoy's rate limit service names its stats:
  /// "<domain>.<part>.<part>..." with one part per descriptor on the rule's path, "key_value"
  /// for a descriptor that names a value (its value or wildcard as written) and "key" for one
  /// that takes any value; `detailed_metric: true` puts the request's value in every part,
  /// `value_to_metric: true` in the parts of descriptors that take any value or a wildcard.
  /// Request values widen the label set: a listener exporting them must bound its series (the
  /// Prometheus exporter does).
  template <class ValueOf>
  static std::string metric_name(const Rules& rules, const Rule& rule, ValueOf&& value_of) {
    return detail::rule_metric_name(rules, rule, value_of);
  }

 private:
  struct ListState;  // below, after Group

  /// The descriptor list a flat request is decided as (see `decide(entries)`).
  RateLimitRequest flat_request(std::span<const DescriptorEntry> request, std::int64_t cost) const {
    detail::check_cost(cost);
    return RateLimitRequest{rules_->domain(), rules_->descriptors_of(request), cost};
  }

  RateLimitResponse decide_list(const RateLimitRequest& request) {
    ListState state = prepare_list(request);
    while (next_step(state)) {
      std::vector<Decision> ds(state.parts.size());
      bool all = false;
      try {
        all = storage_.decide_all(std::span<const typename Storage::Part>(state.parts), state.now,
                                  std::span<Decision>(ds));
      } catch (...) {
        // The locks are taken after the request is decided (and maybe spent): a storage that
        // fails then leaves the counters unlocked rather than the decision unreported.
        if (state.phase != Phase::lock) throw;
        state.phase = Phase::done;
        break;
      }
      absorb_step(state, ds, all);
    }
    return finish_list(std::move(state));
  }

  ListState prepare_list(const RateLimitRequest& request) const {
    if (request.hits_addend < 0)
      throw std::invalid_argument("RateLimitRequest.hits_addend = " +
                                  std::to_string(request.hits_addend) + ": must be >= 0");
    ListState state;
    RateLimitResponse& res = state.res;
    res.rules = rules_;
    const std::size_t n = request.descriptors.size();
    res.statuses.resize(n);
    if (request.domain != rules_->domain()) return state;  // no groups: no round
    const std::int64_t default_hits = std::max<std::int64_t>(1, request.hits_addend);

    // 1. Where each descriptor lands, and what the applying limits replace.
    std::vector<std::string> tags(n);
    std::unordered_set<std::string> replacing;  // hashed: n descriptors, O(n) not O(n^2)
    for (std::size_t i = 0; i < n; ++i) {
      const RateLimitDescriptor& d = request.descriptors[i];
      DescriptorStatus& st = res.statuses[i];
      st.hits = d.hits_addend ? *d.hits_addend : default_hits;
      if (st.hits < 0)
        throw std::invalid_argument("RateLimitDescriptor.hits_addend = " + std::to_string(st.hits) +
                                    ": must be >= 0");
      if (d.limit) {
        if (d.limit->requests_per_unit < 0 || d.limit->requests_per_unit > detail::max_count)
          throw std::invalid_argument("RateLimitOverride.requests_per_unit = " +
                                      std::to_string(d.limit->requests_per_unit) +
                                      ": must be 0 to 1000000000");
        if (static_cast<unsigned>(d.limit->unit) > static_cast<unsigned>(RateUnit::day))
          throw std::invalid_argument(
              "RateLimitOverride.unit = " + std::to_string(static_cast<int>(d.limit->unit)) +
              ": not a RateUnit");
        st.override_rate = Rate{d.limit->requests_per_unit, period_of(d.limit->unit)};
        for (const DescriptorEntry& e : d.entries) {
          detail::append_field(st.key, e.key);
          detail::append_field(st.key, e.value);
        }
        continue;
      }
      DescriptorMatch m = rules_->lookup(std::span<const DescriptorEntry>(d.entries));
      st.rule = m.rule;
      st.unlimited = m.unlimited;
      st.shadow = m.rule != nullptr && m.rule->shadow_mode;
      st.key = std::move(m.key);
      tags[i] = std::move(m.tag);
      replacing.insert(m.replaces.begin(), m.replaces.end());
    }
    for (DescriptorStatus& st : res.statuses)
      if (st.rule != nullptr && !st.rule->given_name.empty() &&
          replacing.count(st.rule->given_name) != 0)
        st.replaced = true;

    // 2. One group per counter, (limit, key), with its descriptors' hits summed.
    for (std::size_t i = 0; i < n; ++i) {
      DescriptorStatus& st = res.statuses[i];
      if (st.override_rate) {
        const RateUnit unit = request.descriptors[i].limit->unit;
        const void* identity = &override_bindings_->at(static_cast<std::size_t>(unit));
        Group& g = group_of(state, identity, st.key);
        if (g.members.empty()) {
          g.blocks = st.override_rate->count == 0;
          if (!g.blocks) {
            const auto& unit_binding = override_bindings_->at(static_cast<std::size_t>(unit));
            if (!unit_binding)
              throw std::invalid_argument(
                  "RateLimitOverride: this RuleSet's registry has no sliding_counter");
            g.owned = unit_binding->with_rate(*st.override_rate);
            g.binding = g.owned.get();
          }
        }
        add(g, st, i);
      } else if (st.rule != nullptr && !st.replaced) {
        Group& g = group_of(state, st.rule, st.key);
        if (g.members.empty()) {
          g.blocks = st.rule->blocks();
          if (!g.blocks) g.binding = &binding_of(*st.rule);
          g.lock = lock_of(*st.rule);
          if (g.lock != nullptr) state.phase = Phase::check;
          g.tag = tags[i];
          g.kind = st.rule->shadow_mode  ? Kind::shadow
                   : st.rule->quota_mode ? Kind::quota
                                         : Kind::enforced;
        }
        add(g, st, i);
      }
    }

    // 3. The locks of the limits with `block_duration` are checked first (`Phase::check`),
    // then the rounds start.
    state.now = clock_.now();
    if (state.phase == Phase::rounds) start_rounds(state);
    return state;
  }

  /// The rounds (see detail::AllOrNothingRounds), one group each in the groups' order. A group
  /// that blocks never reaches storage: its decision is `blocked_decision()`, or for a counter
  /// locked out, the lock's denial.
  static void start_rounds(ListState& s) {
    for (const Group& g : s.groups)
      s.rounds.add(g.kind, g.hits == 0, g.blocks || g.locked,
                   g.locked ? g.lock_denial : detail::blocked_decision());
    s.rounds.start();
  }

  /// Prepares the next storage call of the request: the lock checks (one dry run of the lock
  /// and one of the limit per counter with a lockout, the limit's for the fields a locked
  /// counter reports, as `Lockout` does), the rounds, then the locks to take: the counters
  /// with a lockout that the limit denied (their own denial, in a round or its dry run, not a
  /// failure policy's), as `Lockout::try_acquire` locks. false when the request is decided.
  static bool next_step(ListState& s) {
    s.parts.clear();
    if (s.phase == Phase::check) {
      s.step.clear();
      for (std::size_t k = 0; k < s.groups.size(); ++k) {
        const Group& g = s.groups[k];
        if (g.lock == nullptr || g.blocks) continue;
        s.step.push_back(k);
        s.parts.push_back(g.lock->part(g.key, Operation{1, true}, g.tag));
        s.parts.push_back(g.binding->part(g.key, Operation{1, true}, g.tag));
      }
      if (!s.parts.empty()) return true;
      s.phase = Phase::rounds;
      start_rounds(s);
    }
    if (s.phase == Phase::rounds) {
      if (next_round(s)) return true;
      s.step.clear();
      for (std::size_t k = 0; k < s.groups.size(); ++k) {
        const Group& g = s.groups[k];
        if (g.lock == nullptr || g.blocks || g.locked || g.hits == 0) continue;
        const Decision& d = s.rounds.decision(k);
        if (!d.allowed && !d.degraded) s.step.push_back(k);
      }
      s.phase = s.step.empty() ? Phase::done : Phase::lock;
    }
    if (s.phase == Phase::lock) {
      for (const std::size_t k : s.step) {
        const Group& g = s.groups[k];
        s.parts.push_back(g.lock->part(g.key, Operation{1, false}, g.tag));
      }
      return true;
    }
    return false;
  }

  /// Takes the decisions of the call `next_step` prepared.
  static void absorb_step(ListState& s, const std::vector<Decision>& ds, bool all) {
    if (s.phase == Phase::check) {
      for (std::size_t j = 0; j < s.step.size(); ++j) {
        const Decision& lock = ds[2 * j];
        if (lock.allowed) continue;
        // As `Lockout` denies a locked key: the limit as a peek reads it, the lock's wait.
        Group& g = s.groups[s.step[j]];
        Decision d = ds[2 * j + 1];
        d.allowed = false;
        d.remaining = 0;
        d.delay = std::chrono::nanoseconds{0};
        d.retry_after = lock.retry_after;
        if (d.reset_after < lock.retry_after) d.reset_after = lock.retry_after;
        d.degraded = d.degraded || lock.degraded;
        g.locked = true;
        g.lock_denial = d;
      }
      s.phase = Phase::rounds;
      start_rounds(s);
      return;
    }
    if (s.phase == Phase::rounds) return absorb(s, ds, all);
    // Phase::lock: each lock is taken unless a racing denial took it first (then it stays, as
    // its dry run reports: never extended); those are dropped and the rest taken again.
    if (all) {
      for (const std::size_t k : s.step) s.groups[k].lock_wait = s.groups[k].lock->block;
      s.phase = Phase::done;
      return;
    }
    std::vector<std::size_t> rest;
    for (std::size_t j = 0; j < s.step.size(); ++j) {
      Group& g = s.groups[s.step[j]];
      if (ds[j].degraded) {  // a failure policy answered: no lock is known taken
        s.phase = Phase::done;
        return;
      }
      if (ds[j].allowed)
        rest.push_back(s.step[j]);
      else
        g.lock_wait = ds[j].retry_after;
    }
    // Nothing dropped: a storage that refused without a denying part; no lock then.
    if (rest.size() == s.step.size()) rest.clear();
    s.step = std::move(rest);
    if (s.step.empty()) s.phase = Phase::done;
  }

  /// Prepares the next round: every round is one all-or-nothing `decide_all` over the groups
  /// still in (dry runs once the request is denied). false when the request is decided.
  static bool next_round(ListState& s) {
    s.parts.clear();
    const std::vector<std::size_t>& in = s.rounds.next();
    for (const std::size_t k : in) {
      const Group& g = s.groups[k];
      const bool check = g.hits == 0;
      s.parts.push_back(g.binding->part(
          g.key, Operation{check ? 1 : g.hits, s.rounds.dry_run() || check}, g.tag));
    }
    return !in.empty();
  }

  /// Takes a round's decisions (see detail::AllOrNothingRounds::absorb).
  static void absorb(ListState& s, const std::vector<Decision>& ds, bool all) {
    s.rounds.absorb(std::span<const Decision>(ds), all);
  }

  static RateLimitResponse finish_list(ListState&& s) {
    RateLimitResponse res = std::move(s.res);
    res.allowed = !s.rounds.denied();
    for (std::size_t k = 0; k < s.groups.size(); ++k)
      for (const std::size_t i : s.groups[k].members) {
        const Group& g = s.groups[k];
        Decision decision = s.rounds.decision(k);
        // The denial that locked reports at least the lock's wait, as `Lockout`'s does.
        if (decision.retry_after < g.lock_wait) decision.retry_after = g.lock_wait;
        if (decision.reset_after < g.lock_wait) decision.reset_after = g.lock_wait;
        DescriptorStatus& st = res.statuses[i];
        st.decision = decision;
        st.locked = g.locked;
        if (g.hits > 0 && !decision.allowed) st.code = DescriptorStatus::Code::over_limit;
        if (st.shadow && st.code == DescriptorStatus::Code::over_limit)
          res.shadow_denials.push_back(i);
      }
    std::sort(res.shadow_denials.begin(), res.shadow_denials.end());
    return res;
  }

  /// The rounds of `decide_async`, each submitted from the previous one's completion. The
  /// state owns the groups (and the override bindings at their rates); the rule bindings ride
  /// along, so the set may go away meanwhile.
  template <class Bindings, class OverrideBindings>
  static void run_rounds(Storage storage, std::shared_ptr<ListState> s, Bindings bindings,
                         OverrideBindings overrides, Completion<RateLimitResponse> complete) {
    if (!next_step(*s)) {
      detail::complete_safely(complete, finish_list(std::move(*s)));
      return;
    }
    try {
      storage.decide_all_async(
          std::span<const typename Storage::Part>(s->parts), s->now,
          [storage, s, bindings, overrides, complete](std::vector<Decision>&& ds, bool all) {
            absorb_step(*s, ds, all);
            run_rounds(storage, s, bindings, overrides, complete);
          });
    } catch (const std::exception&) {
      // Only a later call can get here (the parts were accepted once): deny, spend nothing;
      // or, taking the locks after the request was decided, leave them untaken.
      if (s->phase != Phase::lock) s->rounds.deny();
      detail::complete_safely(complete, finish_list(std::move(*s)));
    }
  }

 public:
  /// The rules (shared by copies of the decisions' `Rule` pointers; stable for the set's life).
  const Rules& rules() const noexcept { return *rules_; }
  /// The storage handle.
  Storage& storage() noexcept { return storage_; }
  /// The clock.
  C& clock() noexcept { return clock_; }

 private:
  /// A rule's binding, whatever its model: it only makes parts.
  struct AnyBinding {
    virtual ~AnyBinding() = default;
    virtual typename Storage::Part part(std::string_view key, const Operation& op,
                                        std::string_view tag) const = 0;
    /// The same counters decided at another rate (`Binding::with_params`).
    virtual std::unique_ptr<AnyBinding> with_rate(const Rate& rate) const = 0;
  };
  template <class B>
  struct BindingOf final : AnyBinding {
    explicit BindingOf(B b) : binding(std::move(b)) {}
    typename Storage::Part part(std::string_view key, const Operation& op,
                                std::string_view tag) const override {
      return binding.part(key, op, tag);
    }
    std::unique_ptr<AnyBinding> with_rate(const Rate& rate) const override {
      using M = typename B::Model;
      return std::make_unique<BindingOf>(binding.with_params(M::from_rate(rate)));
    }
    B binding;
  };

  /// A rule's lockout: its lock's binding (a one-token bucket refilled once per `block`, as
  /// `Lockout`'s, under the rule's id + "/lockout") and its block duration.
  struct LockBinding {
    std::unique_ptr<AnyBinding> binding;
    std::chrono::nanoseconds block{0};
    typename Storage::Part part(std::string_view key, const Operation& op,
                                std::string_view tag) const {
      return binding->part(key, op, tag);
    }
  };
  /// A rule's bindings: its limit's (null when it blocks) and its lock's (null without one).
  struct RuleBindings {
    std::unique_ptr<AnyBinding> limit;
    std::unique_ptr<LockBinding> lock;
  };

  /// A counter of a descriptor-list request: a limit (a rule, or an override's unit) and key.
  using Kind = detail::AllOrNothingRounds::Kind;
  struct Group {
    const void* identity = nullptr;
    std::string key, tag;
    const AnyBinding* binding = nullptr;  ///< null when it blocks
    const LockBinding* lock = nullptr;    ///< the rule's lockout, if any
    bool locked = false;                  ///< found locked out: decided as `lock_denial`
    Decision lock_denial{};
    /// The lock taken (or found taken) by this request's denial: its wait, else 0.
    std::chrono::nanoseconds lock_wait{0};
    std::unique_ptr<AnyBinding> owned;  ///< an override's binding at its rate
    std::int64_t hits = 0;
    Kind kind = Kind::enforced;
    bool blocks = false;
    std::vector<std::size_t> members;  ///< the descriptors on this counter
  };
  /// The group of counter (identity, key), made if new; found by hash, so that a request of n
  /// descriptors is grouped in O(n) (a scan per descriptor took 2 s for 16,000).
  static Group& group_of(ListState& s, const void* identity, const std::string& key) {
    std::string id(reinterpret_cast<const char*>(&identity), sizeof identity);
    id += key;
    const auto [it, fresh] = s.group_index.emplace(std::move(id), s.groups.size());
    if (!fresh) return s.groups[it->second];
    s.groups.emplace_back();
    s.groups.back().identity = identity;
    s.groups.back().key = key;
    return s.groups.back();
  }
  static void add(Group& g, DescriptorStatus& st, std::size_t i) {
    st.evaluated = true;
    constexpr std::int64_t most = std::numeric_limits<std::int64_t>::max();
    g.hits = st.hits > most - g.hits ? most : g.hits + st.hits;  // saturated, never wraps
    g.members.push_back(i);
  }

  /// Where a request is: checking its locks, in its rounds, taking locks, or decided.
  enum class Phase { check, rounds, lock, done };

  /// A descriptor-list request matched and grouped by counter, between its rounds.
  struct ListState {
    Phase phase = Phase::rounds;
    std::vector<std::size_t> step;  ///< the groups of a lock check or of the locks to take
    RateLimitResponse res;
    std::vector<Group> groups;
    std::unordered_map<std::string, std::size_t> group_index;  ///< identity bytes + key -> group
    detail::AllOrNothingRounds rounds;                         ///< which groups each round decides
    std::vector<typename Storage::Part> parts;
    std::chrono::nanoseconds now{0};
  };

  /// The binding of rule `r`'s algorithm (null for a blocking rule: it never reaches storage).
  std::unique_ptr<AnyBinding> bind(const Rule& r) {
    if (r.blocks()) return nullptr;
    std::unique_ptr<AnyBinding> out;
    const bool known = Registry::visit(r.algorithm.name, [&]<class M>() {
      auto b = storage_.template bind<M>(r.id, params_from_limit<M>(r.limit_spec()));
      out = std::make_unique<BindingOf<decltype(b)>>(std::move(b));
    });
    if (!known)
      throw std::invalid_argument(
          "rule \"" + r.name + "\": algorithm = \"" + std::string(r.algorithm.name) +
          "\" is not in this RuleSet's registry (" + Registry::names() + ")");
    return out;
  }

  /// The lock of rule `r` (block_duration), or null: what `Lockout` around a limiter named
  /// `r.id` on the same storage keeps, so both see one lock. Throws `std::invalid_argument`
  /// if the storage holds no token bucket.
  std::unique_ptr<LockBinding> bind_lock(const Rule& r) {
    if (!r.locks_out() || r.blocks()) return nullptr;
    if constexpr (StorageFor<Storage, TokenBucketModel>) {
      auto b = storage_.template bind<TokenBucketModel>(
          r.id + "/lockout", TokenBucketModel::make_params({1, Rate{1, r.block_duration}}));
      auto out = std::make_unique<LockBinding>();
      out->binding = std::make_unique<BindingOf<decltype(b)>>(std::move(b));
      out->block = r.block_duration;
      return out;
    } else {
      throw std::invalid_argument("rule \"" + r.name +
                                  "\": block_duration needs a storage that holds a token bucket "
                                  "(the lock's state)");
    }
  }

  const AnyBinding& binding_of(const Rule& r) const {
    return *(*bindings_)[static_cast<std::size_t>(&r - rules_->rules().data())].limit;
  }
  const LockBinding* lock_of(const Rule& r) const {
    return (*bindings_)[static_cast<std::size_t>(&r - rules_->rules().data())].lock.get();
  }

  /// The bindings of descriptors' own limits (`RateLimitOverride`), one per unit, a sliding
  /// counter named "rules:<domain>override@<seconds>" (null if the registry has none).
  void bind_overrides() {
    auto out = std::make_shared<std::array<std::unique_ptr<AnyBinding>, 4>>();
    for (const RateUnit u : {RateUnit::second, RateUnit::minute, RateUnit::hour, RateUnit::day}) {
      std::string id = "rules:";
      detail::append_field(id, rules_->domain());
      id += "override@" +
            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(period_of(u)).count());
      Registry::visit(SlidingCounterModel::name, [&]<class M>() {
        auto b = storage_.template bind<M>(id, M::from_rate(Rate{1, period_of(u)}));
        (*out)[static_cast<std::size_t>(u)] =
            std::make_unique<BindingOf<decltype(b)>>(std::move(b));
      });
    }
    override_bindings_ = std::move(out);
  }

  std::shared_ptr<const Rules> rules_;
  Storage storage_;
  C clock_;
  /// Shared with decisions in flight (decide_async), which may outlive the set.
  std::shared_ptr<const std::vector<RuleBindings>> bindings_;
  std::shared_ptr<const std::array<std::unique_ptr<AnyBinding>, 4>> override_bindings_;
  detail::Observers observers_;
};

}  // namespace ratelimit
