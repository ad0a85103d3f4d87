#pragma once
/// @file rules/rules.hpp
/// `Rules`: the limits of one domain, loaded from an Envoy rate limit service YAML file (the
/// format and what each field does: rules/load.hpp) and matched against requests (the flat
/// request and Envoy's descriptor list: rules/match.hpp). Deciding requests under them is
/// `RuleSet` (rules/rule_set.hpp).
///
/// Needs yaml-cpp (Debian `libyaml-cpp-dev`): link the CMake target `ratelimit::rules`.

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../algorithms/registry.hpp"
#include "detail/yaml.hpp"
#include "load.hpp"
#include "match.hpp"
#include "request.hpp"
#include "rule.hpp"

namespace ratelimit {

/// The limits of one domain, from one rules file or several, independent of where their
/// counters live.
/// Thread safety: immutable once loaded; `match`, `descriptors_of` and `lookup` are safe from
/// many threads.
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
    return detail::read_rules_file(file);
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
    r.data_ = detail::load_rules<Registry>(std::move(trees), std::move(sources));
    return r;
  }

  /// The domain.
  const std::string& domain() const noexcept { return data_.domain; }
  /// Every limit of the domain, in file order (parents before their nested descriptors).
  const std::vector<Rule>& rules() const noexcept { return data_.rules; }
  /// The descriptor keys that identify a client.
  const std::vector<std::string>& client_keys() const noexcept { return data_.client_keys; }
  /// The names of the sources the rules were read from (`Rule::source` is one of them).
  const std::vector<std::string>& sources() const noexcept { return data_.sources; }

  /// The limits that apply to a request with these descriptor entries (the flat matching), in
  /// file order, each with its counter key (see rules/match.hpp for the matching rules).
  std::vector<RuleMatch> match(std::span<const DescriptorEntry> request) const {
    std::vector<RuleMatch> out;
    detail::walk_flat(data_, request, [&](const detail::RuleNode& n, const detail::FlatWalk& at) {
      if (const Rule* r = data_.rule_of(n))
        out.push_back(RuleMatch{r, at.key, r->per_client ? at.client : std::string{},
                                r->per_client ? at.tag : std::string{}});
    });
    std::sort(out.begin(), out.end(),
              [](const RuleMatch& a, const RuleMatch& b) { return a.rule < b.rule; });
    return out;
  }
  /// Same, from an initializer list: `rules.match({{"api_key", "K"}, {"path", "/login"}})`.
  std::vector<RuleMatch> match(std::initializer_list<DescriptorEntry> request) const {
    return match(std::span<const DescriptorEntry>(request.begin(), request.size()));
  }

  /// The flat request as Envoy's descriptor list: one descriptor per descriptor of the file
  /// that the flat matching lands on and that has a limit or `unlimited: true` (whose
  /// `replaces` count), in file order, its entries the keys on that descriptor's path with the
  /// request's values. Each lands, by `lookup`, where the flat matching did: with the same
  /// rule, counter key and tag as `match` gives. `RuleSet::decide(entries)` decides this list.
  std::vector<RateLimitDescriptor> descriptors_of(std::span<const DescriptorEntry> request) const {
    std::vector<RateLimitDescriptor> out;
    detail::walk_flat(data_, request, [&](const detail::RuleNode& n, const detail::FlatWalk& at) {
      if (data_.rule_of(n) == nullptr && !n.unlimited) return;
      RateLimitDescriptor d;
      d.entries.reserve(at.entries.size());
      for (const auto& [key, value] : at.entries) d.entries.push_back({*key, *value});
      out.push_back(std::move(d));
    });
    return out;
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
    return detail::lookup_descriptor(data_, entries);
  }
  /// Same, from an initializer list: `rules.lookup({{"path", "/login"}, {"api_key", "K"}})`.
  DescriptorMatch lookup(std::initializer_list<DescriptorEntry> entries) const {
    return lookup(std::span<const DescriptorEntry>(entries.begin(), entries.size()));
  }

 private:
  detail::LoadedRules data_;
};

}  // namespace ratelimit
