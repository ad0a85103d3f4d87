#pragma once
/// @file redis/detail/keys.hpp
/// Redis key names: unambiguous for arbitrary client keys, one hash tag per client key.
///
/// Layout: <prefix>{k<hex(client key)>}:<algorithm>:<hex(limiter name)>[<suffix>], or with a
/// separate hash tag <prefix>{k<hex(tag)>}:<algorithm>:<hex(limiter name)>:<hex(key)>[<suffix>]
///  - the prefix may not contain '{' or '}', so the first '{' always opens the hash tag;
///  - inside the tag the client key is hex-encoded, so no byte of it ('}', NUL, ...) can end the
///    tag early, and the 'k' keeps the tag non-empty for the empty key (Redis Cluster hashes
///    the whole name when the tag is empty, which would split a decision's keys over slots);
///  - the algorithm is a fixed identifier and the name is hex, neither contains ':', and a
///    suffix starts with ':', so every part can be read back: two different (prefix, key,
///    algorithm, name, suffix) never give the same Redis key.
/// All keys of one decision share the tag, so they live on one Redis Cluster slot.

#include <string>
#include <string_view>

namespace ratelimit::detail {

inline void append_hex(std::string& out, std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  out.reserve(out.size() + bytes.size() * 2);
  for (const char ch : bytes) {
    const auto b = static_cast<unsigned char>(ch);
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 0xF]);
  }
}

/// ":<algorithm>:<hex(name)>", computed once per binding.
inline std::string redis_key_tail(std::string_view algorithm, std::string_view name) {
  std::string tail = ":";
  tail += algorithm;
  tail += ':';
  append_hex(tail, name);
  return tail;
}

/// The full Redis key of `client_key` for a binding's `tail`, with an optional `suffix`
/// (":log", ":meta": empty or starting with ':'). With a `tag` other than the client key (a
/// rule set's per-client tag), the tag goes in braces and the client key follows the tail as
/// ":<hex(key)>", so keys with different tags or keys never meet; an empty tag, or one equal to
/// the key, gives exactly the limiter's key.
inline std::string redis_key(std::string_view prefix, std::string_view client_key,
                             std::string_view tail, std::string_view suffix = {},
                             std::string_view tag = {}) {
  const bool tagged = !tag.empty() && tag != client_key;
  const std::string_view braced = tagged ? tag : client_key;
  std::string key;
  key.reserve(prefix.size() + braced.size() * 2 + tail.size() + suffix.size() + 4 +
              (tagged ? client_key.size() * 2 + 1 : 0));
  key += prefix;
  key += "{k";
  append_hex(key, braced);
  key += '}';
  key += tail;
  if (tagged) {
    key += ':';
    append_hex(key, client_key);
  }
  key += suffix;
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
