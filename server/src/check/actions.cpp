#include "actions.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <re2/re2.h>
#include <yaml-cpp/yaml.h>

#include "ascii.hpp"

namespace ratelimit::server::check {

namespace {

/// Every value of header `name` (lower case) of the request, pseudo-headers included.
std::vector<std::string_view> header_values(const OriginalRequest& r, std::string_view name) {
  if (name == ":path") return {r.path};
  if (name == ":method") return {r.method};
  if (name == ":authority" || name == "host") return {r.authority};
  if (name == ":scheme") return {r.scheme};
  std::vector<std::string_view> out;
  for (const auto& [k, v] : r.headers)
    if (ascii_iequals(k, name)) out.emplace_back(v);
  return out;
}

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/// A query parameter's name or value decoded as Envoy's urlDecodeQueryParameter: %XX and '+'.
std::string decode_query(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

/// The first value of query parameter `name` in `path`'s query string (after '?', before
/// '#'), decoded; nullopt when absent.
std::optional<std::string> first_query_value(std::string_view path, std::string_view name) {
  const std::size_t q = path.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view query = path.substr(q + 1);
  query = query.substr(0, query.find('#'));
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (param.empty()) continue;
    const std::size_t eq = param.find('=');
    if (decode_query(param.substr(0, eq)) != name) continue;
    return eq == std::string_view::npos ? std::string{} : decode_query(param.substr(eq + 1));
  }
  return std::nullopt;
}

[[noreturn]] void fail(const std::string& file, const YAML::Node& node, const std::string& field,
                       const std::string& reason) {
  throw std::invalid_argument(file + ":" + std::to_string(node.Mark().line + 1) + ": " + field +
                              ": " + reason);
}

/// Refuses any key of map `node` not in `allowed`; `node` must be a map (or null: empty).
void only(const std::string& file, const YAML::Node& node, const std::string& field,
          std::initializer_list<std::string_view> allowed) {
  if (node.IsNull()) return;
  if (!node.IsMap()) fail(file, node, field, "must be a map");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
      fail(file, kv.first, field + "." + key, "unknown field");
  }
}

std::string text(const std::string& file, const YAML::Node& map, const std::string& field,
                 const std::string& name, bool required) {
  const YAML::Node n = map.IsMap() ? map[name] : YAML::Node();
  if (!n) {
    if (required) fail(file, map, field + "." + name, "required");
    return {};
  }
  if (!n.IsScalar()) fail(file, n, field + "." + name, "must be a string");
  std::string v = n.as<std::string>();
  if (required && v.empty()) fail(file, n, field + "." + name, "must not be empty");
  return v;
}

bool flag(const std::string& file, const YAML::Node& map, const std::string& field,
          const std::string& name, bool fallback) {
  const YAML::Node n = map.IsMap() ? map[name] : YAML::Node();
  if (!n) return fallback;
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v))
    fail(file, n, field + "." + name, "must be true or false, not '" + YAML::Dump(n) + "'");
  return v;
}

std::int64_t integer(const std::string& file, const YAML::Node& map, const std::string& field,
                     const std::string& name, std::int64_t fallback, std::int64_t lo,
                     std::int64_t hi) {
  const YAML::Node n = map.IsMap() ? map[name] : YAML::Node();
  if (!n) return fallback;
  const std::string s = n.IsScalar() ? n.as<std::string>() : std::string{};
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size() || v < lo || v > hi)
    fail(file, n, field + "." + name,
         "must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", not '" +
             s + "'");
  return v;
}

/// envoy.type.matcher.v3.StringMatcher: exact, prefix, suffix, contains, safe_regex (RE2, the
/// whole value), with ignore_case for all but the regex.
struct StringMatch {
  enum class Kind { exact, prefix, suffix, contains, regex } kind = Kind::exact;
  std::string value;
  bool ignore_case = false;
  std::shared_ptr<const re2::RE2> regex;

  bool matches(std::string_view v) const {
    if (kind == Kind::regex)
      return re2::RE2::FullMatch(re2::StringPiece(v.data(), v.size()), *regex);
    const std::string a = ignore_case ? ascii_lower(v) : std::string(v);
    const std::string b = ignore_case ? ascii_lower(value) : value;
    switch (kind) {
      case Kind::exact:
        return a == b;
      case Kind::prefix:
        return a.starts_with(b);
      case Kind::suffix:
        return a.ends_with(b);
      case Kind::contains:
        return a.find(b) != std::string::npos;
      case Kind::regex:
        break;
    }
    return false;
  }
};

constexpr std::size_t max_regex = 1024;

std::shared_ptr<const re2::RE2> compile(const std::string& file, const YAML::Node& at,
                                        const std::string& field, const std::string& pattern) {
  if (pattern.size() > max_regex)
    fail(file, at, field, "longer than " + std::to_string(max_regex) + " characters");
  re2::RE2::Options options;
  options.set_log_errors(false);
  options.set_max_mem(1 << 20);  // bounds the compiled program; RE2 matches in linear time
  auto re = std::make_shared<const re2::RE2>(pattern, options);
  if (!re->ok()) fail(file, at, field, "not a valid RE2 regex: " + re->error());
  return re;
}

StringMatch string_match(const std::string& file, const YAML::Node& n, const std::string& field) {
  only(file, n, field, {"exact", "prefix", "suffix", "contains", "safe_regex", "ignore_case"});
  if (!n.IsMap()) fail(file, n, field, "must be a map");
  StringMatch m;
  int kinds = 0;
  for (const auto& [name, kind] : {std::pair{"exact", StringMatch::Kind::exact},
                                   {"prefix", StringMatch::Kind::prefix},
                                   {"suffix", StringMatch::Kind::suffix},
                                   {"contains", StringMatch::Kind::contains}}) {
    if (!n[name]) continue;
    ++kinds;
    m.kind = kind;
    m.value = text(file, n, field, name, false);
  }
  if (const YAML::Node re = n["safe_regex"]) {
    ++kinds;
    only(file, re, field + ".safe_regex", {"regex", "google_re2"});
    m.kind = StringMatch::Kind::regex;
    m.regex = compile(file, re, field + ".safe_regex.regex",
                      text(file, re, field + ".safe_regex", "regex", true));
  }
  if (kinds != 1)
    fail(file, n, field, "needs exactly one of exact, prefix, suffix, contains, safe_regex");
  m.ignore_case = flag(file, n, field, "ignore_case", false);
  if (m.ignore_case && m.kind == StringMatch::Kind::regex)
    fail(file, n, field + ".ignore_case", "not with safe_regex");
  return m;
}

/// envoy.config.route.v3.HeaderMatcher.
struct HeaderMatch {
  enum class Kind { string, present, range } kind = Kind::string;
  std::string name;  // lower case
  StringMatch string;
  bool present = true;
  std::int64_t start = 0, end = 0;
  bool invert = false;
  bool missing_as_empty = false;

  bool matches(const OriginalRequest& r) const {
    const std::vector<std::string_view> values = header_values(r, name);
    if (kind == Kind::present) return (present == !values.empty()) != invert;
    std::string joined;
    if (values.empty()) {
      // An absent header matches nothing, inverted or not (Envoy's HeaderDataBaseImpl).
      if (!missing_as_empty) return false;
    } else {
      for (std::size_t i = 0; i < values.size(); ++i) {
        if (i != 0) joined.push_back(',');
        joined.append(values[i]);
      }
    }
    bool result = false;
    if (kind == Kind::string) {
      result = string.matches(joined);
    } else {
      std::int64_t v = 0;
      const auto [p, ec] = std::from_chars(joined.data(), joined.data() + joined.size(), v);
      result = !joined.empty() && ec == std::errc{} && p == joined.data() + joined.size() &&
               v >= start && v < end;
    }
    return result != invert;
  }
};

HeaderMatch header_match(const std::string& file, const YAML::Node& n, const std::string& field) {
  only(file, n, field,
       {"name", "exact_match", "safe_regex_match", "range_match", "present_match", "prefix_match",
        "suffix_match", "contains_match", "string_match", "invert_match",
        "treat_missing_header_as_empty"});
  if (!n.IsMap()) fail(file, n, field, "must be a map");
  HeaderMatch m;
  m.name = ascii_lower(text(file, n, field, "name", true));
  int kinds = 0;
  for (const auto& [name, kind] : {std::pair{"exact_match", StringMatch::Kind::exact},
                                   {"prefix_match", StringMatch::Kind::prefix},
                                   {"suffix_match", StringMatch::Kind::suffix},
                                   {"contains_match", StringMatch::Kind::contains}}) {
    if (!n[name]) continue;
    ++kinds;
    m.string.kind = kind;
    m.string.value = text(file, n, field, name, false);
  }
  if (n["safe_regex_match"]) {
    ++kinds;
    const YAML::Node re = n["safe_regex_match"];
    only(file, re, field + ".safe_regex_match", {"regex", "google_re2"});
    m.string.kind = StringMatch::Kind::regex;
    m.string.regex = compile(file, re, field + ".safe_regex_match.regex",
                             text(file, re, field + ".safe_regex_match", "regex", true));
  }
  if (n["string_match"]) {
    ++kinds;
    m.string = string_match(file, n["string_match"], field + ".string_match");
  }
  if (n["present_match"]) {
    ++kinds;
    m.kind = HeaderMatch::Kind::present;
    m.present = flag(file, n, field, "present_match", true);
  }
  if (const YAML::Node range = n["range_match"]) {
    ++kinds;
    only(file, range, field + ".range_match", {"start", "end"});
    m.kind = HeaderMatch::Kind::range;
    constexpr std::int64_t big = INT64_MAX;
    m.start = integer(file, range, field + ".range_match", "start", 0, -big, big);
    m.end = integer(file, range, field + ".range_match", "end", 0, -big, big);
  }
  if (kinds == 0) {  // no match specifier: Envoy matches any present value
    m.kind = HeaderMatch::Kind::present;
    m.present = true;
  }
  if (kinds > 1) fail(file, n, field, "more than one match specifier");
  m.invert = flag(file, n, field, "invert_match", false);
  m.missing_as_empty = flag(file, n, field, "treat_missing_header_as_empty", false);
  return m;
}

/// envoy.config.route.v3.QueryParameterMatcher: the parameter present (its first value
/// matching `string_match` when given).
struct QueryMatch {
  std::string name;
  std::optional<StringMatch> string;
  bool matches(const OriginalRequest& r) const {
    const std::optional<std::string> v = first_query_value(r.path, name);
    if (!v) return false;
    return !string || string->matches(*v);
  }
};

QueryMatch query_match(const std::string& file, const YAML::Node& n, const std::string& field) {
  only(file, n, field, {"name", "string_match", "present_match"});
  if (!n.IsMap()) fail(file, n, field, "must be a map");
  QueryMatch m;
  m.name = text(file, n, field, "name", true);
  if (n["string_match"] && n["present_match"])
    fail(file, n, field, "string_match and present_match are exclusive");
  if (n["string_match"]) m.string = string_match(file, n["string_match"], field + ".string_match");
  if (n["present_match"] && !flag(file, n, field, "present_match", true))
    fail(file, n["present_match"], field + ".present_match", "only true is meaningful");
  return m;
}

}  // namespace

/// One action of an entry: produces its descriptor entry, or says the descriptor is dropped.
struct Action {
  enum class Kind {
    request_headers,
    remote_address,
    masked_remote_address,
    generic_key,
    header_value_match,
    query_parameters,
    query_parameter_value_match
  } kind{};
  std::string name;  // header or parameter name
  std::string key;
  std::string value;
  bool skip_if_absent = false;
  bool expect_match = true;
  unsigned v4_mask = 32, v6_mask = 128;
  std::vector<HeaderMatch> headers;
  std::vector<QueryMatch> params;

  /// false: the descriptor is dropped. `entry` stays empty for a skipped action.
  bool produce(const OriginalRequest& r, std::pair<std::string, std::string>& entry) const {
    switch (kind) {
      case Kind::request_headers: {
        const auto values = header_values(r, name);
        if (values.empty()) return skip_if_absent;
        entry = {key, std::string(values.front())};
        return true;
      }
      case Kind::query_parameters: {
        auto v = first_query_value(r.path, name);
        if (!v) return skip_if_absent;
        entry = {key, std::move(*v)};
        return true;
      }
      case Kind::remote_address:
      case Kind::masked_remote_address: {
        unsigned char bytes[16] = {};
        const bool v4 = inet_pton(AF_INET, r.client_address.c_str(), bytes) == 1;
        if (!v4 && inet_pton(AF_INET6, r.client_address.c_str(), bytes) != 1) return false;
        char textual[INET6_ADDRSTRLEN] = {};
        if (kind == Kind::remote_address) {
          inet_ntop(v4 ? AF_INET : AF_INET6, bytes, textual, sizeof textual);
          entry = {"remote_address", textual};
          return true;
        }
        const unsigned len = v4 ? v4_mask : v6_mask;
        const unsigned total = v4 ? 4 : 16;
        for (unsigned i = 0; i < total; ++i) {
          const unsigned bits_before = i * 8;
          if (bits_before >= len)
            bytes[i] = 0;
          else if (len - bits_before < 8)
            bytes[i] = static_cast<unsigned char>(bytes[i] & (0xFF << (8 - (len - bits_before))));
        }
        inet_ntop(v4 ? AF_INET : AF_INET6, bytes, textual, sizeof textual);
        entry = {"masked_remote_address", std::string(textual) + "/" + std::to_string(len)};
        return true;
      }
      case Kind::generic_key:
        entry = {key, value};
        return true;
      case Kind::header_value_match: {
        const bool all = std::all_of(headers.begin(), headers.end(),
                                     [&](const HeaderMatch& m) { return m.matches(r); });
        if (all != expect_match) return false;
        entry = {key, value};
        return true;
      }
      case Kind::query_parameter_value_match: {
        const bool all = std::all_of(params.begin(), params.end(),
                                     [&](const QueryMatch& m) { return m.matches(r); });
        if (all != expect_match) return false;
        entry = {key, value};
        return true;
      }
    }
    return false;
  }
};

struct RateLimitEntry {
  std::vector<Action> actions;
};

DomainActions::DomainActions() = default;
DomainActions::~DomainActions() = default;
DomainActions::DomainActions(DomainActions&&) noexcept = default;
DomainActions& DomainActions::operator=(DomainActions&&) noexcept = default;

std::vector<DescriptorEntries> DomainActions::descriptors(const OriginalRequest& request) const {
  std::vector<DescriptorEntries> out;
  for (const auto& e : entries) {
    DescriptorEntries d;
    bool ok = true;
    for (const Action& a : e->actions) {
      std::pair<std::string, std::string> entry;
      if (!a.produce(request, entry)) {
        ok = false;
        break;
      }
      if (!entry.first.empty()) d.push_back(std::move(entry));
    }
    // Envoy sends a descriptor whose actions all succeeded, even one left empty by skipped
    // actions; the service refuses an empty descriptor's entries, so it is left out here.
    if (ok && !d.empty()) out.push_back(std::move(d));
  }
  return out;
}

namespace {

Action action(const std::string& file, const YAML::Node& n, const std::string& field) {
  if (!n.IsMap() || n.size() != 1) fail(file, n, field, "must be a map with exactly one action");
  const std::string type = n.begin()->first.as<std::string>();
  const YAML::Node body = n.begin()->second;
  const std::string f = field + "." + type;
  if (!body.IsNull() && !body.IsMap()) fail(file, body, f, "must be a map");
  Action a;
  if (type == "request_headers") {
    only(file, body, f, {"header_name", "descriptor_key", "skip_if_absent"});
    a.kind = Action::Kind::request_headers;
    a.name = ascii_lower(text(file, body, f, "header_name", true));
    a.key = text(file, body, f, "descriptor_key", true);
    a.skip_if_absent = flag(file, body, f, "skip_if_absent", false);
  } else if (type == "remote_address") {
    only(file, body, f, {});
    a.kind = Action::Kind::remote_address;
  } else if (type == "masked_remote_address") {
    only(file, body, f, {"v4_prefix_mask_len", "v6_prefix_mask_len"});
    a.kind = Action::Kind::masked_remote_address;
    a.v4_mask = static_cast<unsigned>(integer(file, body, f, "v4_prefix_mask_len", 32, 0, 32));
    a.v6_mask = static_cast<unsigned>(integer(file, body, f, "v6_prefix_mask_len", 128, 0, 128));
  } else if (type == "generic_key") {
    only(file, body, f, {"descriptor_value", "descriptor_key"});
    a.kind = Action::Kind::generic_key;
    a.value = text(file, body, f, "descriptor_value", true);
    a.key = text(file, body, f, "descriptor_key", false);
    if (a.key.empty()) a.key = "generic_key";
  } else if (type == "header_value_match") {
    only(file, body, f, {"descriptor_value", "descriptor_key", "expect_match", "headers"});
    a.kind = Action::Kind::header_value_match;
    a.value = text(file, body, f, "descriptor_value", true);
    a.key = text(file, body, f, "descriptor_key", false);
    if (a.key.empty()) a.key = "header_match";
    a.expect_match = flag(file, body, f, "expect_match", true);
    const YAML::Node hs = body.IsMap() ? body["headers"] : YAML::Node();
    if (!hs || !hs.IsSequence() || hs.size() == 0)
      fail(file, hs ? hs : body, f + ".headers", "needs a list of at least one header matcher");
    if (hs.size() > ActionsConfig::max_matchers)
      fail(file, hs, f + ".headers", "more than " + std::to_string(ActionsConfig::max_matchers));
    for (const auto& h : hs) a.headers.push_back(header_match(file, h, f + ".headers"));
  } else if (type == "query_parameters") {
    only(file, body, f, {"query_parameter_name", "descriptor_key", "skip_if_absent"});
    a.kind = Action::Kind::query_parameters;
    a.name = text(file, body, f, "query_parameter_name", true);
    a.key = text(file, body, f, "descriptor_key", true);
    a.skip_if_absent = flag(file, body, f, "skip_if_absent", false);
  } else if (type == "query_parameter_value_match") {
    only(file, body, f, {"descriptor_value", "descriptor_key", "expect_match", "query_parameters"});
    a.kind = Action::Kind::query_parameter_value_match;
    a.value = text(file, body, f, "descriptor_value", true);
    a.key = text(file, body, f, "descriptor_key", false);
    if (a.key.empty()) a.key = "query_match";
    a.expect_match = flag(file, body, f, "expect_match", true);
    const YAML::Node qs = body.IsMap() ? body["query_parameters"] : YAML::Node();
    if (!qs || !qs.IsSequence() || qs.size() == 0)
      fail(file, qs ? qs : body, f + ".query_parameters",
           "needs a list of at least one query parameter matcher");
    if (qs.size() > ActionsConfig::max_matchers)
      fail(file, qs, f + ".query_parameters",
           "more than " + std::to_string(ActionsConfig::max_matchers));
    for (const auto& q : qs) a.params.push_back(query_match(file, q, f + ".query_parameters"));
  } else if (type == "source_cluster" || type == "destination_cluster" || type == "metadata" ||
             type == "dynamic_metadata" || type == "extension") {
    fail(file, n, f, "needs Envoy's own state; a gateway's check cannot produce it");
  } else {
    fail(file, n, f, "unknown action");
  }
  return a;
}

}  // namespace

ActionsConfig ActionsConfig::parse(std::string_view text_in, const std::string& file) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text_in));
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(file + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  ActionsConfig config;
  if (root.IsNull()) return config;
  only(file, root, "file", {"domains"});
  const YAML::Node domains = root["domains"];
  if (!domains || !domains.IsSequence()) fail(file, root, "domains", "must be a list");
  for (const auto& d : domains) {
    only(file, d, "domains[]", {"domain", "rate_limits"});
    if (!d.IsMap()) fail(file, d, "domains[]", "must be a map");
    const std::string name = text(file, d, "domains[]", "domain", true);
    if (config.domains_.count(name) != 0) fail(file, d["domain"], "domain", "'" + name + "' twice");
    DomainActions actions;
    const YAML::Node limits = d["rate_limits"];
    if (!limits || !limits.IsSequence()) fail(file, d, "rate_limits", "must be a list");
    if (limits.size() > max_entries)
      fail(file, limits, "rate_limits", "more than " + std::to_string(max_entries) + " entries");
    for (const auto& e : limits) {
      only(file, e, "rate_limits[]", {"actions", "stage", "disable_key", "limit"});
      if (!e.IsMap()) fail(file, e, "rate_limits[]", "must be a map");
      if (e["disable_key"])
        fail(file, e["disable_key"], "disable_key", "not supported by the check");
      if (e["limit"])
        fail(file, e["limit"], "limit",
             "not supported by the check (needs Envoy's dynamic metadata)");
      const auto stage = integer(file, e, "rate_limits[]", "stage", 0, 0, 10);
      const YAML::Node list = e["actions"];
      if (!list || !list.IsSequence() || list.size() == 0)
        fail(file, list ? list : e, "actions", "needs a list of at least one action");
      if (list.size() > max_actions)
        fail(file, list, "actions", "more than " + std::to_string(max_actions) + " actions");
      auto entry = std::make_unique<RateLimitEntry>();
      for (const auto& a : list) entry->actions.push_back(action(file, a, "actions[]"));
      if (stage == 0) actions.entries.push_back(std::move(entry));
    }
    config.domains_.emplace(name, std::move(actions));
  }
  return config;
}

ActionsConfig ActionsConfig::load(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::invalid_argument(file.string() + ": cannot read");
  std::ostringstream s;
  s << in.rdbuf();
  return parse(s.str(), file.string());
}

const DomainActions* ActionsConfig::domain(std::string_view name) const {
  const auto it = domains_.find(name);
  return it == domains_.end() ? nullptr : &it->second;
}

}  // namespace ratelimit::server::check
