#pragma once
/// @file redis/detail/script.hpp
/// The scripts the Redis storage sends: one per algorithm (lua/prelude.lua, its model's
/// `Wire::lua` as its decide and write functions, then lua/single.lua), and one per set of
/// algorithms that an all-or-nothing decision spans (the prelude, each algorithm's two functions,
/// then lua/multi.lua). Each is composed once per process and named by its SHA1 (OpenSSL), which is
/// what EVALSHA sends.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../core/wire.hpp"
#include "../../lua/multi.hpp"
#include "../../lua/prelude.hpp"
#include "../../lua/single.hpp"
#include "digest.hpp"

namespace ratelimit::detail {

/// One Lua script: `body` is what EVAL sends, `sha1` (lower-case hex) what EVALSHA names, `id`
/// its number in this process (0, 1, ... in the order scripts are made), by which each node
/// remembers the scripts it holds (KnownScripts). Thread safety: immutable once made.
struct RedisScript {
  std::string name;
  std::string body;
  std::string sha1;
  std::size_t id = 0;
};

/// The next script's `id`.
inline std::size_t next_script_id() noexcept {
  static std::atomic<std::size_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed);
}

/// The scripts one node is known to hold in its script cache: those it ran or loaded since this
/// process first sent them there, and not answered NOSCRIPT since. A script the node is not
/// known to hold goes as EVAL with its body (which runs and caches it: one round trip), one it
/// holds as EVALSHA; so a process's first decision on a node costs one round trip, not the
/// EVALSHA, NOSCRIPT and EVAL of two. A few bits, lock-free: the first `capacity` scripts of
/// the process are tracked (each algorithm's own, the regional and lease scripts, the first
/// composed all-or-nothing sets); later ones always go as EVALSHA, reloaded on NOSCRIPT as
/// before. Thread safety: every member is safe from many threads.
class KnownScripts {
 public:
  static constexpr std::size_t capacity = 256;

  /// True if the node holds `s` as far as this process knows (always true past `capacity`).
  bool holds(const RedisScript& s) const noexcept {
    if (s.id >= capacity) return true;
    return (bits_[s.id / 64].load(std::memory_order_relaxed) >> (s.id % 64) & 1u) != 0;
  }
  /// The node ran or loaded `s`.
  void learned(const RedisScript& s) noexcept {
    if (s.id >= capacity || holds(s)) return;
    bits_[s.id / 64].fetch_or(std::uint64_t{1} << (s.id % 64), std::memory_order_relaxed);
  }
  /// The node answered NOSCRIPT for `s` (SCRIPT FLUSH, a restart, a failover).
  void forgot(const RedisScript& s) noexcept {
    if (s.id >= capacity) return;
    bits_[s.id / 64].fetch_and(~(std::uint64_t{1} << (s.id % 64)), std::memory_order_relaxed);
  }
  /// The node's connection was lost: the next one may reach a server that never ran any
  /// script (a restart), so each script's next use goes as EVAL (bytes, not a round trip).
  void forgot_all() noexcept {
    for (auto& b : bits_) b.store(0, std::memory_order_relaxed);
  }

 private:
  std::array<std::atomic<std::uint64_t>, capacity / 64> bits_{};
};

/// The SHA1 of `text` in lower-case hex, as Redis names scripts.
inline std::string sha1_hex(std::string_view text) {
  std::string out;
  append_hex_digest(out, text, EVP_sha1());
  return out;
}

inline RedisScript make_script(std::string name, std::string body) {
  std::string sha = sha1_hex(body);
  return RedisScript{std::move(name), std::move(body), std::move(sha), next_script_id()};
}

/// `lua` (an algorithm's script, which returns its decide and write functions) as a Lua
/// expression list.
inline std::string decide_function(std::string_view lua) {
  return "(function()\n" + std::string(lua) + "\nend)()\n";
}

/// Model `M`'s own script, composed on first use.
template <WireModel M>
const RedisScript& script_of() {
  static const RedisScript script = make_script(
      std::string(M::name), std::string(lua::prelude) + "\nlocal decide, write = " +
                                decide_function(M::Wire::lua) + std::string(lua::single));
  return script;
}

/// One algorithm of a composed script: its wire id, name and body.
struct ScriptPart {
  int wire_id;
  std::string_view name;
  std::string_view lua;
};

/// Composes `entries` (each wire id once) into the all-or-nothing script.
inline std::string compose_multi(const std::vector<ScriptPart>& entries) {
  std::string body(lua::prelude);
  body += "\nlocal algorithms = {}\n";
  for (const ScriptPart& e : entries) {
    body += "-- " + std::string(e.name) + "\nalgorithms[" + std::to_string(e.wire_id) + "] = { ";
    body += decide_function(e.lua);
    body += "}\n";
  }
  body += lua::multi;
  return body;
}

/// The all-or-nothing script for the algorithms in `entries` (any order, repeats allowed),
/// composed once per distinct set and kept for the process's life (a program uses a handful).
/// Throws `std::invalid_argument` if two different algorithms share a wire id.
inline const RedisScript& multi_script_for(std::vector<ScriptPart> entries) {
  std::sort(entries.begin(), entries.end(),
            [](const ScriptPart& a, const ScriptPart& b) { return a.wire_id < b.wire_id; });
  std::vector<ScriptPart> unique;
  std::string key;
  for (const ScriptPart& e : entries) {
    if (!unique.empty() && unique.back().wire_id == e.wire_id) {
      if (unique.back().name != e.name)
        throw std::invalid_argument("wire_id = " + std::to_string(e.wire_id) + ": used by both " +
                                    std::string(unique.back().name) + " and " +
                                    std::string(e.name));
      continue;
    }
    unique.push_back(e);
    key += std::to_string(e.wire_id) + ":" + std::string(e.name) + ";";
  }
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<RedisScript>, std::less<>> cache;
  const std::lock_guard lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end())
    it = cache
             .emplace(key, std::make_unique<RedisScript>(
                               make_script("multi[" + key + "]", compose_multi(unique))))
             .first;
  return *it->second;
}

}  // namespace ratelimit::detail
