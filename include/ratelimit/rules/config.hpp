#pragma once
/// @file rules/config.hpp
/// Several rules files, grouped by domain, as Envoy's rate limit service loads a directory of
/// them: `RulesConfig` holds one `Rules` per domain.

#include <cstddef>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../algorithms/registry.hpp"
#include "rules.hpp"

namespace ratelimit {

/// What two files with the same `domain` mean (the reference service's `MERGE_DOMAIN_CONFIG`).
enum class DomainMerge {
  refuse,  ///< an error naming both files (the reference's default)
  merge,   ///< one domain: the files' top-level descriptors form one list, in file order
};

/// The rules of several files, one `Rules` per domain.
/// Thread safety: immutable once loaded; safe to read from many threads.
class RulesConfig {
 public:
  /// Parses each source (see `Rules::from_string` for what a source may hold) and groups them
  /// by domain. Throws `std::invalid_argument` "SOURCE:LINE: problem" for anything
  /// `Rules::from_string` refuses, for two sources with one domain unless `merge` is
  /// `DomainMerge::merge`, and, when merged, for a top-level descriptor or a rule name that two
  /// of them share. An empty list gives a configuration with no domain.
  template <class Registry = Algorithms>
  static RulesConfig from_strings(std::span<const RulesSource> sources,
                                  DomainMerge merge = DomainMerge::refuse) {
    std::vector<std::string> names;
    names.reserve(sources.size());
    for (const RulesSource& s : sources) names.push_back(s.name);
    // Per domain, in order of first appearance: the parsed trees.
    std::vector<std::vector<detail::RuleTree>> grouped;
    std::unordered_map<std::string, std::size_t> where;  // domain -> position in grouped
    for (std::size_t i = 0; i < sources.size(); ++i) {
      detail::RulesReader reader(sources[i].name, detail::algorithm_names<Registry>(), i);
      detail::RuleTree tree = reader.read(sources[i].text);
      const auto [it, fresh] = where.emplace(tree.domain, grouped.size());
      if (fresh) {
        grouped.emplace_back();
      } else if (merge == DomainMerge::refuse) {
        const detail::RuleTree& first = grouped[it->second].front();
        throw std::invalid_argument(sources[i].name + ":" + std::to_string(tree.domain_line) +
                                    ": duplicate domain \"" + tree.domain + "\" (also in " +
                                    names[first.roots.front().file] + ":" +
                                    std::to_string(first.domain_line) + ")");
      }
      grouped[it->second].push_back(std::move(tree));
    }
    RulesConfig out;
    for (auto& trees : grouped)
      out.domains_.push_back(Rules::from_trees<Registry>(std::move(trees), names));
    for (std::size_t i = 0; i < out.domains_.size(); ++i)
      out.index_.emplace(out.domains_[i].domain(), i);
    return out;
  }

  /// Reads and parses rules files (see `from_strings`). Throws `std::invalid_argument` naming
  /// a file that cannot be read, and as `from_strings` for their content.
  template <class Registry = Algorithms>
  static RulesConfig from_files(std::span<const std::filesystem::path> files,
                                DomainMerge merge = DomainMerge::refuse) {
    std::vector<RulesSource> sources;
    sources.reserve(files.size());
    for (const auto& f : files) sources.push_back({f.string(), Rules::read_file(f)});
    return from_strings<Registry>(std::span<const RulesSource>(sources), merge);
  }

  /// The rules of `domain`, or nullptr when no file names it.
  const Rules* find(std::string_view domain) const {
    const auto it = index_.find(std::string(domain));
    return it == index_.end() ? nullptr : &domains_[it->second];
  }
  /// Every domain's rules, in order of first appearance among the sources.
  const std::vector<Rules>& domains() const noexcept { return domains_; }

 private:
  std::vector<Rules> domains_;
  std::unordered_map<std::string, std::size_t> index_;
};

}  // namespace ratelimit
