#pragma once
/// @file memory/detail/hash.hpp
/// The in-memory table's key hash and byte comparison (inline: a call into libc cost more).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace ratelimit::detail {

__extension__ using HashWide = unsigned __int128;  // g++ and clang++ both have it

/// The high and low halves of a 64x64-bit product, folded: the mixing step of the key hash.
constexpr std::uint64_t fold_multiply(std::uint64_t a, std::uint64_t b) noexcept {
  const HashWide p = static_cast<HashWide>(a) * b;
  return static_cast<std::uint64_t>(p) ^ static_cast<std::uint64_t>(p >> 64);
}

inline std::uint64_t load_u64(const char* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline std::uint64_t load_u32(const char* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// Byte equality of two ranges of `n` bytes, inline with 8-byte words for the short keys that
/// live in a slot (a call to memcmp cost more than the compare).
inline bool equal_bytes(const char* a, const char* b, std::size_t n) noexcept {
  if (n >= 8) {
    for (std::size_t i = 0; i + 8 < n; i += 8)
      if (load_u64(a + i) != load_u64(b + i)) return false;
    return load_u64(a + n - 8) == load_u64(b + n - 8);
  }
  if (n >= 4) return load_u32(a) == load_u32(b) && load_u32(a + n - 4) == load_u32(b + n - 4);
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

/// A 64-bit hash of arbitrary bytes, inline (std::hash is an out-of-line call and was hashed
/// twice per decision), 16 bytes per multiply. `seed` differs per table, so that a set of keys
/// that collide in one process does not collide in the next.
inline std::uint64_t hash_key(std::string_view key, std::uint64_t seed) noexcept {
  constexpr std::uint64_t k0 = 0x9e3779b97f4a7c15, k1 = 0xd1b54a32d192ed03, k2 = 0x8cb92ba72f3d8dd7;
  const char* p = key.data();
  std::size_t n = key.size();
  std::uint64_t h = seed ^ (n * k0);
  std::uint64_t a = 0, b = 0;
  if (n > 16) {
    for (; n > 16; n -= 16, p += 16) h = fold_multiply(load_u64(p) ^ k1, load_u64(p + 8) ^ h);
    // The last 16 bytes (overlapping what the loop read: harmless, the length is mixed in).
    a = load_u64(p + n - 16);
    b = load_u64(p + n - 8);
  } else if (n > 8) {
    a = load_u64(p);
    b = load_u64(p + n - 8);
  } else if (n >= 4) {
    a = load_u32(p);
    b = load_u32(p + n - 4);
  } else if (n > 0) {
    a = (std::uint64_t{static_cast<unsigned char>(p[0])} << 16) |
        (std::uint64_t{static_cast<unsigned char>(p[n / 2])} << 8) |
        static_cast<unsigned char>(p[n - 1]);
  }
  return fold_multiply(fold_multiply(a ^ k1, b ^ h) ^ k2, h ^ k0);
}

/// One model's keys for one limiter name, split into independently locked shards so that
/// threads deciding different keys rarely contend.
///
/// Each shard is an open-addressing table (linear probing, backward-shift deletion) of slots
/// that hold the key's hash, the key itself when it is short, and the model's state: for the
/// 16- and 24-byte states a slot is exactly one 64-byte cache line, so a decision on a key that
/// is not in cache costs one memory access (a node-based map costs three: bucket, the node

}  // namespace ratelimit::detail
