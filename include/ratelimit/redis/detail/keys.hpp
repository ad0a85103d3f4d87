#pragma once
/// @file redis/detail/keys.hpp
/// Redis key names: unambiguous for arbitrary client keys, one hash tag per client key, and no
/// longer than they must be (a client key such as "user:12345" appears as itself).
///
/// Layout: <prefix>{<tag(client key)>}<algorithm tag><format>:<name(limiter name)>, or with a
/// separate hash tag (a rule set's per-client tag)
/// <prefix>{<tag(tag)>}<algorithm tag><format>:<name(limiter name)>:<client key>
///  - the prefix may not contain '{' or '}', so the first '{' always opens the hash tag;
///  - tag(): the bytes as they are, except '%' -> "%25" and '}' -> "%7D", so nothing ends the
///    hash tag early; the empty key is "%" (which no other key gives), so the tag is never empty
///    (Redis Cluster hashes the whole name when it is, which would split a decision's keys);
///  - the algorithm tag is a short fixed identifier (`Wire::key_tag`, "tb", "sl", ...) and the
///    format is `key_format`: state written by another format version lives under other names;
///  - name(): '%' -> "%25" and ':' -> "%3A", so the name holds no ':'. A key has one ':' after
///    the hash tag's algorithm tag, or two when a client key follows (kept as it is: it is last).
/// So two different (prefix, key, tag, algorithm, format, name) never give the same Redis key,
/// and every key of one client key (one decision) hashes to one Redis Cluster slot.

#include <algorithm>
#include <string>
#include <string_view>

namespace ratelimit::detail {

/// The state format version in every key name. Bumped when a script's state or key layout
/// changes: instances of different versions then count separately (docs/redis.md, "Upgrades").
inline constexpr std::string_view key_format = "2";

/// Appends `bytes` with `special` and '%' written as %XX (upper-case hex). Runs of plain bytes
/// are copied whole: a client key can be megabytes.
inline void append_escaped(std::string& out, std::string_view bytes, char special) {
  static constexpr char digits[] = "0123456789ABCDEF";
  const auto plain = [special](char c) { return c != '%' && c != special; };
  auto it = bytes.begin();
  for (;;) {
    const auto stop = std::find_if_not(it, bytes.end(), plain);
    out.append(it, stop);
    if (stop == bytes.end()) return;
    const auto b = static_cast<unsigned char>(*stop);
    out.push_back('%');
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 0xF]);
    it = stop + 1;
  }
}

/// "<algorithm tag><format>:<name(limiter name)>", computed once per binding.
inline std::string redis_key_tail(std::string_view algorithm_tag, std::string_view name) {
  std::string tail(algorithm_tag);
  tail += key_format;
  tail += ':';
  append_escaped(tail, name, ':');
  return tail;
}

/// The Redis key of `client_key` for a binding's `tail`. With a `tag` other than the client key
/// (a rule set's per-client tag), the tag goes in braces and the client key follows the tail,
/// so keys with different tags or keys never meet; an empty tag, or one equal to the key, gives
/// exactly the limiter's key.
inline std::string redis_key(std::string_view prefix, std::string_view client_key,
                             std::string_view tail, std::string_view tag = {}) {
  const bool tagged = !tag.empty() && tag != client_key;
  const std::string_view braced = tagged ? tag : client_key;
  std::string key;
  key.reserve(prefix.size() + braced.size() + tail.size() + 4 +
              (tagged ? client_key.size() + 1 : 0));
  key += prefix;
  key += '{';
  if (braced.empty())
    key += '%';
  else
    append_escaped(key, braced, '}');
  key += '}';
  key += tail;
  if (tagged) {
    key += ':';
    key += client_key;
  }
  return key;
}

/// The hash tag of a key built by redis_key: what Redis Cluster hashes to pick the slot.
inline std::string_view redis_hash_tag(std::string_view redis_key) noexcept {
  const auto open = redis_key.find('{');
  if (open == std::string_view::npos) return redis_key;
  const auto close = redis_key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return redis_key;
  return redis_key.substr(open + 1, close - open - 1);
}

}  // namespace ratelimit::detail
