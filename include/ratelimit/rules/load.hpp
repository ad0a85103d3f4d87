#pragma once
/// @file rules/load.hpp
/// Loading a rules file: the parsed descriptor tree (rules/detail/yaml.hpp) made into one
/// domain's limits (`Rule`, with its identity and name), each level of the tree indexed for
/// matching, and every limit's parameters checked against its algorithm. `Rules`
/// (rules/rules.hpp) is the public face of what this builds.
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
/// (`unit`: second, minute, hour, day or year, any case; `requests_per_unit`: 0 to 10^9; optional
/// `name`; optional `replaces: [{name: ...}]`; or `unlimited: true`), optional nested
/// `descriptors`, the flags `shadow_mode`, `quota_mode`, `detailed_metric`, `value_to_metric`
/// and `share_threshold` (true or false), and `metadata` (a mapping). A descriptor with
/// neither `rate_limit` nor nested descriptors exempts its value. What the library does with
/// each field:
/// - `shadow_mode`: a limit decided and spent as if enforced whose denial never denies the
///   request (reported in `RateLimitResponse::shadow_denials`, and by the flat form as an
///   admitting outcome with `Decision::shadow_denied`).
/// - `quota_mode`: a limit whose denial only drops it, unless every quota-mode limit of the
///   request denies, which denies the request (as the reference).
/// - `replaces`: a limit named (by its `name`) in the `replaces` of another limit that applies
///   to the same request is not decided.
/// - `share_threshold` (only on a wildcard value): every matching value shares one counter;
///   without it each matching value has its own.
/// - `detailed_metric`, `value_to_metric`, `metadata`: kept on the `Rule` for the caller's
///   metrics and responses; the library keeps no metrics and decides the same either way.
///
/// Both forms of `RuleSet::decide` (the flat request and Envoy's descriptor list) give these
/// flags the same meaning: the flat form is decided as a descriptor list. Extensions of this
/// library, which the reference service refuses: `rate_limit.algorithm` (sliding_counter, the
/// default, token_bucket, leaky_bucket, fixed_window or sliding_log; a bucket gets capacity or
/// queue size `requests_per_unit`, refilled or drained at `requests_per_unit` per `unit`), the
/// top-level `client_keys` (see "Per client and shared rules"), and for calendar algorithms
/// (`algorithm: calendar_quota`, in the registry `QuotaAlgorithms` of ratelimit/calendar.hpp) the
/// units `week` and `month` and the fields `time_zone` (IANA name, default UTC) and `first_day` (of
/// a week, default monday); other algorithms refuse those; `rate_limit.block_duration`, a
/// lockout (`Rule::block_duration`, as `Lockout` in algorithms/lockout.hpp: once the limit denies
/// a counter, the counter is denied for that long without asking the limit), written as Go
/// writes durations (`1h`, `15m`, `90s`, `1h30m`: whole numbers with unit h, m or s), 1 s to
/// 366 days, not with `unlimited: true` nor `requests_per_unit: 0`; with `shadow_mode` its locks
/// are taken and checked but never deny. `requests_per_unit: 0` blocks every
/// matching request (denied with `retry_after == Decision::never`). `unit: year` is 365 days,
/// as the reference (the windows of fixed_window start at multiples of 365 days from the Unix
/// epoch); a calendar algorithm reads it as the calendar year of its time zone. A registry may
/// also name the algorithm of a limit that names none (`algorithm_names`; the gRPC server's
/// registry does). Several files: `RulesConfig`
/// (rules/config.hpp). Stricter than the reference: a rule name used twice in a domain and a
/// missing `requests_per_unit` (0 there) are refused; `unlimited: true` with a
/// `requests_per_unit` is accepted (ignored) as there.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../algorithms/registry.hpp"
#include "detail/tree.hpp"
#include "detail/yaml.hpp"
#include "match.hpp"
#include "rule.hpp"

namespace ratelimit::detail {

/// Makes a `Rule` of `node` if it has a limit, and of every node below it, in file order
/// (parents first); indexes each level of children for matching. `path`: the steps above.
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
    r.block_duration = node.block_duration;
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

/// The registry's side of reading a rules file (see `AlgorithmNames`).
/// A registry may also declare `static constexpr Algorithm default_algorithm` (what a limit
/// naming none runs, else sliding_counter).
template <class Registry>
AlgorithmNames algorithm_names() {
  AlgorithmNames names{[](std::string_view name) {
                         std::optional<Algorithm> found;
                         Registry::visit(name, [&]<class M>() { found = Algorithm{M::name}; });
                         return found;
                       },
                       Registry::names()};
  if constexpr (requires { Registry::default_algorithm; })
    names.fallback = Registry::default_algorithm;
  return names;
}

/// The calendar extension goes with an algorithm that reads it (`LimitSpecModel`), whose
/// parameters are checked here so that a bad zone is reported with its line.
template <class Registry>
void check_params(const Rule& rule, const std::string& source) {
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

/// The text of a rules file (see `Rules::read_file`).
inline std::string read_rules_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::invalid_argument("rules file " + file.string() + ": cannot open");
  // Refused before it is read, so that a huge file costs no memory.
  std::error_code ec;
  if (const auto bytes = std::filesystem::file_size(file, ec);
      !ec && bytes > RulesLimits::max_bytes)
    throw std::invalid_argument(file.string() + ":0: the file has " + std::to_string(bytes) +
                                " bytes, more than the " + std::to_string(RulesLimits::max_bytes) +
                                " a rules file may have");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// One domain's rules from parsed files, merged in order (see `Rules::from_trees`).
template <class Registry>
LoadedRules load_rules(std::vector<RuleTree> trees, std::vector<std::string> sources) {
  LoadedRules r;
  r.sources = std::move(sources);
  r.domain = trees.front().domain;
  r.client_keys = trees.front().client_keys;
  std::unordered_map<std::string, std::pair<std::size_t, int>> seen;  // key=value -> where
  for (std::size_t t = 0; t < trees.size(); ++t) {
    RuleTree& tree = trees[t];
    const std::string& here = r.sources[tree.roots.empty() ? 0 : tree.roots.front().file];
    if (t > 0 && tree.client_keys_given && tree.client_keys != r.client_keys)
      throw std::invalid_argument(here + ":1: client_keys differ from those of " +
                                  r.sources[trees.front().roots.front().file] +
                                  " (one domain has one list of client keys)");
    for (RuleNode& n : tree.roots) {
      std::string id = n.key;
      id += n.has_value ? '=' : '*';
      id += n.value;
      const auto [it, fresh] = seen.emplace(std::move(id), std::make_pair(n.file, n.line));
      if (!fresh)
        throw std::invalid_argument(
            r.sources[n.file] + ":" + std::to_string(n.line) + ": duplicate descriptor key \"" +
            n.key + "\"" + (n.has_value ? " value \"" + n.value + "\"" : "") + " (first at " +
            r.sources[it->second.first] + ":" + std::to_string(it->second.second) + ")");
      r.roots.push_back(std::move(n));
    }
  }
  std::vector<Rule::Step> path;
  r.index = std::make_shared<const LevelIndex>(r.roots);
  for (RuleNode& n : r.roots) flatten(r.domain, r.client_keys, r.sources, n, path, r.rules);
  for (const Rule& rule : r.rules) check_params<Registry>(rule, rule.source);
  std::unordered_map<std::string_view, const Rule*> names_seen;  // linear time, not pairs
  for (const Rule& rule : r.rules) {
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

}  // namespace ratelimit::detail
