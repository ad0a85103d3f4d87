#pragma once
/// @file rules/rules.hpp
/// Rules as code: limits loaded from an Envoy rate limit service YAML file, matched against a
/// request's descriptors, and decided all together (every matching limit must admit; a denial
/// by one consumes nothing from the others).
///
/// Needs yaml-cpp (Debian `libyaml-cpp-dev`): link the CMake target `ratelimit::rules`.
///
/// ## The file
/// ```yaml
/// domain: gateway
/// client_keys: [api_key, remote_address]     # extension, optional (this is the default)
/// descriptors:
///   - key: api_key                           # any value: one counter per API key
///     rate_limit: {unit: minute, requests_per_unit: 100}
///   - key: path
///     value: /login                          # only this value
///     descriptors:                           # nested: both entries must be in the request
///       - key: api_key
///         rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_log}
///   - key: plan
///     value: pro
///     descriptors:
///       - key: api_key
///         rate_limit: {unit: minute, requests_per_unit: 1000, name: pro}
/// ```
/// As in Envoy's ratelimit service: `domain`; `descriptors`, each with `key`, optional `value`,
/// optional `rate_limit` (`unit`: second, minute, hour or day, any case; `requests_per_unit`:
/// 0 to 10^9; optional `name`; or `unlimited: true`) and optional nested `descriptors`.
/// Extensions: `rate_limit.algorithm` (sliding_counter, the default, token_bucket,
/// leaky_bucket, fixed_window or sliding_log; a bucket gets capacity or queue size
/// `requests_per_unit`, refilled or drained at `requests_per_unit` per `unit`), and the
/// top-level `client_keys` (see "Per client and shared rules"). `requests_per_unit: 0` blocks
/// every matching request (denied with `retry_after == Decision::never`).
///
/// ## Matching
/// A request is one list of descriptor entries, e.g. `{{"api_key", K}, {"path", "/login"}}` or
/// `{{"plan", "free"}, {"api_key", K}}` (if a key repeats, its first entry counts). From the top
/// level down, for each key among a level's descriptors that the request carries, the
/// descriptor with that exact value is taken, else the one with that key and no value (so a
/// `value` overrides the catch-all, as in Envoy); a taken descriptor with a limit matches, and
/// its nested descriptors are tried in turn. Every matching limit applies. Each limit keeps one
/// counter per combination of the request's values for the descriptors on its path (e.g. one
/// per API key). This differs from Envoy, which matches each of a request's descriptors
/// separately and applies only the limit where its last entry lands; a file written for Envoy
/// gives the same limits where the intermediate levels carry no limit of their own.
///
/// ## Per client and shared rules
/// A rule is *per client* when its path has a catch-all (no `value`) descriptor whose key is one
/// of `client_keys` (default `api_key` and `remote_address`): its counters are per client, and
/// its `RuleMatch::client` names the client ("api_key=K"). Other rules are *shared*: one counter
/// for every client that matches (e.g. `path: /login` with its own limit).
///
/// ## Atomicity
/// `RuleSet::decide` dry-runs every matching limit with the request's real cost, and commits
/// them only if all admit, so a denied request consumes nothing anywhere. On the in-process
/// storage it holds, for the whole decision, the locks of the involved counters' stripes (a
/// process-wide table, taken in a fixed order so two decisions never deadlock): every decision
/// made through rule sets in this process is atomic with respect to every other. A limiter used
/// directly on the same storage and name does not take these locks; do not mix the two on one
/// counter. For Redis, `rules_redis.hpp` decides a request's rules in one Lua script.

#include <algorithm>
#include <array>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../algorithms/fixed_window.hpp"
#include "../algorithms/leaky_bucket.hpp"
#include "../algorithms/sliding_counter.hpp"
#include "../algorithms/sliding_log.hpp"
#include "../algorithms/token_bucket.hpp"
#include "../core/clock.hpp"
#include "../core/decision.hpp"
#include "../core/rate.hpp"
#include "../core/storage.hpp"
#include "../http/headers.hpp"
#include "../memory/in_memory_storage.hpp"
#include "../redis/options.hpp"
#include "detail/yaml.hpp"

namespace ratelimit {

/// One entry of a request's descriptors: a key and its value for this request.
/// Thread safety: a plain value.
struct DescriptorEntry {
  std::string key;
  std::string value;
};

/// One limit of a rules file: a descriptor with a `rate_limit`, identified by its path.
/// Thread safety: immutable once loaded.
struct Rule {
  /// One level of the path: a key, and the value it requires (`has_value`) or any value.
  struct Step {
    std::string key;
    std::string value;
    bool has_value = false;
  };

  /// `rate_limit.name`, else the path written as `key` or `key=value` joined by '|'
  /// (e.g. "path=/login|api_key"). Unique within a rules file.
  std::string name;
  /// The descriptors from the top level down to this one.
  std::vector<Step> path;
  /// requests_per_unit per unit; count 0 blocks every request.
  Rate rate;
  Algorithm algorithm = Algorithm::sliding_counter;
  /// Whether the counters are per client (see the file comment).
  bool per_client = false;
  /// Line of the descriptor in the rules file (1-based).
  int line = 0;
  /// Stable identity used as the storage's limiter name: the domain and the path, each part
  /// length-prefixed (two different paths never share counters; the same file loaded by
  /// several processes shares them).
  std::string id;

  /// The policy as advertised in `RateLimit-Policy`: name, quota = requests_per_unit, window =
  /// the unit (for a bucket, the time to refill or drain it completely).
  QuotaPolicy policy() const { return QuotaPolicy{name, rate.count, rate.period}; }
  /// true for `requests_per_unit: 0`.
  bool blocks() const noexcept { return rate.count == 0; }
};

/// A rule that applies to one request, and which counter of it.
/// Thread safety: a plain value. `rule` points into the `Rules` object that matched (a copy of a
/// `Rules` has its own rules), valid while that object lives.
struct RuleMatch {
  const Rule* rule = nullptr;
  /// The counter within the rule: the request's values for the rule's catch-all descriptors,
  /// each length-prefixed ("" for a rule whose descriptors all name a value).
  std::string key;
  /// "key=value" of the client for a per-client rule (the Redis hash tag), "" for a shared one.
  std::string client;
};

namespace detail {

inline void append_field(std::string& out, std::string_view s) {
  out += std::to_string(s.size());
  out += ':';
  out += s;
}

inline void flatten(const std::string& domain, const std::vector<std::string>& client_keys,
                    RuleNode& node, std::vector<Rule::Step>& path, std::vector<Rule>& out) {
  path.push_back({node.key, node.value, node.has_value});
  if (node.has_limit) {
    node.rule_index = static_cast<std::ptrdiff_t>(out.size());
    Rule r;
    r.path = path;
    r.rate = node.rate;
    r.algorithm = node.algorithm;
    r.line = node.line;
    for (const auto& s : path)
      if (!s.has_value &&
          std::find(client_keys.begin(), client_keys.end(), s.key) != client_keys.end())
        r.per_client = true;
    r.id = "rules:";
    append_field(r.id, domain);
    for (const auto& s : path) {
      append_field(r.id, s.key);
      if (s.has_value)
        append_field(r.id, s.value);
      else
        r.id += '*';
    }
    if (!node.name.empty()) {
      r.name = node.name;
    } else {
      for (const auto& s : path) {
        if (!r.name.empty()) r.name += '|';
        r.name += s.key;
        if (s.has_value) r.name += "=" + s.value;
      }
    }
    out.push_back(std::move(r));
  }
  for (RuleNode& child : node.children) flatten(domain, client_keys, child, path, out);
  path.pop_back();
}

/// The value of the request's first entry with `key`, or nullptr.
inline const std::string* find_entry(std::span<const DescriptorEntry> request,
                                     std::string_view key) noexcept {
  for (const DescriptorEntry& e : request)
    if (e.key == key) return &e.value;
  return nullptr;
}

}  // namespace detail

/// The limits of one rules file, independent of where their counters live.
/// Thread safety: immutable once loaded; `match` is safe from many threads.
class Rules {
 public:
  /// Parses rules from YAML text; `source` names it in error messages (e.g. the file name).
  /// Throws `std::invalid_argument` "SOURCE:LINE: problem" for invalid YAML, an unknown or
  /// repeated field, a missing `domain`, `descriptors` or `key`, an unknown unit or algorithm,
  /// a `requests_per_unit` that is negative, not a whole number or above 10^9, a duplicate
  /// descriptor (same key and value) on one level, a duplicate rule name, or a descriptor with
  /// neither `rate_limit` nor nested descriptors.
  static Rules from_string(std::string_view yaml, std::string source = "<string>") {
    detail::RulesReader reader(source);
    const detail::RuleTree tree = reader.read(yaml);
    Rules r;
    r.domain_ = tree.domain;
    r.client_keys_ = tree.client_keys;
    r.roots_ = tree.roots;
    std::vector<Rule::Step> path;
    for (detail::RuleNode& n : r.roots_)
      detail::flatten(r.domain_, r.client_keys_, n, path, r.rules_);
    for (std::size_t i = 0; i < r.rules_.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (r.rules_[i].name == r.rules_[j].name)
          throw std::invalid_argument(
              source + ":" + std::to_string(r.rules_[i].line) + ": rule name \"" +
              r.rules_[i].name + "\" already used at line " + std::to_string(r.rules_[j].line));
    return r;
  }

  /// Reads and parses a rules file. Throws `std::invalid_argument` naming the file if it cannot
  /// be read, and as `from_string` for its content.
  static Rules from_file(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw std::invalid_argument("rules file " + file.string() + ": cannot open");
    std::ostringstream text;
    text << in.rdbuf();
    return from_string(text.str(), file.string());
  }

  /// The file's `domain`.
  const std::string& domain() const noexcept { return domain_; }
  /// Every limit of the file, in file order (parents before their nested descriptors).
  const std::vector<Rule>& rules() const noexcept { return rules_; }
  /// The descriptor keys that identify a client.
  const std::vector<std::string>& client_keys() const noexcept { return client_keys_; }

  /// The limits that apply to a request with these descriptor entries, in file order, each
  /// with its counter key (see the file comment for the matching rules).
  std::vector<RuleMatch> match(std::span<const DescriptorEntry> request) const {
    std::vector<RuleMatch> out;
    std::string key, client;
    walk(roots_, request, key, client, out);
    std::sort(out.begin(), out.end(),
              [](const RuleMatch& a, const RuleMatch& b) { return a.rule < b.rule; });
    return out;
  }
  /// Same, from an initializer list: `rules.match({{"api_key", "K"}, {"path", "/login"}})`.
  std::vector<RuleMatch> match(std::initializer_list<DescriptorEntry> request) const {
    return match(std::span<const DescriptorEntry>(request.begin(), request.size()));
  }

 private:
  void walk(const std::vector<detail::RuleNode>& nodes, std::span<const DescriptorEntry> request,
            std::string& key, std::string& client, std::vector<RuleMatch>& out) const {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const detail::RuleNode& n = nodes[i];
      const std::string* value = detail::find_entry(request, n.key);
      if (value == nullptr) continue;
      if (n.has_value ? *value != n.value : has_exact(nodes, n.key, *value)) continue;
      const std::size_t key_size = key.size(), client_size = client.size();
      if (!n.has_value) {
        detail::append_field(key, *value);
        if (client.empty() &&
            std::find(client_keys_.begin(), client_keys_.end(), n.key) != client_keys_.end())
          client = n.key + "=" + *value;
      }
      if (const Rule* r = rule_of(n)) out.push_back(RuleMatch{r, key, r->per_client ? client : ""});
      walk(n.children, request, key, client, out);
      key.resize(key_size);
      client.resize(client_size);
    }
  }

  static bool has_exact(const std::vector<detail::RuleNode>& nodes, std::string_view key,
                        std::string_view value) noexcept {
    return std::any_of(nodes.begin(), nodes.end(), [&](const detail::RuleNode& n) {
      return n.has_value && n.key == key && n.value == value;
    });
  }

  const Rule* rule_of(const detail::RuleNode& n) const noexcept {
    return n.rule_index >= 0 ? &rules_[static_cast<std::size_t>(n.rule_index)] : nullptr;
  }

  std::string domain_;
  std::vector<std::string> client_keys_;
  std::vector<detail::RuleNode> roots_;
  std::vector<Rule> rules_;
};

/// What one matching limit decided for a request.
/// Thread safety: a plain value.
struct RuleOutcome {
  const Rule* rule = nullptr;
  /// The rule's counter key and client (see `RuleMatch`).
  std::string key;
  std::string client;
  /// When the request was denied (by this rule or another), the dry run's decision: this rule's
  /// state as it is, unchanged. When admitted, the committed decision.
  Decision decision{};
};

/// The decision on one request under every limit that matched it.
/// Thread safety: a plain value.
struct RuleSetDecision {
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  /// true iff every matching limit admitted (also when none matched).
  bool allowed = true;
  /// One entry per matching limit, in file order.
  std::vector<RuleOutcome> outcomes;
  /// The outcome that speaks for the request (a denial with the longest wait, else the fewest
  /// remaining requests), or `none` when no limit matched.
  std::size_t deciding = none;

  /// The deciding outcome's decision with `allowed` for the whole request and, when admitted,
  /// the longest `delay` of any rule (a leaky bucket's queue). With no matching limit: admitted,
  /// every other field 0.
  Decision decision() const {
    Decision d{};
    d.allowed = allowed;
    if (deciding == none) return d;
    d = outcomes[deciding].decision;
    d.allowed = allowed;
    if (allowed)
      for (const RuleOutcome& o : outcomes) d.delay = std::max(d.delay, o.decision.delay);
    return d;
  }

  /// Each outcome's policy and decision, for `rate_limit_headers`.
  std::vector<PolicyDecision> policies() const {
    std::vector<PolicyDecision> out;
    out.reserve(outcomes.size());
    for (const RuleOutcome& o : outcomes) out.push_back({o.rule->policy(), o.decision});
    return out;
  }

  /// The response headers (see http.hpp); empty when no limit matched.
  HeaderList headers() const {
    const auto p = policies();
    return rate_limit_headers(std::span<const PolicyDecision>(p));
  }

  /// Same as `allowed`.
  explicit operator bool() const noexcept { return allowed; }
};

namespace detail {

/// The decision of a `requests_per_unit: 0` rule: nothing is ever admitted.
constexpr Decision blocked_decision() noexcept {
  Decision d{};
  d.allowed = false;
  d.retry_after = Decision::never;
  return d;
}

/// Process-wide lock stripes for rule-set decisions: a counter (rule id, key) maps to one
/// stripe. Shared by every RuleSet in the process so that two rule sets over the same counters
/// still exclude each other.
struct RuleStripes {
  static constexpr std::size_t count = 1024;
  std::array<std::mutex, count> mutexes;
};

inline RuleStripes& rule_stripes() {
  static RuleStripes stripes;
  return stripes;
}

/// Holds a sorted, duplicate-free set of stripes for one decision; the fixed (ascending) order
/// means two decisions can never wait for each other in a cycle.
class StripeLock {
 public:
  explicit StripeLock(std::vector<std::size_t> stripes) : stripes_(std::move(stripes)) {
    std::sort(stripes_.begin(), stripes_.end());
    stripes_.erase(std::unique(stripes_.begin(), stripes_.end()), stripes_.end());
    auto& m = rule_stripes().mutexes;
    for (const std::size_t i : stripes_) m[i].lock();
  }
  ~StripeLock() {
    auto& m = rule_stripes().mutexes;
    for (auto it = stripes_.rbegin(); it != stripes_.rend(); ++it) m[*it].unlock();
  }
  StripeLock(const StripeLock&) = delete;
  StripeLock& operator=(const StripeLock&) = delete;

 private:
  std::vector<std::size_t> stripes_;
};

/// Decides a request's limits on a storage reached through its bindings, within one process:
/// stripes locked, every limit dry-run with the real cost, then all committed.
template <class Storage>
class LocalRuleBackend {
  static_assert(StorageFor<Storage, SlidingCounterModel> && StorageFor<Storage, TokenBucketModel> &&
                    StorageFor<Storage, LeakyBucketModel> &&
                    StorageFor<Storage, FixedWindowModel> && StorageFor<Storage, SlidingLogModel>,
                "ratelimit::RuleSet: the Storage must hold all five algorithms' state "
                "(`bind<Model>(name, params)` for each; see storage.hpp)");
  // A RedisStorage decided here would be atomic only within this process; rules_redis.hpp
  // specializes RuleBackendFor so that it is atomic across every instance.
  static_assert(
      !requires(const Storage& s) {
        { s.stats() } -> std::same_as<RedisStats>;
      },
      "ratelimit::RuleSet<RedisStorage>: #include <ratelimit/rules_redis.hpp>");

 public:
  LocalRuleBackend(const Rules& rules, Storage& storage) {
    for (const Rule& r : rules.rules()) {
      id_hash_.push_back(std::hash<std::string_view>{}(r.id));
      bindings_.push_back(make_binding(r, storage));
    }
  }

  /// Fills `out[i]` with the decision of `matches[i]` (all of them unblocked rules of `rules`).
  template <Clock C>
  bool decide(const Rules& rules, const std::vector<RuleMatch>& matches, C& clock,
              std::int64_t cost, std::vector<Decision>& out) {
    std::vector<std::size_t> stripes;
    stripes.reserve(matches.size());
    for (const RuleMatch& m : matches) stripes.push_back(stripe(rules, m));
    const StripeLock lock(std::move(stripes));
    const auto now = clock.now();
    out.resize(matches.size());
    bool all = true;
    if (matches.size() > 1) {
      for (std::size_t i = 0; i < matches.size(); ++i) {
        out[i] = binding(rules, matches[i])(matches[i].key, now, Operation{cost, true});
        all = all && out[i].allowed;
      }
      if (!all) return false;
    }
    // Under the stripes nothing else decided through a rule set can have moved these counters
    // since the dry run, so each commit admits as the dry run did.
    for (std::size_t i = 0; i < matches.size(); ++i) {
      out[i] = binding(rules, matches[i])(matches[i].key, now, Operation{cost, false});
      all = all && out[i].allowed;
    }
    return all;
  }

  /// Fills `out[i]` with what `matches[i]` would decide for `cost`, changing nothing.
  template <Clock C>
  void peek(const Rules& rules, const std::vector<RuleMatch>& matches, C& clock, std::int64_t cost,
            std::vector<Decision>& out) {
    std::vector<std::size_t> stripes;
    stripes.reserve(matches.size());
    for (const RuleMatch& m : matches) stripes.push_back(stripe(rules, m));
    const StripeLock lock(std::move(stripes));
    const auto now = clock.now();
    out.resize(matches.size());
    for (std::size_t i = 0; i < matches.size(); ++i)
      out[i] = binding(rules, matches[i])(matches[i].key, now, Operation{cost, true});
  }

 private:
  using Apply =
      std::function<Decision(std::string_view, std::chrono::nanoseconds, const Operation&)>;

  template <Model M>
  static Apply bind(Storage& storage, const Rule& r, const typename M::Params& params) {
    return [b = storage.template bind<M>(r.id, params)](
               std::string_view key, std::chrono::nanoseconds now, const Operation& op) mutable {
      return b.apply(key, now, op);
    };
  }

  static Apply make_binding(const Rule& r, Storage& storage) {
    if (r.blocks()) return {};
    switch (r.algorithm) {
      case Algorithm::token_bucket:
        return bind<TokenBucketModel>(storage, r,
                                      TokenBucketModel::make_params({r.rate.count, r.rate}));
      case Algorithm::leaky_bucket:
        return bind<LeakyBucketModel>(storage, r,
                                      LeakyBucketModel::make_params({r.rate.count, r.rate}));
      case Algorithm::fixed_window:
        return bind<FixedWindowModel>(storage, r, make_window_params(r.rate));
      case Algorithm::sliding_log:
        return bind<SlidingLogModel>(storage, r, make_window_params(r.rate));
      case Algorithm::sliding_counter:
        break;
    }
    return bind<SlidingCounterModel>(storage, r, make_window_params(r.rate));
  }

  std::size_t index(const Rules& rules, const RuleMatch& m) const noexcept {
    return static_cast<std::size_t>(m.rule - rules.rules().data());
  }
  Apply& binding(const Rules& rules, const RuleMatch& m) { return bindings_[index(rules, m)]; }
  std::size_t stripe(const Rules& rules, const RuleMatch& m) const noexcept {
    const std::size_t h = std::hash<std::string_view>{}(m.key) * 0x9E3779B97F4A7C15ULL;
    return (h ^ id_hash_[index(rules, m)]) % RuleStripes::count;
  }

  std::vector<std::size_t> id_hash_;
  std::vector<Apply> bindings_;
};

/// Which backend a `RuleSet<Storage>` uses. The in-process one by default; `rules_redis.hpp`
/// specializes it for `RedisStorage` (one Lua script per decision).
template <class Storage>
struct RuleBackendFor {
  using type = LocalRuleBackend<Storage>;
};

}  // namespace detail

/// A rules file bound to a storage and a clock: decides requests under every matching limit.
///
/// `Storage` is any storage holding the five algorithms (`InMemoryStorage` by default; include
/// `rules_redis.hpp` for `RedisStorage`). `C` defaults to `SystemClock` so that windows are
/// calendar-aligned and several hosts sharing a store agree on the time.
/// Thread safety: `decide` is safe from many threads; see the file comment for atomicity.
template <class Storage = InMemoryStorage, Clock C = SystemClock>
class RuleSet {
 public:
  /// Binds every rule to `storage` under its `Rule::id`. Throws `std::invalid_argument` if the
  /// storage cannot represent a rule (the file's ranges are already the algorithms' ranges).
  explicit RuleSet(Rules rules, Storage storage = {}, C clock = {})
      : rules_(std::make_shared<const Rules>(std::move(rules))),
        storage_(std::move(storage)),
        clock_(std::move(clock)),
        backend_(*rules_, storage_) {}

  /// Decides a request of `cost` units (>= 1) with these descriptor entries: admitted iff every
  /// matching limit admits it, in which case each spends `cost`; denied otherwise, and then no
  /// limit spends anything. Throws `std::invalid_argument` if cost < 1; a storage may throw per
  /// its failure policy.
  RuleSetDecision decide(std::span<const DescriptorEntry> request, std::int64_t cost = 1) {
    detail::check_cost(cost);
    RuleSetDecision result;
    std::vector<RuleMatch> matches = rules_->match(request);
    if (matches.empty()) return result;
    result.outcomes.reserve(matches.size());
    bool blocked = false;
    for (RuleMatch& m : matches) {
      blocked = blocked || m.rule->blocks();
      result.outcomes.push_back(
          {m.rule, std::move(m.key), std::move(m.client), detail::blocked_decision()});
    }
    if (blocked) {
      // Nothing is spent anywhere; the other rules report their state as it is.
      std::vector<RuleMatch> open;
      std::vector<std::size_t> where;
      for (std::size_t i = 0; i < result.outcomes.size(); ++i) {
        const RuleOutcome& o = result.outcomes[i];
        if (o.rule->blocks()) continue;
        open.push_back({o.rule, o.key, o.client});
        where.push_back(i);
      }
      std::vector<Decision> ds;
      if (!open.empty()) backend_.peek(*rules_, open, clock_, cost, ds);
      for (std::size_t i = 0; i < ds.size(); ++i) result.outcomes[where[i]].decision = ds[i];
      result.allowed = false;
    } else {
      for (std::size_t i = 0; i < result.outcomes.size(); ++i) {
        matches[i].key = result.outcomes[i].key;
        matches[i].client = result.outcomes[i].client;
      }
      std::vector<Decision> ds;
      result.allowed = backend_.decide(*rules_, matches, clock_, cost, ds);
      for (std::size_t i = 0; i < ds.size(); ++i) result.outcomes[i].decision = ds[i];
    }
    std::size_t best = 0;
    for (std::size_t i = 1; i < result.outcomes.size(); ++i)
      if (detail::more_restrictive(result.outcomes[i].decision, result.outcomes[best].decision))
        best = i;
    result.deciding = best;
    return result;
  }

  /// Same, from an initializer list: `set.decide({{"api_key", "K"}, {"path", "/login"}})`.
  RuleSetDecision decide(std::initializer_list<DescriptorEntry> request, std::int64_t cost = 1) {
    return decide(std::span<const DescriptorEntry>(request.begin(), request.size()), cost);
  }

  /// The rules (shared by copies of the decisions' `Rule` pointers; stable for the set's life).
  const Rules& rules() const noexcept { return *rules_; }
  /// The storage handle.
  Storage& storage() noexcept { return storage_; }
  /// The clock.
  C& clock() noexcept { return clock_; }

 private:
  std::shared_ptr<const Rules> rules_;
  Storage storage_;
  C clock_;
  typename detail::RuleBackendFor<Storage>::type backend_;
};

}  // namespace ratelimit
