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
/// The format is the one of Envoy's rate limit service (envoyproxy/ratelimit), whole:
/// `domain`; `descriptors`, each with `key`, optional `value` (a `*` anywhere in it is a
/// wildcard for any run of characters; `value: ""` is no value), optional `rate_limit`
/// (`unit`: second, minute, hour or day, any case; `requests_per_unit`: 0 to 10^9; optional
/// `name`; optional `replaces: [{name: ...}]`; or `unlimited: true`), optional nested
/// `descriptors`, the flags `shadow_mode`, `quota_mode`, `detailed_metric`, `value_to_metric`
/// and `share_threshold` (true or false), and `metadata` (a mapping). A descriptor with
/// neither `rate_limit` nor nested descriptors exempts its value. What the library does with
/// each field:
/// - `shadow_mode`: a limit decided and spent as if enforced whose denial never denies the
///   request (descriptor-list matching; reported in `RateLimitResponse::shadow_denials`).
/// - `quota_mode`: a limit whose denial only drops it, unless every quota-mode limit of the
///   request denies, which denies the request (descriptor-list matching, as the reference).
/// - `replaces`: a limit named (by its `name`) in the `replaces` of another limit that applies
///   to the same request is not decided (descriptor-list matching).
/// - `share_threshold` (only on a wildcard value): every matching value shares one counter;
///   without it each matching value has its own.
/// - `detailed_metric`, `value_to_metric`, `metadata`: kept on the `Rule` for the caller's
///   metrics and responses; the library keeps no metrics and decides the same either way.
///
/// The flat `decide` applies every limit it matches as enforced (it ignores `shadow_mode`,
/// `quota_mode` and `replaces`). Extensions of this library, which the reference service
/// refuses: `rate_limit.algorithm` (sliding_counter, the default, token_bucket, leaky_bucket,
/// fixed_window or sliding_log; a bucket gets capacity or queue size `requests_per_unit`,
/// refilled or drained at `requests_per_unit` per `unit`), the top-level `client_keys` (see
/// "Per client and shared rules"), and for calendar algorithms (`algorithm: calendar_quota`, in
/// the registry `QuotaAlgorithms` of ratelimit/calendar.hpp) the units `week` and `month`
/// and the fields `time_zone` (IANA name, default UTC) and `first_day` (of a week, default
/// monday); other algorithms refuse those. `requests_per_unit: 0` blocks every matching request
/// (denied with `retry_after == Decision::never`). Several files: `RulesConfig`
/// (rules/config.hpp). Stricter than the reference: a rule name used twice in a domain and a
/// missing `requests_per_unit` (0 there) are refused; `unlimited: true` with a
/// `requests_per_unit` is accepted (ignored) as there.
///
/// ## Matching: the flat request (`RuleSet::decide(entries)`)
/// A request is one list of descriptor entries, e.g. `{{"api_key", K}, {"path", "/login"}}` or
/// `{{"plan", "free"}, {"api_key", K}}` (if a key repeats, its first entry counts). From the top
/// level down, for each key among a level's descriptors that the request carries, the
/// descriptor with that exact value is taken, else the first (in file order) whose wildcard
/// matches it, else the one with that key and no value; a taken descriptor with a limit
/// matches, and its nested descriptors are tried in turn. Every matching limit applies. Each
/// limit keeps one counter per combination of the request's values for the descriptors on its
/// path that have no value or a wildcard without `share_threshold` (e.g. one per API key).
///
/// ## Matching: Envoy's descriptor list (`RuleSet::decide(const RateLimitRequest&)`)
/// As the reference service: a request is a domain and several descriptors, each an ordered
/// list of entries; each descriptor walks the tree one level per entry (exact value, else the
/// first matching wildcard, else the key alone) and gets the limit where its last entry lands,
/// if any (see `Rules::lookup`). So `{{"path", "/login"}, {"api_key", K}}` gets only the limit
/// nested under `path: /login`, and `{{"api_key", K}}` only a top-level `api_key` limit: a
/// request sends one descriptor per limit it wants. `RateLimitService` (rules/service.hpp)
/// serves every domain of a `RulesConfig` and reloads it atomically.
///
/// ## Per client and shared rules
/// A rule is *per client* when its path has a catch-all (no `value`, or a wildcard without
/// `share_threshold`) descriptor whose key is one of `client_keys` (default `api_key` and
/// `remote_address`): its counters are per client, and its `RuleMatch::client` names the client
/// ("api_key=K"). Other rules are *shared*: one counter for every client that matches (e.g. `path:
/// /login` with its own limit).
///
/// ## Atomicity
/// `RuleSet::decide` hands every matching limit to the storage's `decide_all` with the
/// request's real cost: all admit and spend, or nothing changes anywhere. The descriptor-list
/// call too (shadow- and quota-mode limits that deny are dropped and the rest decided again),
/// where the reference service counts every descriptor even when another is over its limit. The
/// storage is the unit of atomicity (in process: the counters' shard locks, taken in a fixed order;
/// on Redis: one script), so a rule set is atomic with respect to every other decision on its
/// counters, a limiter's included. On Redis Cluster a request's keys must share a slot: per-client
/// limits share the client's hash tag (`RuleMatch::tag`); a request that also matches a shared
/// limit spans slots and is decided by the failure policy (degraded). See docs/cluster.md.

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
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <unordered_set>
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
#include "../core/listener.hpp"
#include "../core/rate.hpp"
#include "../core/storage.hpp"
#include "../http/headers.hpp"
#include "../memory/in_memory_storage.hpp"
#include "algorithm.hpp"
#include "detail/yaml.hpp"
#include "request.hpp"

namespace ratelimit {

/// One limit of a rules file: a descriptor with a `rate_limit`, identified by its path.
/// Thread safety: immutable once loaded.
struct Rule {
  /// One level of the path: a key, and the value it requires (`has_value`), a wildcard pattern
  /// (`wildcard`) or any value.
  struct Step {
    std::string key;
    /// The exact value, or the wildcard pattern (each `*` any run of characters).
    std::string value;
    bool has_value = false;
    /// `value` holds a `*`.
    bool wildcard = false;
    /// `share_threshold: true` (only with a wildcard): every matching value shares the counter.
    bool shared = false;
    /// Whether the request's value at this step is part of the counter key: no value, or a
    /// wildcard without `share_threshold` (each matching value has its own counter).
    bool varies() const noexcept { return !has_value || (wildcard && !shared); }
  };

  /// `rate_limit.name`, else the path written as `key` or `key=value` joined by '|'
  /// (e.g. "path=/login|api_key"). Unique within a domain.
  std::string name;
  /// `rate_limit.name` as written, "" if none: only a limit named in the file can be named by
  /// another's `replaces`.
  std::string given_name;
  /// `rate_limit.replaces[].name`: the limits this one replaces when both apply to a request
  /// (descriptor-list matching, `RuleSet::decide(const RateLimitRequest&)`, only).
  std::vector<std::string> replaces;
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
  /// `shadow_mode: true`: decided and spent as if enforced, but its denial never denies the
  /// request (descriptor-list matching; the flat `decide` enforces it like any limit).
  bool shadow_mode = false;
  /// `quota_mode: true`: its denial denies the request only when every quota-mode limit of the
  /// request denies (descriptor-list matching; the flat `decide` enforces it like any limit).
  bool quota_mode = false;
  /// `detailed_metric` and `value_to_metric`: kept for the caller's metrics; the library
  /// keeps no metrics and decides the same either way.
  bool detailed_metric = false;
  bool value_to_metric = false;
  /// `metadata`, as YAML flow text ("" if none): kept for the caller, never interpreted.
  std::string metadata;
  /// The rules source (file name) and line of the descriptor (1-based).
  std::string source;
  int line = 0;
  /// Stable identity used as the storage's limiter name: the domain, the path and the unit,
  /// each part length-prefixed (two different paths or units never share counters; the same
  /// file loaded by several processes, or reloaded with this limit unchanged, shares them).
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
  /// The counter within the rule: the request's values for the rule's varying descriptors (no
  /// value, or a wildcard without `share_threshold`), each length-prefixed ("" for a rule
  /// whose descriptors all name a value or a shared wildcard).
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

/// Where one descriptor of a descriptor-list request lands (`Rules::lookup`).
/// Thread safety: a plain value; `rule` points into the `Rules` that looked it up.
struct DescriptorMatch {
  /// The limit that applies: the one of the descriptor where the last entry lands; null when
  /// the entries leave the tree, land on a descriptor without a limit, or on an unlimited one.
  const Rule* rule = nullptr;
  /// The last entry landed on `rate_limit: {unlimited: true}`.
  bool unlimited = false;
  /// The landing descriptor's `rate_limit.name` and `replaces` (also for an unlimited one,
  /// whose `replaces` count as in the reference).
  std::string name;
  std::vector<std::string> replaces;
  /// The counter within `rule` (see `RuleMatch::key`).
  std::string key;
  /// The storage's co-location tag for the counter (see `RuleMatch::tag`): the first client
  /// value among the varying entries when the rule is per client, else "".
  std::string tag;
};

/// One rules source: a name for error messages (e.g. the file name) and its YAML text.
/// Thread safety: a plain value.
struct RulesSource {
  std::string name;
  std::string text;
};

namespace detail {

inline void append_field(std::string& out, std::string_view s) {
  out += std::to_string(s.size());
  out += ':';
  out += s;
}

inline void flatten(const std::string& domain, const std::vector<std::string>& client_keys,
                    const std::vector<std::string>& sources, RuleNode& node,
                    std::vector<Rule::Step>& path, std::vector<Rule>& out) {
  path.push_back(
      {node.key, node.value, node.has_value, node.wildcard, node.wildcard && node.share_threshold});
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
    r.source = sources[node.file];
    r.given_name = node.name;
    r.replaces = node.replaces;
    r.shadow_mode = node.shadow_mode;
    r.quota_mode = node.quota_mode;
    r.detailed_metric = node.detailed_metric;
    r.value_to_metric = node.value_to_metric;
    r.metadata = node.metadata;
    for (const auto& s : path)
      if (s.varies() &&
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
    // The unit: a limit whose unit changes starts afresh (its counts meant another window).
    r.id += '@';
    r.id += std::to_string(std::chrono::duration_cast<std::chrono::seconds>(r.rate.period).count());
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
  if (!node.children.empty()) node.index = std::make_shared<const LevelIndex>(node.children);
  for (RuleNode& child : node.children) flatten(domain, client_keys, sources, child, path, out);
  path.pop_back();
}

/// The value of a request's first entry with a key. The flat match asks once per descriptor of
/// the file it visits, so a large request is hashed once (a scan per question cost descriptors
/// x entries: 0.9 s for 10,000 of each); a small one is scanned, without allocating.
class FirstEntries {
 public:
  explicit FirstEntries(std::span<const DescriptorEntry> request) : request_(request) {
    if (request.size() <= scanned) return;
    first_.reserve(request.size());
    for (const DescriptorEntry& e : request) first_.try_emplace(e.key, &e.value);
  }
  /// The value of the first entry with `key`, or nullptr.
  const std::string* find(std::string_view key) const {
    if (request_.size() <= scanned) {
      for (const DescriptorEntry& e : request_)
        if (e.key == key) return &e.value;
      return nullptr;
    }
    const auto it = first_.find(key);
    return it == first_.end() ? nullptr : it->second;
  }

 private:
  static constexpr std::size_t scanned = 8;
  std::span<const DescriptorEntry> request_;
  std::unordered_map<std::string_view, const std::string*> first_;
};

/// The registry's side of reading a rules file (see `AlgorithmNames`).
template <class Registry>
AlgorithmNames algorithm_names() {
  return AlgorithmNames{[](std::string_view name) {
                          std::optional<Algorithm> found;
                          Registry::visit(name, [&]<class M>() { found = Algorithm{M::name}; });
                          return found;
                        },
                        Registry::names()};
}

}  // namespace detail

/// The limits of one domain, from one rules file or several, independent of where their
/// counters live.
/// Thread safety: immutable once loaded; `match` and `lookup` are safe from many threads.
class Rules {
 public:
  /// Parses rules from YAML text; `source` names it in error messages (e.g. the file name).
  /// Throws `std::invalid_argument` "SOURCE:LINE: problem" for invalid YAML, an unknown or
  /// repeated field, a missing `domain`, `descriptors` or `key`, an empty `domain` or `key`, a
  /// key or value that is not text, a list where a mapping belongs (or the reverse), an
  /// unknown unit or algorithm, a `requests_per_unit` that is negative (`-0` included), not a
  /// whole number or above 10^9, `unlimited: true` with a unit, a `replaces` entry that names
  /// nothing or the limit itself, `share_threshold` on a value without `*`, a flag that is not
  /// true or false, a duplicate descriptor (same key and value) on one level, or a duplicate
  /// rule name; and for what a hostile file could make the reader do (see
  /// `detail::RulesLimits`): more than 64 MiB of text, a second YAML document, an alias that
  /// refers to a node containing it, descriptors nested more than 32 deep, or more descriptors
  /// (aliases expanded) than one per 8 bytes of text. Linear in the descriptors read
  /// (duplicates are found with hash sets). A descriptor with neither `rate_limit` nor nested
  /// descriptors exempts its value (no limit applies to a request that lands on it).
  /// `Registry` lists the algorithms a rule may name (default: the library's, `Algorithms`).
  template <class Registry = Algorithms>
  static Rules from_string(std::string_view yaml, std::string source = "<string>") {
    detail::RulesReader reader(source, detail::algorithm_names<Registry>());
    std::vector<detail::RuleTree> trees;
    trees.push_back(reader.read(yaml));
    return from_trees<Registry>(std::move(trees), {std::move(source)});
  }

  /// Reads and parses a rules file. Throws `std::invalid_argument` naming the file if it cannot
  /// be read, and as `from_string` for its content.
  template <class Registry = Algorithms>
  static Rules from_file(const std::filesystem::path& file) {
    return from_string<Registry>(read_file(file), file.string());
  }

  /// The text of a rules file (at most `detail::RulesLimits::max_bytes`, refused before it is
  /// read). Throws `std::invalid_argument` naming the file if it cannot be read or is too big.
  static std::string read_file(const std::filesystem::path& file) {
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
    return text.str();
  }

  /// Builds one domain's rules from parsed files (`trees[i]` read from `sources[i]`, each
  /// node's `file` its position), all of that domain, merged in order: their top-level
  /// descriptors form one list, checked for duplicates across files. Used by `from_string` and
  /// `RulesConfig`. `Registry`: as `from_string`'s. Throws `std::invalid_argument`
  /// "SOURCE:LINE: problem" for a duplicate descriptor or rule name across the files,
  /// `client_keys` that differ between them, or an algorithm's parameters out of its range.
  template <class Registry = Algorithms>
  static Rules from_trees(std::vector<detail::RuleTree> trees, std::vector<std::string> sources) {
    Rules r;
    r.sources_ = std::move(sources);
    r.domain_ = trees.front().domain;
    r.client_keys_ = trees.front().client_keys;
    std::unordered_map<std::string, std::pair<std::size_t, int>> seen;  // key=value -> where
    for (std::size_t t = 0; t < trees.size(); ++t) {
      detail::RuleTree& tree = trees[t];
      const std::string& here = r.sources_[tree.roots.empty() ? 0 : tree.roots.front().file];
      if (t > 0 && tree.client_keys_given && tree.client_keys != r.client_keys_)
        throw std::invalid_argument(here + ":1: client_keys differ from those of " +
                                    r.sources_[trees.front().roots.front().file] +
                                    " (one domain has one list of client keys)");
      for (detail::RuleNode& n : tree.roots) {
        std::string id = n.key;
        id += n.has_value ? '=' : '*';
        id += n.value;
        const auto [it, fresh] = seen.emplace(std::move(id), std::make_pair(n.file, n.line));
        if (!fresh)
          throw std::invalid_argument(
              r.sources_[n.file] + ":" + std::to_string(n.line) + ": duplicate descriptor key \"" +
              n.key + "\"" + (n.has_value ? " value \"" + n.value + "\"" : "") + " (first at " +
              r.sources_[it->second.first] + ":" + std::to_string(it->second.second) + ")");
        r.roots_.push_back(std::move(n));
      }
    }
    std::vector<Rule::Step> path;
    r.index_ = std::make_shared<const detail::LevelIndex>(r.roots_);
    for (detail::RuleNode& n : r.roots_)
      detail::flatten(r.domain_, r.client_keys_, r.sources_, n, path, r.rules_);
    for (const Rule& rule : r.rules_) check_params<Registry>(rule, rule.source);
    std::unordered_map<std::string_view, const Rule*> names_seen;  // linear time, not pairs
    for (const Rule& rule : r.rules_) {
      const auto [it, fresh] = names_seen.emplace(rule.name, &rule);
      if (!fresh)
        throw std::invalid_argument(
            rule.source + ":" + std::to_string(rule.line) + ": rule name \"" + rule.name +
            "\" already used at " +
            (it->second->source == rule.source ? "" : it->second->source + ":") + "line " +
            std::to_string(it->second->line));
    }
    return r;
  }

  /// The domain.
  const std::string& domain() const noexcept { return domain_; }
  /// Every limit of the domain, in file order (parents before their nested descriptors).
  const std::vector<Rule>& rules() const noexcept { return rules_; }
  /// The descriptor keys that identify a client.
  const std::vector<std::string>& client_keys() const noexcept { return client_keys_; }
  /// The names of the sources the rules were read from (`Rule::source` is one of them).
  const std::vector<std::string>& sources() const noexcept { return sources_; }

  /// The limits that apply to a request with these descriptor entries (the flat matching), in
  /// file order, each with its counter key (see the file comment for the matching rules).
  std::vector<RuleMatch> match(std::span<const DescriptorEntry> request) const {
    std::vector<RuleMatch> out;
    std::string key, client, tag;
    walk(roots_, *index_, detail::FirstEntries(request), key, client, tag, out);
    std::sort(out.begin(), out.end(),
              [](const RuleMatch& a, const RuleMatch& b) { return a.rule < b.rule; });
    return out;
  }
  /// Same, from an initializer list: `rules.match({{"api_key", "K"}, {"path", "/login"}})`.
  std::vector<RuleMatch> match(std::initializer_list<DescriptorEntry> request) const {
    return match(std::span<const DescriptorEntry>(request.begin(), request.size()));
  }

  /// Where one descriptor of a descriptor-list request lands, as in Envoy's rate limit
  /// service: from the top level, each entry in order takes, among the current level's
  /// descriptors with its key, the one with its exact value, else the first (in file order)
  /// whose wildcard matches, else the one with no value; then the next entry goes one level
  /// down. The limit of the descriptor where the last entry lands applies; none when an entry
  /// finds no descriptor, or an entry other than the last lands on a descriptor without nested
  /// descriptors (the request is deeper than the file), or the landing descriptor has no limit
  /// or an unlimited one. Entries are not reordered and a key may repeat (one level each).
  DescriptorMatch lookup(std::span<const DescriptorEntry> entries) const {
    DescriptorMatch out;
    if (entries.empty()) return out;
    const std::vector<detail::RuleNode>* level = &roots_;
    const detail::LevelIndex* index = index_.get();
    std::string key, tag;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const DescriptorEntry& e = entries[i];
      const std::ptrdiff_t at = index->pick(*level, e.key, e.value);
      if (at < 0) return DescriptorMatch{};
      const detail::RuleNode& n = (*level)[static_cast<std::size_t>(at)];
      if (!n.has_value || (n.wildcard && !n.share_threshold)) {
        detail::append_field(key, e.value);
        if (tag.empty() &&
            std::find(client_keys_.begin(), client_keys_.end(), e.key) != client_keys_.end())
          detail::append_field(tag, e.value);
      }
      if (i + 1 == entries.size()) {
        out.rule = rule_of(n);
        out.unlimited = n.unlimited;
        out.name = n.name;
        out.replaces = n.replaces;
        if (out.rule != nullptr) {
          out.key = std::move(key);
          if (out.rule->per_client) out.tag = std::move(tag);
        }
        return out;
      }
      if (n.children.empty()) return DescriptorMatch{};
      level = &n.children;
      index = n.index.get();
    }
    return out;
  }
  /// Same, from an initializer list: `rules.lookup({{"path", "/login"}, {"api_key", "K"}})`.
  DescriptorMatch lookup(std::initializer_list<DescriptorEntry> entries) const {
    return lookup(std::span<const DescriptorEntry>(entries.begin(), entries.size()));
  }

 private:
  void walk(const std::vector<detail::RuleNode>& nodes, const detail::LevelIndex& index,
            const detail::FirstEntries& request, std::string& key, std::string& client,
            std::string& tag, std::vector<RuleMatch>& out) const {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const detail::RuleNode& n = nodes[i];
      const std::string* value = request.find(n.key);
      if (value == nullptr) continue;
      // The descriptor this key's value lands on: exact, else first wildcard, else no value.
      if (index.pick(nodes, n.key, *value) != static_cast<std::ptrdiff_t>(i)) continue;
      const std::size_t key_size = key.size(), client_size = client.size(), tag_size = tag.size();
      if (!n.has_value || (n.wildcard && !n.share_threshold)) {
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
      if (n.index) walk(n.children, *n.index, request, key, client, tag, out);
      key.resize(key_size);
      client.resize(client_size);
      tag.resize(tag_size);
    }
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
  std::vector<std::string> sources_;
  std::vector<detail::RuleNode> roots_;
  std::shared_ptr<const detail::LevelIndex> index_;  ///< of `roots_`
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

/// What one descriptor of a descriptor-list request came to (Envoy's `DescriptorStatus`).
/// Thread safety: a plain value; `rule` points into the rules of the response's `rules`.
struct DescriptorStatus {
  enum class Code { ok, over_limit };

  /// This descriptor's own verdict: `over_limit` when its limit denied (for a shadow-mode limit:
  /// would have denied). `ok` when no limit applied, and for a check without spending
  /// (`hits == 0`).
  Code code = Code::ok;
  /// The rules' limit where the descriptor landed (also when replaced), or null.
  const Rule* rule = nullptr;
  /// The descriptor's own limit (`RateLimitDescriptor::limit`), applied instead of the rules'.
  std::optional<Rate> override_rate;
  /// The descriptor landed on an unlimited limit: ok, nothing decided (Envoy reports the
  /// maximum remaining).
  bool unlimited = false;
  /// `rule` was named in the `replaces` of another limit of the request: not decided.
  bool replaced = false;
  /// `rule` is in shadow mode: its denials never deny the request.
  bool shadow = false;
  /// A limit was decided for this descriptor (`decision` is meaningful).
  bool evaluated = false;
  /// The counter within the limit (see `RuleMatch::key`; for an override, every entry).
  std::string key;
  /// The units it spent or would spend (its `hits_addend`, else the request's, else 1).
  std::int64_t hits = 1;
  /// The limit's decision: committed when the request was admitted and this limit spent;
  /// otherwise the dry run's (the counter as it is). Descriptors landing on one counter share
  /// one decision for their summed hits.
  Decision decision{};
};

/// The decision on a descriptor-list request (`RuleSet::decide(const RateLimitRequest&)`).
/// Thread safety: a plain value.
struct RateLimitResponse {
  /// true iff no enforced limit denied (shadow-mode limits never deny; quota-mode limits deny
  /// only all together). When false, no counter changed.
  bool allowed = true;
  /// One per descriptor of the request, in its order.
  std::vector<DescriptorStatus> statuses;
  /// The descriptors whose shadow-mode limit would have denied, in request order.
  std::vector<std::size_t> shadow_denials;
  /// The rules the statuses' `rule` pointers point into (kept alive by the response).
  std::shared_ptr<const Rules> rules;

  /// The decision that speaks for the request among the evaluated, non-shadow limits (a denial
  /// with the longest wait, else the fewest remaining), with `allowed` for the whole request;
  /// admitted with every other field 0 when none was evaluated.
  Decision decision() const {
    Decision d{};
    const DescriptorStatus* best = nullptr;
    for (const DescriptorStatus& s : statuses)
      if (s.evaluated && !s.shadow &&
          (best == nullptr || detail::more_restrictive(s.decision, best->decision)))
        best = &s;
    if (best != nullptr) d = best->decision;
    d.allowed = allowed;
    return d;
  }

  /// Each evaluated, non-shadow limit's policy and decision, for `rate_limit_headers`; an
  /// override's policy is named by its entries ("key=value|...").
  std::vector<PolicyDecision> policies() const {
    std::vector<PolicyDecision> out;
    for (const DescriptorStatus& s : statuses) {
      if (!s.evaluated || s.shadow) continue;
      if (s.rule != nullptr && !s.override_rate) {
        out.push_back({s.rule->policy(), s.decision});
      } else if (s.override_rate) {
        out.push_back(
            {QuotaPolicy{"override", s.override_rate->count, s.override_rate->period}, s.decision});
      }
    }
    return out;
  }

  /// The response headers (see http.hpp); empty when no limit was evaluated.
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
    bind_overrides();
  }

  /// Decides a request of `cost` units (>= 1) with these descriptor entries: admitted iff every
  /// matching limit admits it, in which case each spends `cost`; denied otherwise, and then no
  /// limit spends anything. Throws `std::invalid_argument` if cost < 1; a storage may throw per
  /// its failure policy.
  RuleSetDecision decide(std::span<const DescriptorEntry> request, std::int64_t cost = 1) {
    const detail::ObserverSet* obs = observers_.current();
    if (obs == nullptr) [[likely]]
      return decide_prepared(prepare(request, cost));
    const bool sample = detail::sample_latency();
    const auto start =
        sample ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    RuleSetDecision r = decide_prepared(prepare(request, cost));
    const auto latency =
        sample ? std::chrono::steady_clock::now() - start : std::chrono::nanoseconds{-1};
    report(*obs, *rules_, request, cost, r, latency);
    return r;
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
    if (const detail::ObserverSet* obs = observers_.current()) {
      // The completion may outlive the rule set: it holds the listener set (a reference) and a
      // copy of the request.
      complete = [set = obs->shared_from_this(), rules = rules_,
                  req = std::vector<DescriptorEntry>(request.begin(), request.end()), cost,
                  inner = std::move(complete)](RuleSetDecision d) {
        report(*set, *rules, req, cost, d, std::chrono::nanoseconds{-1});
        inner(std::move(d));
      };
    }
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
    report(*obs, *rules_, request, r, latency);
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
        report(*set, *rules, req, r, std::chrono::nanoseconds{-1});
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
      detail::complete_safely(complete, decide(request));
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
    std::string out = rules.domain();
    for (const Rule::Step& step : rule.path) {
      out += '.';
      out += step.key;
      const bool from_request = rule.detailed_metric || (rule.value_to_metric && step.varies());
      const std::string* v = from_request ? value_of(step.key) : nullptr;
      if (v != nullptr) {
        out += '_';
        out += *v;
      } else if (step.has_value) {
        out += '_';
        out += step.value;
      }
    }
    return out;
  }

 private:
  struct ListState;  // below, after Group

  /// Tells the listeners of `obs` what a flat request came to (see `attach_listener`).
  static void report(const detail::ObserverSet& obs, const Rules& rules,
                     std::span<const DescriptorEntry> request, std::int64_t cost,
                     const RuleSetDecision& r, std::chrono::nanoseconds latency) noexcept {
    try {
      const detail::FirstEntries first(request);  // hashed once when large, as `match` does
      for (const RuleOutcome& o : r.outcomes) {
        if (!o.decision.degraded && o.decision.allowed && !r.allowed) continue;  // a dry run
        const std::string name =
            metric_name(rules, *o.rule, [&](std::string_view k) { return first.find(k); });
        detail::Observers::decision(obs, name, o.client, cost, o.decision, latency);
      }
    } catch (...) {  // out of memory building a name: the decision stands
    }
  }

  /// Tells the listeners of `obs` what a descriptor-list request came to.
  static void report(const detail::ObserverSet& obs, const Rules& rules,
                     const RateLimitRequest& request, const RateLimitResponse& r,
                     std::chrono::nanoseconds latency) noexcept {
    try {
      for (std::size_t i = 0; i < r.statuses.size(); ++i) {
        const DescriptorStatus& st = r.statuses[i];
        if (!st.evaluated || st.hits == 0) continue;
        const bool over = st.code == DescriptorStatus::Code::over_limit;
        Decision d = st.decision;
        if (!d.degraded && !over && !r.allowed) continue;  // a dry run
        if (st.shadow && over) {
          d.allowed = true;
          d.shadow_denied = true;
        }
        const auto& entries = request.descriptors[i].entries;
        std::string name, client;
        if (st.rule != nullptr && !st.override_rate) {
          // Entry j of the descriptor landed on step j of the rule's path.
          name = metric_name(rules, *st.rule, [&](std::string_view k) -> const std::string* {
            for (std::size_t j = 0; j < entries.size() && j < st.rule->path.size(); ++j)
              if (st.rule->path[j].key == k) return &entries[j].value;
            return nullptr;
          });
          if (st.rule->per_client)
            for (std::size_t j = 0; j < entries.size() && j < st.rule->path.size(); ++j)
              if (st.rule->path[j].varies() &&
                  std::find(rules.client_keys().begin(), rules.client_keys().end(),
                            entries[j].key) != rules.client_keys().end()) {
                client = entries[j].key + "=" + entries[j].value;
                break;
              }
        } else {
          name = rules.domain() + ".override";
        }
        detail::Observers::decision(obs, name, client, st.hits, d, latency);
      }
    } catch (...) {  // out of memory building a name: the decision stands
    }
  }

  RateLimitResponse decide_list(const RateLimitRequest& request) {
    ListState state = prepare_list(request);
    while (next_round(state)) {
      std::vector<Decision> ds(state.parts.size());
      const bool all = storage_.decide_all(std::span<const typename Storage::Part>(state.parts),
                                           state.now, std::span<Decision>(ds));
      absorb(state, ds, all);
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
    if (request.domain != rules_->domain()) {
      state.finished = true;
      return state;
    }
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
    std::vector<Group>& groups = state.groups;
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
          g.tag = tags[i];
          g.kind = st.rule->shadow_mode  ? Kind::shadow
                   : st.rule->quota_mode ? Kind::quota
                                         : Kind::enforced;
        }
        add(g, st, i);
      }
    }

    // 3. Rounds (see `next_round`). A group that blocks never reaches storage: its decision
    // is `blocked_decision()`.
    for (Group& g : groups) {
      if (g.kind == Kind::quota) ++state.quota_total;
      if (!g.blocks) continue;
      g.active = false;
      if (g.kind == Kind::enforced && g.hits > 0) state.denied = true;
      if (g.kind == Kind::quota) ++state.quota_out;
    }
    if (state.quota_total > 0 && state.quota_out == state.quota_total) state.denied = true;
    state.now = clock_.now();
    return state;
  }

  /// Prepares the next round: every round is one all-or-nothing `decide_all` over the groups
  /// still in (dry runs once the request is denied). false when the request is decided.
  static bool next_round(ListState& s) {
    s.parts.clear();
    s.in.clear();
    if (s.finished) return false;
    for (std::size_t k = 0; k < s.groups.size(); ++k) {
      const Group& g = s.groups[k];
      if (!g.active) continue;
      const bool check = g.hits == 0;
      s.parts.push_back(
          g.binding->part(g.key, Operation{check ? 1 : g.hits, s.denied || check}, g.tag));
      s.in.push_back(k);
    }
    if (s.parts.empty()) s.finished = true;
    return !s.finished;
  }

  /// Takes a round's decisions: a round that an enforced limit denies ends the request
  /// (nothing spent); one that only shadow- or quota-mode limits (or checks without hits) deny
  /// drops those and goes again, so a request takes at most one round per group.
  static void absorb(ListState& s, const std::vector<Decision>& ds, bool all) {
    for (std::size_t k = 0; k < s.in.size(); ++k) s.groups[s.in[k]].decision = ds[k];
    s.finished = true;
    if (all || s.denied) return;
    bool dropped = false;
    for (const std::size_t k : s.in) {
      Group& g = s.groups[k];
      if (g.decision.allowed) continue;
      if (g.kind == Kind::enforced && g.hits > 0) {
        s.denied = true;
      } else {
        g.active = false;
        dropped = true;
        if (g.kind == Kind::quota) ++s.quota_out;
      }
    }
    if (s.quota_total > 0 && s.quota_out == s.quota_total) s.denied = true;
    if (s.denied) return;  // this round's decisions are the dry run's: nothing was spent
    if (!dropped) {        // a storage that denied without a denying part: deny, spend nothing
      s.denied = true;
      return;
    }
    s.finished = false;
  }

  static RateLimitResponse finish_list(ListState&& s) {
    RateLimitResponse res = std::move(s.res);
    res.allowed = !s.denied;
    for (const Group& g : s.groups)
      for (const std::size_t i : g.members) {
        DescriptorStatus& st = res.statuses[i];
        st.decision = g.decision;
        if (g.hits > 0 && !g.decision.allowed) st.code = DescriptorStatus::Code::over_limit;
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
    if (!next_round(*s)) {
      detail::complete_safely(complete, finish_list(std::move(*s)));
      return;
    }
    try {
      storage.decide_all_async(
          std::span<const typename Storage::Part>(s->parts), s->now,
          [storage, s, bindings, overrides, complete](std::vector<Decision>&& ds, bool all) {
            absorb(*s, ds, all);
            run_rounds(storage, s, bindings, overrides, complete);
          });
    } catch (const std::exception&) {
      // Only a later round can get here (the parts were accepted once): deny, spend nothing.
      s->denied = true;
      s->finished = true;
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

  /// A counter of a descriptor-list request: a limit (a rule, or an override's unit) and key.
  enum class Kind { enforced, shadow, quota };
  struct Group {
    const void* identity = nullptr;
    std::string key, tag;
    const AnyBinding* binding = nullptr;  ///< null when it blocks
    std::unique_ptr<AnyBinding> owned;    ///< an override's binding at its rate
    std::int64_t hits = 0;
    Kind kind = Kind::enforced;
    bool blocks = false;
    bool active = true;
    Decision decision = detail::blocked_decision();
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

  /// A descriptor-list request matched and grouped by counter, between its rounds.
  struct ListState {
    RateLimitResponse res;
    std::vector<Group> groups;
    std::unordered_map<std::string, std::size_t> group_index;  ///< identity bytes + key -> group
    std::vector<std::size_t> in;                               ///< the groups of the current round
    std::vector<typename Storage::Part> parts;
    bool denied = false;
    bool finished = false;
    std::size_t quota_total = 0, quota_out = 0;
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

  const AnyBinding& binding_of(const RuleMatch& m) const { return binding_of(*m.rule); }
  const AnyBinding& binding_of(const Rule& r) const {
    return *(*bindings_)[static_cast<std::size_t>(&r - rules_->rules().data())];
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
  std::shared_ptr<const std::vector<std::unique_ptr<AnyBinding>>> bindings_;
  std::shared_ptr<const std::array<std::unique_ptr<AnyBinding>, 4>> override_bindings_;
  detail::Observers observers_;
};

}  // namespace ratelimit
