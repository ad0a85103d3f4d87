#pragma once
/// @file rules/match.hpp
/// Matching a request against the descriptor tree of a rules file, in its two forms: the
/// wildcard match and the index of each level (`wildcard_match`, `LevelIndex`), then the walks.
/// `Rules` (rules/rules.hpp) is the public face of these walks.
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
/// `RuleSet` decides a flat request as the descriptor list `Rules::descriptors_of` makes of it:
/// one descriptor per limit (or `unlimited: true`) the walk lands on, whose entries are its
/// path's keys with the request's values, so that both forms decide alike.
///
/// ## Matching: Envoy's descriptor list (`RuleSet::decide(const RateLimitRequest&)`)
/// As the reference service: a request is a domain and several descriptors, each an ordered
/// list of entries; each descriptor walks the tree one level per entry (exact value, else the
/// first matching wildcard, else the key alone) and gets the limit where its last entry lands,
/// if any (see `Rules::lookup`). So `{{"path", "/login"}, {"api_key", K}}` gets only the limit
/// nested under `path: /login`, and `{{"api_key", K}}` only a top-level `api_key` limit: a
/// request sends one descriptor per limit it wants. `RateLimitService` (rules/service.hpp)
/// serves every domain of a `RulesConfig` and reloads it atomically.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "detail/tree.hpp"
#include "request.hpp"
#include "rule.hpp"

namespace ratelimit::detail {

/// The first position of `part` in `text` (npos if none), in time linear in the sizes whatever
/// the bytes: glibc's memmem (the Two-Way string-matching algorithm for long needles).
/// std::string_view::find compares up to |part| bytes at each position (a^m b in a^n: |text| x
/// |part|), so a long wildcard part in a file and a long value in a request took minutes.
/// Thread safety: pure.
inline std::size_t find_linear(std::string_view text, std::string_view part) noexcept {
  if (part.empty()) return 0;
  const void* at = ::memmem(text.data(), text.size(), part.data(), part.size());
  return at == nullptr ? std::string_view::npos
                       : static_cast<std::size_t>(static_cast<const char*>(at) - text.data());
}

/// Whether `value` matches the wildcard `pattern`, where each `*` stands for any run of
/// characters (possibly none) and the rest must appear in order: a prefix, the middle parts
/// each at their first occurrence, a suffix. Linear in the sizes (`find_linear`).
/// Thread safety: pure.
inline bool wildcard_match(std::string_view pattern, std::string_view value) noexcept {
  const auto star = pattern.find('*');
  if (star == std::string_view::npos) return pattern == value;
  const auto last = pattern.rfind('*');
  const std::string_view prefix = pattern.substr(0, star), suffix = pattern.substr(last + 1);
  if (value.size() < prefix.size() + suffix.size()) return false;
  if (value.substr(0, prefix.size()) != prefix) return false;
  if (value.substr(value.size() - suffix.size()) != suffix) return false;
  std::string_view rest = value.substr(prefix.size(), value.size() - prefix.size() - suffix.size());
  std::string_view middle = pattern.substr(star + 1, last - star - (last > star ? 1 : 0));
  while (!middle.empty()) {
    const auto next = middle.find('*');
    const std::string_view part = middle.substr(0, next);
    if (!part.empty()) {
      const auto at = find_linear(rest, part);
      if (at == std::string_view::npos) return false;
      rest.remove_prefix(at + part.size());
    }
    if (next == std::string_view::npos) break;
    middle.remove_prefix(next + 1);
  }
  return true;
}

/// One level of the tree, indexed for matching: per key, the descriptors with an exact value,
/// those with a wildcard value (file order) and the one with no value. Positions index the
/// level's vector of nodes. Thread safety: immutable once built.
struct LevelIndex {
  struct Group {
    std::unordered_map<std::string, std::size_t> exact;
    std::vector<std::size_t> wildcards;
    std::ptrdiff_t any = -1;
  };
  std::unordered_map<std::string, Group> keys;

  explicit LevelIndex(const std::vector<RuleNode>& nodes) {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      Group& g = keys[nodes[i].key];
      if (!nodes[i].has_value)
        g.any = static_cast<std::ptrdiff_t>(i);
      else if (nodes[i].wildcard)
        g.wildcards.push_back(i);
      else
        g.exact.emplace(nodes[i].value, i);
    }
  }

  /// The descriptor an entry (key, value) lands on: the one with this exact value, else the
  /// first whose wildcard matches in file order, else the one with no value; -1 if none.
  std::ptrdiff_t pick(const std::vector<RuleNode>& nodes, std::string_view key,
                      std::string_view value) const {
    const auto g = keys.find(std::string(key));
    if (g == keys.end()) return -1;
    if (const auto e = g->second.exact.find(std::string(value)); e != g->second.exact.end())
      return static_cast<std::ptrdiff_t>(e->second);
    for (const std::size_t w : g->second.wildcards)
      if (wildcard_match(nodes[w].value, value)) return static_cast<std::ptrdiff_t>(w);
    return g->second.any;
  }
};

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

/// Where the flat walk stands: the counter key so far (see `RuleMatch::key`), the first client
/// ("key=value") among the varying descriptors on the way and its value length-prefixed (the
/// co-location tag), and each level's (descriptor key, request value) from the top down.
struct FlatWalk {
  std::string key, client, tag;
  std::vector<std::pair<const std::string*, const std::string*>> entries;
};

/// The flat walk below `nodes` (indexed by `index`): `visit(node, at)` for every descriptor
/// the request lands on, parents before their nested descriptors, in file order.
template <class Visit>
void walk_flat(const LoadedRules& rules, const std::vector<RuleNode>& nodes,
               const LevelIndex& index, const FirstEntries& request, FlatWalk& at, Visit& visit) {
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const RuleNode& n = nodes[i];
    const std::string* value = request.find(n.key);
    if (value == nullptr) continue;
    // The descriptor this key's value lands on: exact, else first wildcard, else no value.
    if (index.pick(nodes, n.key, *value) != static_cast<std::ptrdiff_t>(i)) continue;
    const std::size_t key_size = at.key.size(), client_size = at.client.size(),
                      tag_size = at.tag.size();
    if (!n.has_value || (n.wildcard && !n.share_threshold)) {
      append_field(at.key, *value);
      if (at.client.empty() && rules.is_client_key(n.key)) {
        at.client = n.key + "=" + *value;
        append_field(at.tag, *value);
      }
    }
    at.entries.emplace_back(&n.key, value);
    visit(n, std::as_const(at));
    if (n.index) walk_flat(rules, n.children, *n.index, request, at, visit);
    at.entries.pop_back();
    at.key.resize(key_size);
    at.client.resize(client_size);
    at.tag.resize(tag_size);
  }
}

/// The flat walk of a whole request from the top level (see the file comment).
template <class Visit>
void walk_flat(const LoadedRules& rules, std::span<const DescriptorEntry> request, Visit&& visit) {
  FlatWalk at;
  walk_flat(rules, rules.roots, *rules.index, FirstEntries(request), at, visit);
}

/// Where one descriptor of a descriptor-list request lands (see `Rules::lookup`).
inline DescriptorMatch lookup_descriptor(const LoadedRules& rules,
                                         std::span<const DescriptorEntry> entries) {
  DescriptorMatch out;
  if (entries.empty()) return out;
  const std::vector<RuleNode>* level = &rules.roots;
  const LevelIndex* index = rules.index.get();
  std::string key, tag;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const DescriptorEntry& e = entries[i];
    const std::ptrdiff_t at = index->pick(*level, e.key, e.value);
    if (at < 0) return DescriptorMatch{};
    const RuleNode& n = (*level)[static_cast<std::size_t>(at)];
    if (!n.has_value || (n.wildcard && !n.share_threshold)) {
      append_field(key, e.value);
      if (tag.empty() && rules.is_client_key(e.key)) append_field(tag, e.value);
    }
    if (i + 1 == entries.size()) {
      out.rule = rules.rule_of(n);
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

/// The client ("key=value") of a per-client `rule` for a descriptor whose entry j landed on
/// step j of the rule's path (as `lookup_descriptor` walks): the first varying step whose key
/// is a client key, as the flat walk names it; "" for a shared rule.
inline std::string client_of(const std::vector<std::string>& client_keys, const Rule& rule,
                             std::span<const DescriptorEntry> entries) {
  if (!rule.per_client) return {};
  for (std::size_t j = 0; j < entries.size() && j < rule.path.size(); ++j)
    if (rule.path[j].varies() &&
        std::find(client_keys.begin(), client_keys.end(), entries[j].key) != client_keys.end())
      return entries[j].key + "=" + entries[j].value;
  return {};
}

}  // namespace ratelimit::detail
