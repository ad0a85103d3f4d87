#pragma once
/// @file rules/detail/yaml.hpp
/// Reading the Envoy rate limit service's YAML into the rule tree, with errors that name the
/// line. Internal to rules.hpp.

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../core/detail/validate.hpp"
#include "../../core/rate.hpp"
#include "../algorithm.hpp"

namespace ratelimit {

namespace detail {

/// One node of the descriptor tree as written in the file.
struct RuleNode {
  std::string key;
  std::string value;
  bool has_value = false;
  bool has_limit = false;  ///< a `rate_limit` with a limit (not `unlimited: true`)
  std::string name;        ///< `rate_limit.name`, or empty
  Rate rate{0, std::chrono::nanoseconds{0}};
  Algorithm algorithm = Algorithm::sliding_counter;
  int line = 0;
  std::ptrdiff_t rule_index = -1;  ///< position of its Rule in Rules::rules(), if has_limit
  std::vector<RuleNode> children;
};

struct RuleTree {
  std::string domain;
  std::vector<std::string> client_keys;
  std::vector<RuleNode> roots;
};

/// The registry's side of reading a rules file: the algorithm a name stands for (nullopt if
/// none), and the names for error messages.
struct AlgorithmNames {
  std::function<std::optional<Algorithm>(std::string_view)> find;
  std::string list;
};

class RulesReader {
 public:
  RulesReader(std::string source, AlgorithmNames algorithms)
      : source_(std::move(source)), algorithms_(std::move(algorithms)) {}

  RuleTree read(std::string_view text) {
    YAML::Node doc;
    try {
      doc = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      fail(e.mark.line >= 0 ? e.mark.line + 1 : 0, "invalid YAML: " + e.msg);
    }
    if (!doc.IsMap())
      fail(line_of(doc, 1), "the file must be a mapping with `domain` and `descriptors`");
    const int top = line_of(doc, 1);
    check_fields(doc, {"domain", "descriptors", "client_keys"});
    RuleTree tree;
    tree.domain = scalar(doc, "domain", top, true);
    if (tree.domain.empty()) fail(line_of(doc["domain"], top), "domain must not be empty");
    if (const YAML::Node ck = doc["client_keys"]) {
      if (!ck.IsSequence()) fail(line_of(ck, top), "client_keys must be a list of descriptor keys");
      for (const YAML::Node& k : ck) {
        if (!k.IsScalar()) fail(line_of(k, top), "client_keys entries must be strings");
        tree.client_keys.push_back(k.Scalar());
      }
    } else {
      tree.client_keys = {"api_key", "remote_address"};
    }
    const YAML::Node ds = doc["descriptors"];
    if (!ds) fail(top, "missing field `descriptors`");
    tree.roots = descriptors(ds, top);
    if (tree.roots.empty()) fail(line_of(ds, top), "descriptors must not be empty");
    return tree;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw std::invalid_argument(source_ + ":" + std::to_string(line) + ": " + what);
  }

  static int line_of(const YAML::Node& n, int fallback) {
    if (!n || !n.IsDefined()) return fallback;
    const YAML::Mark m = n.Mark();
    return m.line >= 0 ? m.line + 1 : fallback;
  }

  static std::string quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

  /// Rejects fields this reader does not know (a typo would otherwise silently drop a limit),
  /// and a field given twice (YAML parsers keep one and lose the other).
  void check_fields(const YAML::Node& map, std::initializer_list<std::string_view> known) const {
    std::vector<std::string> seen;
    for (const auto& kv : map) {
      const int line = line_of(kv.first, line_of(map, 0));
      if (!kv.first.IsScalar()) fail(line, "field names must be strings");
      const std::string& f = kv.first.Scalar();
      if (std::find(known.begin(), known.end(), f) == known.end()) {
        std::string list;
        for (const auto k : known) list += (list.empty() ? "" : ", ") + std::string(k);
        fail(line, "unknown field " + quoted(f) + " (expected one of: " + list + ")");
      }
      if (std::find(seen.begin(), seen.end(), f) != seen.end())
        fail(line, "field " + quoted(f) + " given twice");
      seen.push_back(f);
    }
  }

  std::string scalar(const YAML::Node& map, const char* field, int map_line, bool required) const {
    const YAML::Node n = map[field];
    if (!n) {
      if (required) fail(map_line, std::string("missing field `") + field + "`");
      return {};
    }
    if (!n.IsScalar()) fail(line_of(n, map_line), std::string(field) + " must be a string");
    return n.Scalar();
  }

  std::vector<RuleNode> descriptors(const YAML::Node& seq, int parent_line) {
    const int line = line_of(seq, parent_line);
    if (!seq.IsSequence()) fail(line, "descriptors must be a list");
    std::vector<RuleNode> out;
    for (const YAML::Node& d : seq) {
      RuleNode node = descriptor(d, line);
      for (const RuleNode& other : out)
        if (other.key == node.key && other.has_value == node.has_value &&
            (!node.has_value || other.value == node.value))
          fail(node.line, "duplicate descriptor key " + quoted(node.key) +
                              (node.has_value ? " value " + quoted(node.value) : "") +
                              " (first at line " + std::to_string(other.line) + ")");
      out.push_back(std::move(node));
    }
    return out;
  }

  RuleNode descriptor(const YAML::Node& d, int parent_line) {
    RuleNode node;
    node.line = line_of(d, parent_line);
    if (!d.IsMap())
      fail(node.line,
           "a descriptor must be a mapping with `key` (and `value`, `rate_limit`, "
           "`descriptors`)");
    check_fields(d, {"key", "value", "rate_limit", "descriptors"});
    node.key = scalar(d, "key", node.line, true);
    if (node.key.empty()) fail(line_of(d["key"], node.line), "key must not be empty");
    if (d["value"]) {
      node.value = scalar(d, "value", node.line, false);
      node.has_value = true;
    }
    if (const YAML::Node rl = d["rate_limit"]) rate_limit(rl, node);
    if (const YAML::Node ds = d["descriptors"]) node.children = descriptors(ds, node.line);
    if (!d["rate_limit"] && node.children.empty())
      fail(node.line,
           "descriptor " + quoted(node.key) + " has neither `rate_limit` nor nested `descriptors`");
    return node;
  }

  void rate_limit(const YAML::Node& rl, RuleNode& node) {
    const int line = line_of(rl, node.line);
    if (!rl.IsMap()) fail(line, "rate_limit must be a mapping with `unit` and `requests_per_unit`");
    check_fields(rl, {"unit", "requests_per_unit", "algorithm", "name", "unlimited"});
    node.name = scalar(rl, "name", line, false);
    if (const YAML::Node u = rl["unlimited"]) {
      if (!u.IsScalar() || (u.Scalar() != "true" && u.Scalar() != "false"))
        fail(line_of(u, line), "rate_limit.unlimited must be true or false");
      if (u.Scalar() == "true") {
        if (rl["unit"] || rl["requests_per_unit"] || rl["algorithm"])
          fail(line, "rate_limit.unlimited: true takes no unit, requests_per_unit or algorithm");
        return;
      }
    }
    const std::string unit = scalar(rl, "unit", line, true);
    const int unit_line = line_of(rl["unit"], line);
    std::string lower = unit;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    using namespace std::chrono;
    if (lower == "second")
      node.rate.period = seconds{1};
    else if (lower == "minute")
      node.rate.period = minutes{1};
    else if (lower == "hour")
      node.rate.period = hours{1};
    else if (lower == "day")
      node.rate.period = hours{24};
    else
      fail(unit_line, "rate_limit.unit = " + quoted(unit) +
                          ": unknown unit (expected second, minute, hour or day)");

    const std::string rpu = scalar(rl, "requests_per_unit", line, true);
    const int rpu_line = line_of(rl["requests_per_unit"], line);
    std::int64_t count = 0;
    const auto [end, ec] = std::from_chars(rpu.data(), rpu.data() + rpu.size(), count);
    if (ec == std::errc::result_out_of_range || (ec == std::errc{} && count > max_count))
      fail(rpu_line, "rate_limit.requests_per_unit = " + rpu + ": must be at most 1000000000");
    if (ec != std::errc{} || end != rpu.data() + rpu.size())
      fail(rpu_line, "rate_limit.requests_per_unit = " + quoted(rpu) + ": not a whole number");
    if (count < 0)
      fail(rpu_line, "rate_limit.requests_per_unit = " + rpu + ": must not be negative");
    node.rate.count = count;

    const std::string algo = scalar(rl, "algorithm", line, false);
    if (!algo.empty()) {
      const auto found = algorithms_.find(algo);
      if (!found)
        fail(line_of(rl["algorithm"], line),
             "rate_limit.algorithm = " + quoted(algo) +
                 ": unknown algorithm (expected one of: " + algorithms_.list + ")");
      node.algorithm = *found;
    }
    node.has_limit = true;
  }

  std::string source_;
  AlgorithmNames algorithms_;
};

}  // namespace detail
}  // namespace ratelimit
