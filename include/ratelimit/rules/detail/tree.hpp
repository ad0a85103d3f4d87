#pragma once
/// @file rules/detail/tree.hpp
/// The descriptor tree of a rules file as read (`RuleNode`, `RuleTree`) and one domain's rules
/// as loaded (`LoadedRules`): plain data, shared by the reader (detail/yaml.hpp), the loader
/// (load.hpp) and the matcher (match.hpp). Internal to rules.hpp.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "../../core/rate.hpp"
#include "../algorithm.hpp"
#include "../rule.hpp"

namespace ratelimit::detail {

struct LevelIndex;  // match.hpp

/// One node of the descriptor tree as written in the file.
struct RuleNode {
  std::string key;
  std::string value;
  bool has_value = false;  ///< a non-empty `value` (`value: ""` is no value, as in Envoy's)
  bool wildcard = false;   ///< `value` holds a `*`
  bool has_limit = false;  ///< a `rate_limit` with a limit (not `unlimited: true`)
  bool unlimited = false;  ///< `rate_limit: {unlimited: true}`
  std::string name;        ///< `rate_limit.name`, or empty
  std::vector<std::string> replaces;  ///< `rate_limit.replaces[].name`
  Rate rate{0, std::chrono::nanoseconds{0}};
  std::string unit;       ///< `rate_limit.unit`, lower case
  std::string time_zone;  ///< `rate_limit.time_zone` (extension), or empty
  std::string first_day;  ///< `rate_limit.first_day` (extension), or empty
  Algorithm algorithm = Algorithm::sliding_counter;
  /// `rate_limit.block_duration` (extension): the lockout after a denial; 0 for none.
  std::chrono::nanoseconds block_duration{0};
  bool shadow_mode = false;
  bool quota_mode = false;
  bool detailed_metric = false;
  bool value_to_metric = false;
  bool share_threshold = false;
  std::string metadata;  ///< `metadata` as YAML flow text, or empty
  int line = 0;
  std::size_t file = 0;            ///< which source of the rules it came from
  std::ptrdiff_t rule_index = -1;  ///< position of its Rule in Rules::rules(), if has_limit
  std::vector<RuleNode> children;
  std::shared_ptr<const LevelIndex> index;  ///< of `children`, if any (set by Rules)
};

struct RuleTree {
  std::string domain;
  int domain_line = 0;
  std::vector<std::string> client_keys;
  bool client_keys_given = false;
  std::vector<RuleNode> roots;
};

/// Appends `s` to `out` as "<length>:<bytes>", so that joined fields never run together.
inline void append_field(std::string& out, std::string_view s) {
  out += std::to_string(s.size());
  out += ':';
  out += s;
}

/// One domain's rules as loaded: the descriptor tree, each level indexed, and its limits.
/// Thread safety: immutable once built.
struct LoadedRules {
  std::string domain;
  std::vector<std::string> client_keys;
  std::vector<std::string> sources;
  std::vector<RuleNode> roots;
  std::shared_ptr<const LevelIndex> index;  ///< of `roots`
  std::vector<Rule> rules;                  ///< `RuleNode::rule_index` points in here

  /// The limit of node `n`, or null (none, or `unlimited: true`).
  const Rule* rule_of(const RuleNode& n) const noexcept {
    return n.rule_index >= 0 ? &rules[static_cast<std::size_t>(n.rule_index)] : nullptr;
  }
  /// Whether `key` identifies a client.
  bool is_client_key(std::string_view key) const {
    return std::find(client_keys.begin(), client_keys.end(), key) != client_keys.end();
  }
};

}  // namespace ratelimit::detail
