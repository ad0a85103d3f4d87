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
/// `requests_per_unit`, refilled or drained at `requests_per_unit` per `unit`), the
/// top-level `client_keys` (see "Per client and shared rules"), and for calendar algorithms
/// (`algorithm: calendar_quota`, in the registry `QuotaAlgorithms` of ratelimit/calendar_quota.hpp)
/// the units `week` and `month` and the fields `time_zone` (IANA name, default UTC) and
/// `first_day` (of a week, default monday); other algorithms refuse those. `requests_per_unit: 0`
/// blocks every matching request (denied with `retry_after == Decision::never`).
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
/// `RuleSet::decide` hands every matching limit to the storage's `decide_all` with the
/// request's real cost: all admit and spend, or nothing changes anywhere. The storage is the
/// unit of atomicity (in process: the counters' shard locks, taken in a fixed order; on Redis:
/// one script), so a rule set is atomic with respect to every other decision on its counters,
/// a limiter's included. On Redis Cluster a request's keys must share a slot: per-client limits
/// share the client's hash tag (`RuleMatch::tag`); a request that also matches a shared limit
/// spans slots and is decided by the failure policy (degraded). See docs/cluster.md.

#include <algorithm>
#include <array>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../algorithms/fixed_window.hpp"
#include "../algorithms/leaky_bucket.hpp"
#include "../algorithms/registry.hpp"
#include "../algorithms/sliding_counter.hpp"
#include "../algorithms/sliding_log.hpp"
#include "../algorithms/token_bucket.hpp"
#include "../core/clock.hpp"
#include "../core/completion.hpp"
#include "../core/decision.hpp"
#include "../core/rate.hpp"
#include "../core/storage.hpp"
#include "../http/headers.hpp"
#include "../memory/in_memory_storage.hpp"
#include "algorithm.hpp"
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
  /// `rate_limit.unit` as read, lower case ("second" .. "day"; "week" and "month" for calendar
  /// algorithms only, an extension).
  std::string unit;
  /// Extension for calendar algorithms: `rate_limit.time_zone` (IANA name), or empty.
  std::string time_zone;
  /// Extension for calendar algorithms: `rate_limit.first_day` of a week, or empty.
  std::string first_day;
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
  /// What the file says about this limit, for the algorithm's parameters
  /// (`params_from_limit`, algorithms/registry.hpp). Points into this rule.
  LimitSpec limit_spec() const noexcept { return LimitSpec{rate, unit, time_zone, first_day}; }
  /// Whether the limit uses the calendar extension (a week or month unit, a time zone or a
  /// first day), which only an algorithm with `from_limit` takes.
  bool uses_calendar() const noexcept {
    return unit == "week" || unit == "month" || !time_zone.empty() || !first_day.empty();
  }
};

/// A rule that applies to one request, and which counter of it.
/// Thread safety: a plain value. `rule` points into the `Rules` object that matched (a copy of a
/// `Rules` has its own rules), valid while that object lives.
struct RuleMatch {
  const Rule* rule = nullptr;
  /// The counter within the rule: the request's values for the rule's catch-all descriptors,
  /// each length-prefixed ("" for a rule whose descriptors all name a value).
  std::string key;
  /// "key=value" of the client for a per-client rule, "" for a shared one.
  std::string client;
  /// Where the storage keeps the counter (`Binding::part`'s tag): for a per-client rule the
  /// client's value as it appears in `key` (length-prefixed), so that all of a client's
  /// counters share one Redis Cluster slot; "" (the counter key itself) for a shared rule.
  /// A rule whose only catch-all is the client has `tag == key`: a limiter named `rule.id`
  /// deciding `key` then decides the very same counter, on every storage.
  std::string tag;
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
    r.unit = node.unit;
    r.time_zone = node.time_zone;
    r.first_day = node.first_day;
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
  /// a `requests_per_unit` that is negative (`-0` included), not a whole number or above 10^9,
  /// a duplicate descriptor (same key and value) on one level, a duplicate rule name, or a
  /// descriptor with neither `rate_limit` nor nested descriptors; and for what a hostile file
  /// could make the reader do (see `detail::RulesLimits`): more than 64 MiB of text, a second
  /// YAML document, an alias that refers to a node containing it, descriptors nested more than
  /// 32 deep, or more descriptors (aliases expanded) than one per 8 bytes of text. Linear in the
  /// descriptors read (duplicates are found with hash sets).
  /// `Registry` lists the algorithms a rule may name (default: the library's, `Algorithms`).
  template <class Registry = Algorithms>
  static Rules from_string(std::string_view yaml, std::string source = "<string>") {
    detail::AlgorithmNames names{[](std::string_view name) {
                                   std::optional<Algorithm> found;
                                   Registry::visit(name,
                                                   [&]<class M>() { found = Algorithm{M::name}; });
                                   return found;
                                 },
                                 Registry::names()};
    detail::RulesReader reader(source, std::move(names));
    const detail::RuleTree tree = reader.read(yaml);
    Rules r;
    r.domain_ = tree.domain;
    r.client_keys_ = tree.client_keys;
    r.roots_ = tree.roots;
    std::vector<Rule::Step> path;
    for (detail::RuleNode& n : r.roots_)
      detail::flatten(r.domain_, r.client_keys_, n, path, r.rules_);
    for (const Rule& rule : r.rules_) check_params<Registry>(rule, source);
    std::unordered_map<std::string_view, int> names_seen;  // linear time, not pairs
    for (const Rule& rule : r.rules_) {
      const auto [it, fresh] = names_seen.emplace(rule.name, rule.line);
      if (!fresh)
        throw std::invalid_argument(source + ":" + std::to_string(rule.line) + ": rule name \"" +
                                    rule.name + "\" already used at line " +
                                    std::to_string(it->second));
    }
    return r;
  }

  /// Reads and parses a rules file. Throws `std::invalid_argument` naming the file if it cannot
  /// be read, and as `from_string` for its content.
  template <class Registry = Algorithms>
  static Rules from_file(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw std::invalid_argument("rules file " + file.string() + ": cannot open");
    // Refused before it is read, so that a huge file costs no memory.
    std::error_code ec;
    if (const auto bytes = std::filesystem::file_size(file, ec);
        !ec && bytes > detail::RulesLimits::max_bytes)
      throw std::invalid_argument(
          file.string() + ":0: the file has " + std::to_string(bytes) + " bytes, more than the " +
          std::to_string(detail::RulesLimits::max_bytes) + " a rules file may have");
    std::ostringstream text;
    text << in.rdbuf();
    return from_string<Registry>(text.str(), file.string());
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
    std::string key, client, tag;
    walk(roots_, request, key, client, tag, out);
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
            std::string& key, std::string& client, std::string& tag,
            std::vector<RuleMatch>& out) const {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const detail::RuleNode& n = nodes[i];
      const std::string* value = detail::find_entry(request, n.key);
      if (value == nullptr) continue;
      if (n.has_value ? *value != n.value : has_exact(nodes, n.key, *value)) continue;
      const std::size_t key_size = key.size(), client_size = client.size(), tag_size = tag.size();
      if (!n.has_value) {
        detail::append_field(key, *value);
        if (client.empty() &&
            std::find(client_keys_.begin(), client_keys_.end(), n.key) != client_keys_.end()) {
          client = n.key + "=" + *value;
          detail::append_field(tag, *value);
        }
      }
      if (const Rule* r = rule_of(n))
        out.push_back(
            RuleMatch{r, key, r->per_client ? client : "", r->per_client ? tag : std::string{}});
      walk(n.children, request, key, client, tag, out);
      key.resize(key_size);
      client.resize(client_size);
      tag.resize(tag_size);
    }
  }

  static bool has_exact(const std::vector<detail::RuleNode>& nodes, std::string_view key,
                        std::string_view value) noexcept {
    return std::any_of(nodes.begin(), nodes.end(), [&](const detail::RuleNode& n) {
      return n.has_value && n.key == key && n.value == value;
    });
  }

  /// The calendar extension goes with an algorithm that reads it (`LimitSpecModel`), whose
  /// parameters are checked here so that a bad zone is reported with its line.
  template <class Registry>
  static void check_params(const Rule& rule, const std::string& source) {
    const std::string where = source + ":" + std::to_string(rule.line) + ": ";
    Registry::visit(rule.algorithm.name, [&]<class M>() {
      if constexpr (LimitSpecModel<M>) {
        LimitSpec spec = rule.limit_spec();
        if (spec.rate.count == 0) spec.rate.count = 1;  // a blocking rule: check the rest
        try {
          (void)M::from_limit(spec);
        } catch (const std::invalid_argument& e) {
          throw std::invalid_argument(where + e.what());
        }
      } else if (rule.uses_calendar()) {
        throw std::invalid_argument(
            where + "rate_limit.algorithm = \"" + std::string(M::name) +
            "\": takes no week or month unit, time_zone or first_day (extensions of calendar "
            "algorithms such as calendar_quota)");
      }
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

}  // namespace detail

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
    auto bindings = std::make_shared<std::vector<std::unique_ptr<AnyBinding>>>();
    for (const Rule& r : rules_->rules()) bindings->push_back(bind(r));
    bindings_ = std::move(bindings);
  }

  /// Decides a request of `cost` units (>= 1) with these descriptor entries: admitted iff every
  /// matching limit admits it, in which case each spends `cost`; denied otherwise, and then no
  /// limit spends anything. Throws `std::invalid_argument` if cost < 1; a storage may throw per
  /// its failure policy.
  RuleSetDecision decide(std::span<const DescriptorEntry> request, std::int64_t cost = 1) {
    Pending p = prepare(request, cost);
    if (p.parts.empty()) return finish(std::move(p), {}, true);
    std::vector<Decision> ds(p.parts.size());
    const bool all = storage_.decide_all(std::span<const typename Storage::Part>(p.parts),
                                         clock_.now(), std::span<Decision>(ds));
    return finish(std::move(p), std::move(ds), all);
  }

  /// `decide` without blocking: returns at once; `done(RuleSetDecision)` gets the decision
  /// exactly once, on the storage's I/O thread (Redis) or here before this returns (in
  /// process, or when Redis is not tried): see core/completion.hpp. The request is copied; the
  /// outcomes' `Rule` pointers stay valid while this set or a copy of the decision's set lives.
  /// Throws `std::invalid_argument` if cost < 1 (and then never calls `done`).
  /// Thread safety: safe from many threads.
  template <class F>
  requires std::invocable<F&, RuleSetDecision>
  void decide_async(std::span<const DescriptorEntry> request, std::int64_t cost, F&& done) {
    auto complete = detail::make_completion<RuleSetDecision>(std::forward<F>(done));
    auto p = std::make_shared<Pending>(prepare(request, cost));
    if constexpr (requires(std::function<void(std::vector<Decision>&&, bool)> f) {
                    storage_.decide_all_async(std::span<const typename Storage::Part>{},
                                              std::chrono::nanoseconds{}, f);
                  }) {
      if (!p->parts.empty()) {
        // The parts point into `p` and into the bindings: both ride along until the end.
        storage_.decide_all_async(std::span<const typename Storage::Part>(p->parts), clock_.now(),
                                  [p, bindings = bindings_, rules = rules_, complete](
                                      std::vector<Decision>&& ds, bool all) {
                                    detail::complete_safely(
                                        complete, finish(std::move(*p), std::move(ds), all));
                                  });
        return;
      }
    }
    detail::complete_safely(complete, decide_prepared(std::move(*p)));
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

  /// The rules (shared by copies of the decisions' `Rule` pointers; stable for the set's life).
  const Rules& rules() const noexcept { return *rules_; }
  /// The storage handle.
  Storage& storage() noexcept { return storage_; }
  /// The clock.
  C& clock() noexcept { return clock_; }

 private:
  /// A request matched and turned into storage parts, waiting for the storage's decisions.
  struct Pending {
    RuleSetDecision result;
    std::vector<RuleMatch> matches;  ///< the parts' keys and tags point into these
    std::vector<typename Storage::Part> parts;
    std::vector<std::size_t> where;  ///< the outcome of each part
    bool blocked = false;
  };

  Pending prepare(std::span<const DescriptorEntry> request, std::int64_t cost) const {
    detail::check_cost(cost);
    Pending p;
    p.matches = rules_->match(request);
    // A `requests_per_unit: 0` limit denies every request: nothing is spent anywhere, and the
    // other limits report their state as it is (a dry run).
    p.blocked = std::any_of(p.matches.begin(), p.matches.end(),
                            [](const RuleMatch& m) { return m.rule->blocks(); });
    p.parts.reserve(p.matches.size());
    p.result.outcomes.reserve(p.matches.size());
    for (std::size_t i = 0; i < p.matches.size(); ++i) {
      const RuleMatch& m = p.matches[i];
      p.result.outcomes.push_back({m.rule, m.key, m.client, detail::blocked_decision()});
      if (m.rule->blocks()) continue;
      p.parts.push_back(binding_of(m).part(m.key, Operation{cost, p.blocked}, m.tag));
      p.where.push_back(i);
    }
    return p;
  }

  RuleSetDecision decide_prepared(Pending&& p) {
    if (p.parts.empty()) return finish(std::move(p), {}, true);
    std::vector<Decision> ds(p.parts.size());
    const bool all = storage_.decide_all(std::span<const typename Storage::Part>(p.parts),
                                         clock_.now(), std::span<Decision>(ds));
    return finish(std::move(p), std::move(ds), all);
  }

  static RuleSetDecision finish(Pending&& p, std::vector<Decision> ds, bool all) {
    RuleSetDecision result = std::move(p.result);
    if (p.matches.empty()) return result;
    for (std::size_t i = 0; i < ds.size(); ++i) result.outcomes[p.where[i]].decision = ds[i];
    result.allowed = !p.blocked && all;
    std::size_t best = 0;
    for (std::size_t i = 1; i < result.outcomes.size(); ++i)
      if (detail::more_restrictive(result.outcomes[i].decision, result.outcomes[best].decision))
        best = i;
    result.deciding = best;
    return result;
  }

  /// A rule's binding, whatever its model: it only makes parts.
  struct AnyBinding {
    virtual ~AnyBinding() = default;
    virtual typename Storage::Part part(std::string_view key, const Operation& op,
                                        std::string_view tag) const = 0;
  };
  template <class B>
  struct BindingOf final : AnyBinding {
    explicit BindingOf(B b) : binding(std::move(b)) {}
    typename Storage::Part part(std::string_view key, const Operation& op,
                                std::string_view tag) const override {
      return binding.part(key, op, tag);
    }
    B binding;
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

  const AnyBinding& binding_of(const RuleMatch& m) const {
    return *(*bindings_)[static_cast<std::size_t>(m.rule - rules_->rules().data())];
  }

  std::shared_ptr<const Rules> rules_;
  Storage storage_;
  C clock_;
  /// Shared with decisions in flight (decide_async), which may outlive the set.
  std::shared_ptr<const std::vector<std::unique_ptr<AnyBinding>>> bindings_;
};

}  // namespace ratelimit
