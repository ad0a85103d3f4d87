#pragma once
/// @file memory/detail/hash.hpp
/// The keyed hashes (SipHash-1-3 under a per-process secret, 64- and 128-bit output) and byte
/// comparison (inline: a call into libc cost more).

#include <atomic>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string_view>

namespace ratelimit::detail {

__extension__ using HashWide = unsigned __int128;  // g++ and clang++ both have it

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

/// A 128-bit SipHash key (two little-endian 64-bit words).
struct SipKey {
  std::uint64_t k0 = 0;
  std::uint64_t k1 = 0;
};

/// A 128-bit hash: SipHash's 16 output bytes as two little-endian words, ordered as a pair
/// (the overflow map of the in-memory table is keyed by it).
struct Hash128 {
  std::uint64_t first = 0;   ///< output bytes 0..7
  std::uint64_t second = 0;  ///< output bytes 8..15
  friend auto operator<=>(const Hash128&, const Hash128&) = default;
};

/// SipHash-C-D of `data` under `key` (Aumasson and Bernstein, "SipHash: a fast short-input PRF",
/// INDOCRYPT 2012; https://131002.net/siphash/siphash.pdf), with 64-bit output, or with
/// `Wide` the 128-bit output of the reference implementation (v1 ^= 0xee at the start, 0xee
/// instead of 0xff before the finalization, then v1 ^= 0xdd and D more rounds for the second
/// word). A pseudorandom function: without the key, nobody can choose inputs that collide more
/// often than by chance, which is what hash flooding needs. SipHash-2-4 is the paper's;
/// SipHash-1-3 (one compression and three finalization rounds) is the variant Python, Rust and
/// Ruby use for their tables. The tests check SipHash-2-4 (both widths) against the reference
/// implementation's vectors; 1-3 is the same code with other round counts. The input is read
/// as little-endian words (x86-64 and AArch64).
/// SipHash's four state words and its round. Forced inline: out of line (as GCC left the
/// lambdas this replaced), each round went through memory, and the hash cost twice its rounds.
struct SipState {
  std::uint64_t v0, v1, v2, v3;

  static constexpr std::uint64_t rotl(std::uint64_t x, int b) noexcept {
    return (x << b) | (x >> (64 - b));
  }

  [[gnu::always_inline]] inline void round() noexcept {
    v0 += v1;
    v1 = rotl(v1, 13);
    v1 ^= v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl(v1, 17);
    v1 ^= v2;
    v2 = rotl(v2, 32);
  }

  template <int Rounds>
  [[gnu::always_inline]] inline void compress(std::uint64_t m) noexcept {
    v3 ^= m;
    for (int i = 0; i < Rounds; ++i) round();
    v0 ^= m;
  }

  std::uint64_t word() const noexcept { return v0 ^ v1 ^ v2 ^ v3; }
};

template <int C, int D, bool Wide>
inline auto siphash_rounds(SipKey key, const char* data, std::size_t n) noexcept {
  SipState s{key.k0 ^ 0x736f6d6570736575, key.k1 ^ 0x646f72616e646f6d, key.k0 ^ 0x6c7967656e657261,
             key.k1 ^ 0x7465646279746573};
  if constexpr (Wide) s.v1 ^= 0xee;
  const char* p = data;
  std::size_t left = n;
  for (; left >= 8; left -= 8, p += 8) s.compress<C>(load_u64(p));
  // The last 0..7 bytes, and the length's low byte in the top byte. Read as at most two loads
  // that may overlap (an overlapping byte lands on the same bit positions both times, so OR
  // keeps it), not byte by byte: for short keys the loop cost as much as a round.
  std::uint64_t last = static_cast<std::uint64_t>(n & 0xff) << 56;
  const auto byte = [p](std::size_t i) {
    return static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  };
  if (left >= 4)
    last |= load_u32(p) | load_u32(p + left - 4) << (8 * (left - 4));
  else if (left > 0)
    last |= byte(0) | byte(left / 2) | byte(left - 1);
  s.compress<C>(last);
  s.v2 ^= Wide ? 0xee : 0xff;
  for (int i = 0; i < D; ++i) s.round();
  const std::uint64_t first = s.word();
  if constexpr (!Wide) {
    return first;
  } else {
    s.v1 ^= 0xdd;
    for (int i = 0; i < D; ++i) s.round();
    return Hash128{first, s.word()};
  }
}

/// SipHash-C-D with 64-bit output (see siphash_rounds).
template <int C, int D>
inline std::uint64_t siphash(SipKey key, const char* data, std::size_t n) noexcept {
  return siphash_rounds<C, D, false>(key, data, n);
}

/// SipHash-C-D with 128-bit output (see siphash_rounds).
template <int C, int D>
inline Hash128 siphash128(SipKey key, const char* data, std::size_t n) noexcept {
  return siphash_rounds<C, D, true>(key, data, n);
}

/// This process's hash secret: 128 bits from `std::random_device`, drawn once, on first use.
/// Enough because the secret never leaves the process and SipHash needs nothing more than a key
/// the attacker cannot guess: libstdc++'s random_device reads the kernel's CSPRNG (getrandom or
/// /dev/urandom, or RDRAND), so an attacker who sees only our decisions faces 2^128 keys.
/// Thread safety: initialization of a function-local static (thread-safe).
inline const SipKey& process_secret() {
  static const SipKey secret = [] {
    std::random_device rd;
    const auto word = [&rd] {
      return (static_cast<std::uint64_t>(rd()) << 32) ^ static_cast<std::uint64_t>(rd());
    };
    SipKey k;
    k.k0 = word();
    k.k1 = word();
    return k;
  }();
  return secret;
}

/// The process secret with its first word perturbed per instance (a counter mixed by
/// splitmix64), so that two tables of one process lay their keys out differently.
/// Thread safety: safe from many threads (one atomic counter).
inline SipKey perturbed_secret() noexcept {
  static std::atomic<std::uint64_t> tables{0};
  SipKey key = process_secret();
  std::uint64_t z = tables.fetch_add(1, std::memory_order_relaxed) + 0x9e3779b97f4a7c15;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
  z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
  key.k0 ^= z ^ (z >> 31);
  return key;
}

/// A 64-bit hash policy: SipHash-1-3 under the process secret, perturbed per instance
/// (perturbed_secret).
/// Thread safety: immutable after construction.
class SipKeyHash {
 public:
  SipKeyHash() noexcept : key_(perturbed_secret()) {}

  /// The key's 64-bit hash.
  std::uint64_t operator()(std::string_view key) const noexcept {
    return siphash<1, 3>(key_, key.data(), key.size());
  }

 private:
  SipKey key_;
};

/// The in-memory table's hash policy: SipHash-1-3 with 128-bit output under the process
/// secret, perturbed per table (perturbed_secret). The table stores the 128 bits instead of
/// the key (see Table).
/// Thread safety: immutable after construction.
class SipKeyHash128 {
 public:
  SipKeyHash128() noexcept : key_(perturbed_secret()) {}

  /// The key's 128-bit hash.
  Hash128 operator()(std::string_view key) const noexcept {
    return siphash128<1, 3>(key_, key.data(), key.size());
  }

 private:
  SipKey key_;
};

}  // namespace ratelimit::detail
