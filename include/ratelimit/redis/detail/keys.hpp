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
///    the hash tag's algorithm tag, or two when a client key follows (kept as it is: it is last);
///  - a client key or tag longer than `max_plain_key_bytes` appears as "%H" and its SHA-256 in
///    64 lower-case hex digits instead: in braces, and right after the name (no second ':') when
///    it follows the tail. Escaping never writes "%H" ('%' is followed by two upper-case hex
///    digits, or by the closing brace for the empty key), so a digest meets no escaped key.
/// So two different (prefix, key, tag, algorithm, format, name) never give the same Redis key
/// (up to a SHA-256 collision between two long keys), and every key of one client key (one
/// decision) hashes to one Redis Cluster slot. Long keys are digested so that a decision's
/// size does not grow with its key: a client choosing a megabyte key would otherwise store a
/// megabyte in Redis per key, and a decision larger than `max_in_flight_bytes` on its own would
/// never be sent (decided by the failure policy: with `fail_open`, never limited).

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>

#include "digest.hpp"

namespace ratelimit::detail {

/// Client keys and tags up to this many bytes appear in Redis key names as themselves
/// (escaped); longer ones by their SHA-256 (see above).
inline constexpr std::size_t max_plain_key_bytes = 256;

/// Appends "%H" and the SHA-256 of `bytes` in lower-case hex (66 bytes).
inline void append_key_digest(std::string& out, std::string_view bytes) {
  out += "%H";
  append_hex_digest(out, bytes, EVP_sha256());
}

/// The state format version in every key name. Bumped when a script's state or key layout
/// changes: instances of different versions then count separately (docs/redis.md, "Upgrades").
inline constexpr std::string_view key_format = "2";

/// Appends `bytes` with `special` and '%' written as %XX (upper-case hex). Runs of plain bytes
/// are copied whole, and a long one is found by memchr: a client key can be megabytes, and a
/// byte-by-byte scan was 43 % of the CPU of decisions on 4 MiB keys (perf, g++ -O2).
inline void append_escaped(std::string& out, std::string_view bytes, char special) {
  static constexpr char digits[] = "0123456789ABCDEF";
  if (bytes.empty()) return;  // memchr may not be given the null data() of an empty view
  const char* p = bytes.data();
  const char* const end = p + bytes.size();
  const auto next = [end](const char* from, char c) {
    const void* hit = std::memchr(from, c, static_cast<std::size_t>(end - from));
    return hit != nullptr ? static_cast<const char*>(hit) : end;
  };
  // Where memchr last found each byte: still the next one while not passed, so each is looked
  // for again only once passed. Every byte is scanned at most three times (once here, once by
  // each memchr): linear in the key, however its special bytes are placed.
  const char* percent = p;
  const char* other = p;
  for (;;) {
    // Up to 64 bytes one by one first: a short key needs no call, and where special bytes
    // are dense (a hostile key of "%a" repeated) a memchr call after each one cost 2.4 times
    // the plain scan. Past 64 plain bytes, memchr.
    const char* const near = p + std::min<std::size_t>(64, static_cast<std::size_t>(end - p));
    const char* stop =
        std::find_if(p, near, [special](char c) { return c == '%' || c == special; });
    if (stop == near && stop != end) {
      if (percent < stop) percent = next(stop, '%');
      if (other < stop) other = next(stop, special);
      stop = std::min(percent, other);
    }
    out.append(p, static_cast<std::size_t>(stop - p));
    if (stop == end) return;
    const auto b = static_cast<unsigned char>(*stop);
    out.push_back('%');
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 0xF]);
    p = stop + 1;
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
  const auto shown = [](std::string_view k) { return std::min(k.size(), max_plain_key_bytes); };
  std::string key;
  key.reserve(prefix.size() + shown(braced) + tail.size() + 4 + 64 +
              (tagged ? shown(client_key) + 1 + 64 : 0));
  key += prefix;
  key += '{';
  if (braced.empty())
    key += '%';
  else if (braced.size() > max_plain_key_bytes)
    append_key_digest(key, braced);
  else
    append_escaped(key, braced, '}');
  key += '}';
  key += tail;
  if (tagged && client_key.size() > max_plain_key_bytes) {
    append_key_digest(key, client_key);
  } else if (tagged) {
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
