#pragma once
/// @file rules/detail/yaml.hpp
/// Reading the Envoy rate limit service's YAML into the rule tree, with errors that name the
/// line. Internal to rules.hpp.

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../../core/detail/validate.hpp"
#include "../../core/rate.hpp"
#include "../algorithm.hpp"
#include "tree.hpp"

namespace ratelimit {

namespace detail {

/// Emits `node` as `out << node` does, but a scalar quoted in the source stays quoted, so that
/// a reader resolving plain scalars (e.g. "yes" as a boolean, as YAML 1.1 does) still sees a
/// string. Thread safety: pure.
inline void emit_keeping_quotes(YAML::Emitter& out, const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      out << YAML::BeginMap;
      for (const auto& kv : node) {
        out << YAML::Key;
        emit_keeping_quotes(out, kv.first);
        out << YAML::Value;
        emit_keeping_quotes(out, kv.second);
      }
      out << YAML::EndMap;
      break;
    case YAML::NodeType::Sequence:
      out << YAML::BeginSeq;
      for (const auto& item : node) emit_keeping_quotes(out, item);
      out << YAML::EndSeq;
      break;
    case YAML::NodeType::Scalar:
      if (node.Tag() == "!")
        out << YAML::DoubleQuoted << node.Scalar();
      else
        out << node;
      break;
    default:
      out << node;
      break;
  }
}

/// The registry's side of reading a rules file: the algorithm a name stands for (nullopt if
/// none), and the names for error messages.
struct AlgorithmNames {
  std::function<std::optional<Algorithm>(std::string_view)> find;
  std::string list;
  /// The algorithm of a limit that names none: the registry's `default_algorithm`, if declared.
  Algorithm fallback = Algorithm::sliding_counter;
};

/// The limits of what a rules file may make the reader do: a file is read whole, and YAML
/// aliases (`*name`) share a node rather than copy it, so a short file can describe a huge or
/// cyclic tree. Every descriptor reached counts, through aliases too.
struct RulesLimits {
  /// Bytes of YAML text.
  static constexpr std::size_t max_bytes = std::size_t{64} << 20;
  /// Levels of nested `descriptors`.
  static constexpr int max_depth = 32;
  /// Descriptors reached per byte of text: every descriptor written out takes more than 8 bytes
  /// (`key:` and `rate_limit:` or `descriptors:`), so only aliases can reach more.
  static constexpr std::size_t bytes_per_descriptor = 8;
};

class RulesReader {
 public:
  RulesReader(std::string source, AlgorithmNames algorithms, std::size_t file = 0)
      : source_(std::move(source)), algorithms_(std::move(algorithms)), file_(file) {}

  RuleTree read(std::string_view text) {
    if (text.size() > RulesLimits::max_bytes)
      fail(0, "the file has " + std::to_string(text.size()) + " bytes, more than the " +
                  std::to_string(RulesLimits::max_bytes) + " a rules file may have");
    budget_ = std::max<std::size_t>(64, text.size() / RulesLimits::bytes_per_descriptor);
    check_text(text);
    std::vector<YAML::Node> docs;
    try {
      docs = YAML::LoadAll(std::string(text));
    } catch (const YAML::DeepRecursion& e) {
      // yaml-cpp's own bound on nesting, reported by it as "bad file".
      fail(e.mark.line >= 0 ? e.mark.line + 1 : 0,
           "invalid YAML: nested too deeply (the YAML reader stops at " +
               std::to_string(e.depth()) + " levels of lists and mappings)");
    } catch (const YAML::Exception& e) {
      fail(e.mark.line >= 0 ? e.mark.line + 1 : 0, "invalid YAML: " + e.msg);
    }
    if (docs.empty())
      fail(1, "the file is empty: expected a mapping with `domain` and `descriptors`");
    if (docs.size() > 1)
      fail(line_of(docs[1], 0),
           "a second YAML document (after `---`): a rules file holds exactly one");
    const YAML::Node doc = docs.front();
    if (!doc.IsMap())
      fail(line_of(doc, 1), "the file must be a mapping with `domain` and `descriptors`");
    const int top = line_of(doc, 1);
    const Fields f = fields(doc, {"domain", "descriptors", "client_keys"});
    RuleTree tree;
    tree.domain = text_of(f[0], "domain", top, true);
    tree.domain_line = line_of(f[0].node, top);
    if (tree.domain.empty()) fail(line_of(f[0].node, top), "domain must not be empty");
    tree.client_keys_given = f[2].given;
    if (const YAML::Node& ck = f[2].node; f[2].given) {
      if (!ck.IsSequence()) fail(line_of(ck, top), "client_keys must be a list of descriptor keys");
      for (const YAML::Node& k : ck) {
        if (!k.IsScalar()) fail(line_of(k, top), "client_keys entries must be strings");
        tree.client_keys.push_back(k.Scalar());
      }
    } else {
      tree.client_keys = {"api_key", "remote_address"};
    }
    const YAML::Node& ds = f[1].node;
    if (!f[1].given) fail(top, "missing field `descriptors`");
    tree.roots = descriptors(ds, top);
    if (tree.roots.empty()) fail(line_of(ds, top), "descriptors must not be empty");
    return tree;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw std::invalid_argument(source_ + ":" + std::to_string(line) + ": " + what);
  }

  /// Fails at the first byte that is not YAML text: a YAML stream is UTF-8 (or UTF-16/32 with a
  /// byte order mark, which a rules file never is) of printable characters (YAML 1.2, 5.1: tab,
  /// line feed, carriage return, U+0020..U+007E, U+0085, U+00A0..U+D7FF, U+E000..U+FFFD,
  /// U+10000..U+10FFFF; a NUL or another control character is written escaped inside a
  /// double-quoted string). yaml-cpp does not check this, and would read such bytes into keys
  /// and values the reference service's reader refuses. Linear in the text.
  void check_text(std::string_view text) const {
    int line = 1;
    std::size_t line_start = 0;
    for (std::size_t i = 0; i < text.size();) {
      const auto b = static_cast<unsigned char>(text[i]);
      const auto where = [&] {
        return "byte " + std::to_string(i - line_start + 1) + " of the line (offset " +
               std::to_string(i) + "): ";
      };
      if (b < 0x80) {
        if (b == '\n') {
          ++line;
          line_start = i + 1;
        } else if ((b < 0x20 && b != '\t' && b != '\r') || b == 0x7f) {
          fail(line, where() + "control character " + hex(b) +
                         ", which YAML does not allow in a file (escape it inside a "
                         "double-quoted string, e.g. \"\\x" +
                         hex(b).substr(2) + "\")");
        }
        ++i;
        continue;
      }
      // A multi-byte sequence: its length from the lead byte, its code point from the rest.
      const std::size_t len = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 0;
      std::uint32_t cp = len == 4 ? (b & 0x07u) : len == 3 ? (b & 0x0fu) : (b & 0x1fu);
      bool ok = len != 0 && b < 0xf5 && i + len <= text.size();
      for (std::size_t k = 1; ok && k < len; ++k) {
        const auto c = static_cast<unsigned char>(text[i + k]);
        ok = (c & 0xc0u) == 0x80u;
        cp = (cp << 6) | (c & 0x3fu);
      }
      // Shortest form only, no surrogates, nothing past U+10FFFF.
      const std::uint32_t least = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
      ok = ok && cp >= least && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
      if (!ok)
        fail(line, where() + "byte " + hex(b) +
                       " does not begin valid UTF-8 (a rules file is "
                       "UTF-8 text)");
      if ((cp >= 0x80 && cp <= 0x9f && cp != 0x85) || cp == 0xfffe || cp == 0xffff)
        fail(line, where() + "character U+" + hex(cp).substr(2) +
                       ", which YAML does not allow in a file (a control character or "
                       "non-character)");
      i += len;
    }
  }

  static std::string hex(std::uint32_t v) {
    static constexpr char digits[] = "0123456789ABCDEF";
    std::string out;
    do {
      out.insert(out.begin(), digits[v & 0xfu]);
      v >>= 4;
    } while (v != 0);
    if (out.size() % 2 != 0) out.insert(out.begin(), '0');
    return "0x" + out;
  }

  static int line_of(const YAML::Node& n, int fallback) {
    if (!n || !n.IsDefined()) return fallback;
    const YAML::Mark m = n.Mark();
    return m.line >= 0 ? m.line + 1 : fallback;
  }

  static std::string quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

  /// A mapping's fields by their position in the `known` list (undefined nodes for those
  /// absent), read in one pass: yaml-cpp looks a key up by scanning the mapping, so asking for
  /// each field apart would cost a scan each. Rejects fields this reader does not know (a typo
  /// would otherwise silently drop a limit), and a field given twice (YAML parsers keep one and
  /// lose the other).
  struct Field {
    YAML::Node node;
    bool given = false;
  };
  using Fields = std::array<Field, 12>;  // the most fields a mapping has
  Fields fields(const YAML::Node& map, std::initializer_list<std::string_view> known) const {
    Fields out;
    for (const auto& kv : map) {
      const int line = line_of(kv.first, line_of(map, 0));
      if (!kv.first.IsScalar()) fail(line, "field names must be strings");
      const std::string& f = kv.first.Scalar();
      const auto at = std::find(known.begin(), known.end(), f);
      if (at == known.end()) {
        std::string list;
        for (const auto k : known) list += (list.empty() ? "" : ", ") + std::string(k);
        fail(line, "unknown field " + quoted(f) + " (expected one of: " + list + ")");
      }
      const auto i = static_cast<std::size_t>(at - known.begin());
      if (out[i].given) fail(line, "field " + quoted(f) + " given twice");
      out[i] = {kv.second, true};
    }
    return out;
  }

  /// The string value of field `field`. A plain scalar reads as its text (`value: 200` is
  /// "200", as the reference service's YAML reader gives it); null, a list or a mapping is
  /// refused.
  std::string scalar(const Field& f, const char* field, int map_line, bool required) const {
    const YAML::Node& n = f.node;
    if (!f.given) {
      if (required) fail(map_line, std::string("missing field `") + field + "`");
      return {};
    }
    if (!n.IsScalar())
      fail(line_of(n, map_line), std::string(field) + " must be a string, not " +
                                     (n.IsMap()        ? "a mapping"
                                      : n.IsSequence() ? "a list"
                                                       : "null"));
    return n.Scalar();
  }

  /// Whether `n` is a plain (unquoted) scalar that YAML reads as a floating-point number
  /// (`1.5`, `-2e3`, `.inf`, `.nan`): the reference service refuses such a key or value (its
  /// YAML reader accepts text, integers and booleans there, and nothing else).
  static bool plain_float(const YAML::Node& n) {
    if (!n.IsScalar() || n.Tag() != "?") return false;
    std::string_view v = n.Scalar();
    if (!v.empty() && (v.front() == '+' || v.front() == '-')) v.remove_prefix(1);
    for (const std::string_view special : {".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN"})
      if (v == special) return true;
    const auto digits = [&](std::size_t& i) {
      const std::size_t start = i;
      while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i;
      return i > start;
    };
    std::size_t i = 0;
    const bool whole = digits(i);
    bool fraction = false, exponent = false;
    if (i < v.size() && v[i] == '.') {
      ++i;
      fraction = digits(i) || whole;
      if (!fraction) return false;
    }
    if (!whole && !fraction) return false;
    if (i < v.size() && (v[i] == 'e' || v[i] == 'E')) {
      ++i;
      if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
      if (!digits(i)) return false;
      exponent = true;
    }
    return i == v.size() && (fraction || exponent);
  }

  /// The text of a `domain`, `key`, `value` or `name` field: as `scalar`, and not a plain
  /// floating-point number (see `plain_float`).
  std::string text_of(const Field& f, const char* field, int map_line, bool required) const {
    std::string out = scalar(f, field, map_line, required);
    if (f.given && plain_float(f.node))
      fail(line_of(f.node, map_line), std::string(field) + " = " + out +
                                          ": a number, not a string (quote it: \"" + out + "\")");
    return out;
  }

  /// The value of boolean field `field` (false when absent): true or false (also True, TRUE,
  /// False, FALSE), as YAML 1.2 writes them.
  bool boolean(const Field& f, const char* field, int map_line) const {
    if (!f.given) return false;
    const YAML::Node& n = f.node;
    if (n.IsScalar()) {
      const std::string& v = n.Scalar();
      if (v == "true" || v == "True" || v == "TRUE") return true;
      if (v == "false" || v == "False" || v == "FALSE") return false;
    }
    fail(line_of(n, map_line), std::string(field) + " = " +
                                   (n.IsScalar() ? quoted(n.Scalar()) : std::string("(not text)")) +
                                   ": must be true or false");
  }

  /// Fails if `n` is one of the nodes being read around it: an alias that refers to an
  /// enclosing node would make the tree infinite.
  void enter(const YAML::Node& n, int line) {
    for (const YAML::Node& open : path_)
      if (open.is(n))
        fail(line, "an alias refers to a node that contains it (line " +
                       std::to_string(line_of(open, line)) + "): the descriptors would never end");
    path_.push_back(n);
  }

  std::vector<RuleNode> descriptors(const YAML::Node& seq, int parent_line) {
    const int line = line_of(seq, parent_line);
    if (!seq.IsSequence()) fail(line, "descriptors must be a list");
    if (++depth_ > RulesLimits::max_depth)
      fail(line, "descriptors nested more than " + std::to_string(RulesLimits::max_depth) +
                     " levels deep");
    enter(seq, line);
    std::vector<RuleNode> out;
    // Key and value of each descriptor of this level, for the duplicate check in O(1) each.
    std::unordered_map<std::string, int> seen;
    for (const YAML::Node& d : seq) {
      RuleNode node = descriptor(d, line);
      std::string id = node.key;
      id += node.has_value ? '=' : '*';
      id += node.value;
      const auto [it, fresh] = seen.emplace(std::move(id), node.line);
      if (!fresh)
        fail(node.line, "duplicate descriptor key " + quoted(node.key) +
                            (node.has_value ? " value " + quoted(node.value) : "") +
                            " (first at line " + std::to_string(it->second) + ")");
      out.push_back(std::move(node));
    }
    path_.pop_back();
    --depth_;
    return out;
  }

  RuleNode descriptor(const YAML::Node& d, int parent_line) {
    RuleNode node;
    node.line = line_of(d, parent_line);
    if (budget_ == 0)
      fail(node.line,
           "more descriptors than the file's size allows (one per 8 bytes): YAML aliases "
           "expand to too many");
    --budget_;
    enter(d, node.line);
    if (!d.IsMap())
      fail(node.line,
           "a descriptor must be a mapping with `key` (and `value`, `rate_limit`, "
           "`descriptors`), not " +
               std::string(d.IsSequence() ? "a list"
                           : d.IsScalar() ? "a string"
                                          : "null"));
    node.file = file_;
    const Fields f =
        fields(d, {"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode",
                   "detailed_metric", "value_to_metric", "share_threshold", "metadata"});
    node.key = text_of(f[0], "key", node.line, true);
    if (node.key.empty()) fail(line_of(f[0].node, node.line), "key must not be empty");
    if (f[1].given) {
      node.value = text_of(f[1], "value", node.line, false);
      node.has_value = !node.value.empty();  // `value: ""` is no value, as in the reference
      node.wildcard = node.value.find('*') != std::string::npos;
    }
    node.shadow_mode = boolean(f[4], "shadow_mode", node.line);
    node.quota_mode = boolean(f[5], "quota_mode", node.line);
    node.detailed_metric = boolean(f[6], "detailed_metric", node.line);
    node.value_to_metric = boolean(f[7], "value_to_metric", node.line);
    node.share_threshold = boolean(f[8], "share_threshold", node.line);
    if (node.share_threshold && !node.wildcard)
      fail(line_of(f[8].node, node.line),
           "share_threshold: true needs a wildcard value (with `*`), but descriptor " +
               quoted(node.key) +
               (node.has_value ? " has value " + quoted(node.value) : " has no value"));
    if (f[9].given) {
      const YAML::Node& m = f[9].node;
      if (!m.IsMap()) fail(line_of(m, node.line), "metadata must be a mapping");
      YAML::Emitter out;
      out.SetMapFormat(YAML::Flow);
      out.SetSeqFormat(YAML::Flow);
      emit_keeping_quotes(out, m);
      node.metadata = out.c_str();
    }
    if (f[2].given) rate_limit(f[2].node, node);
    if (f[3].given) node.children = descriptors(f[3].node, node.line);
    // Neither a limit nor nested descriptors: the value is exempt (the reference's whitelist):
    // a request that lands here gets no limit.
    path_.pop_back();
    return node;
  }

  void rate_limit(const YAML::Node& rl, RuleNode& node) {
    const int line = line_of(rl, node.line);
    if (!rl.IsMap())
      fail(line, "rate_limit must be a mapping with `unit` and `requests_per_unit`, not " +
                     std::string(rl.IsSequence() ? "a list"
                                 : rl.IsScalar() ? "a string"
                                                 : "null"));
    const Fields f = fields(rl, {"unit", "requests_per_unit", "algorithm", "name", "unlimited",
                                 "replaces", "time_zone", "first_day", "block_duration"});
    node.name = text_of(f[3], "name", line, false);
    if (const YAML::Node& rs = f[5].node; f[5].given) {
      if (!rs.IsSequence())
        fail(line_of(rs, line), "rate_limit.replaces must be a list of {name: ...} mappings");
      for (const YAML::Node& r : rs) {
        const int r_line = line_of(r, line);
        if (!r.IsMap())
          fail(r_line, "rate_limit.replaces entries must be mappings with `name`, not " +
                           std::string(r.IsSequence() ? "a list"
                                       : r.IsScalar() ? "a string"
                                                      : "null"));
        const Fields rf = fields(r, {"name"});
        const std::string replaced = scalar(rf[0], "replaces.name", r_line, false);
        if (replaced.empty())
          fail(r_line, "rate_limit.replaces: an entry names no limit (empty or missing `name`)");
        if (replaced == node.name)
          fail(r_line, "rate_limit.replaces names " + quoted(replaced) +
                           ", the limit itself: a limit cannot replace itself");
        node.replaces.push_back(replaced);
      }
    }
    if (boolean(f[4], "rate_limit.unlimited", line)) {
      // As the reference: no unit with `unlimited`, and a requests_per_unit is ignored (its
      // text is not even read). An algorithm could only be a mistake.
      if (f[0].given) fail(line_of(f[0].node, line), "rate_limit.unlimited: true takes no unit");
      if (f[2].given)
        fail(line_of(f[2].node, line), "rate_limit.unlimited: true takes no algorithm");
      if (f[6].given || f[7].given)
        fail(line, "rate_limit.unlimited: true takes no time_zone or first_day");
      if (f[8].given)
        fail(line_of(f[8].node, line),
             "rate_limit.unlimited: true takes no block_duration (nothing is ever denied to lock "
             "out)");
      node.unlimited = true;
      return;
    }
    const std::string unit = scalar(f[0], "unit", line, true);
    const int unit_line = line_of(f[0].node, line);
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
    else if (lower == "week")  // extension: calendar algorithms only (checked by the registry)
      node.rate.period = hours{24 * 7};
    else if (lower == "month")  // extension: its longest length, 31 days
      node.rate.period = hours{24 * 31};
    else if (lower == "year")  // as the reference: 365 days (a calendar year for calendar ones)
      node.rate.period = hours{24 * 365};
    else
      fail(unit_line, "rate_limit.unit = " + quoted(unit) +
                          ": unknown unit (expected second, minute, hour, day, week, month or "
                          "year)");
    node.unit = lower;
    node.time_zone = scalar(f[6], "time_zone", line, false);
    node.first_day = scalar(f[7], "first_day", line, false);
    // Given but empty would read as absent (UTC, Monday) and pass for any algorithm.
    if (f[6].given && node.time_zone.empty())
      fail(line_of(f[6].node, line),
           "rate_limit.time_zone = \"\": empty (an IANA name such as Europe/Madrid, or leave "
           "it out for UTC)");
    if (f[7].given && node.first_day.empty())
      fail(line_of(f[7].node, line),
           "rate_limit.first_day = \"\": empty (monday .. sunday, or leave it out for monday)");

    const std::string rpu = scalar(f[1], "requests_per_unit", line, true);
    const int rpu_line = line_of(f[1].node, line);
    // "-0" would parse as 0, which blocks every request: a sign is never meant.
    if (!rpu.empty() && rpu.front() == '-')
      fail(rpu_line, "rate_limit.requests_per_unit = " + rpu + ": must not be negative");
    std::int64_t count = 0;
    const auto [end, ec] = std::from_chars(rpu.data(), rpu.data() + rpu.size(), count);
    if (ec == std::errc::result_out_of_range || (ec == std::errc{} && count > max_count))
      fail(rpu_line, "rate_limit.requests_per_unit = " + rpu + ": must be at most 1000000000");
    if (ec != std::errc{} || end != rpu.data() + rpu.size())
      fail(rpu_line, "rate_limit.requests_per_unit = " + quoted(rpu) + ": not a whole number");
    if (count < 0)
      fail(rpu_line, "rate_limit.requests_per_unit = " + rpu + ": must not be negative");
    node.rate.count = count;
    if (f[8].given) {
      node.block_duration = block_duration(f[8], line);
      if (count == 0)
        fail(line_of(f[8].node, line),
             "rate_limit.block_duration with requests_per_unit: 0: the limit already denies "
             "every request, a lockout adds nothing (remove one of them)");
    }

    const std::string algo = scalar(f[2], "algorithm", line, false);
    node.algorithm = algorithms_.fallback;
    if (!algo.empty()) {
      const auto found = algorithms_.find(algo);
      if (!found)
        fail(line_of(f[2].node, line),
             "rate_limit.algorithm = " + quoted(algo) +
                 ": unknown algorithm (expected one of: " + algorithms_.list + ")");
      node.algorithm = *found;
    }
    node.has_limit = true;
  }

  /// `rate_limit.block_duration` (extension): whole numbers each followed by its unit, `h`, `m`
  /// or `s`, as Go writes durations (1h, 15m, 90s, 1h30m), from 1 s to 366 days (8784h, the
  /// longest period of the algorithms). Linear in the text; no overflow: each part is checked
  /// against the bound before it is added.
  std::chrono::nanoseconds block_duration(const Field& f, int map_line) const {
    const int line = line_of(f.node, map_line);
    const std::string text = scalar(f, "rate_limit.block_duration", map_line, false);
    const auto bad = [&](const std::string& why) {
      // A hostile value may be megabytes long: the message quotes its start.
      const std::string shown = text.size() > 64 ? text.substr(0, 60) + "..." : text;
      fail(line, "rate_limit.block_duration = " + quoted(shown) + ": " + why);
    };
    const std::string syntax =
        "not a duration (whole numbers each with its unit h, m or s, e.g. 1h, 15m, 90s or "
        "1h30m)";
    if (text.empty()) bad("empty (a duration such as 1h, 15m or 90s; leave it out for no lockout)");
    if (text.front() == '-') bad("must not be negative (leave the field out for no lockout)");
    constexpr std::int64_t most_s = std::int64_t{366} * 24 * 3600;  // detail::max_period
    const std::string too_long = "longer than 366 days (8784h), the longest lockout";
    std::int64_t total_s = 0;
    for (std::size_t i = 0; i < text.size();) {
      const std::size_t digits = i;
      while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
      if (i == digits) bad(syntax);
      std::int64_t n = 0;
      const auto [end, ec] = std::from_chars(text.data() + digits, text.data() + i, n);
      if (ec == std::errc::result_out_of_range) bad(too_long);
      if (ec != std::errc{} || end != text.data() + i) bad(syntax);
      const std::size_t unit = i;
      while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i])) != 0) ++i;
      const std::string_view u(text.data() + unit, i - unit);
      const std::int64_t per = u == "h" ? 3600 : u == "m" ? 60 : u == "s" ? 1 : 0;
      if (per == 0) bad(syntax);
      if (n > (most_s - total_s) / per) bad(too_long);
      total_s += n * per;
    }
    if (total_s == 0) bad("must be at least 1s (leave the field out for no lockout)");
    return std::chrono::seconds{total_s};
  }

  std::string source_;
  AlgorithmNames algorithms_;
  std::size_t file_ = 0;          ///< the source's position among the rules' sources
  std::size_t budget_ = 0;        ///< descriptors that may still be read
  int depth_ = 0;                 ///< `descriptors` lists open
  std::vector<YAML::Node> path_;  ///< the descriptor nodes and lists being read
};

}  // namespace detail
}  // namespace ratelimit
