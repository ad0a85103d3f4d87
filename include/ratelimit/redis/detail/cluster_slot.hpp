#pragma once
/// @file redis/detail/cluster_slot.hpp
/// Which of Redis Cluster's 16384 hash slots a key belongs to.
///
/// The Redis Cluster specification ("Keys distribution model"): HASH_SLOT = CRC16(key) mod 16384,
/// where CRC16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0, no reflection, no final
/// XOR; check value CRC16("123456789") = 0x31C3), and where a key holding a hash tag (the bytes
/// between its first '{' and the first '}' after it, when that is not empty) hashes only the
/// tag. `redis_hash_tag` (redis_keys.hpp) applies exactly that rule.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "keys.hpp"

namespace ratelimit::detail {

/// Number of hash slots in a Redis Cluster.
inline constexpr int redis_cluster_slots = 16384;

/// The CRC-16/XMODEM table, one entry per byte value (built at compile time: no magic list).
inline constexpr std::array<std::uint16_t, 256> crc16_table = [] {
  std::array<std::uint16_t, 256> t{};
  for (unsigned b = 0; b < 256; ++b) {
    unsigned crc = b << 8;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 0x8000U) ? (crc << 1) ^ 0x1021U : crc << 1;
    t[b] = static_cast<std::uint16_t>(crc & 0xFFFFU);
  }
  return t;
}();

/// CRC-16/XMODEM of `bytes`, as Redis Cluster computes it.
constexpr std::uint16_t crc16(std::string_view bytes) noexcept {
  unsigned crc = 0;
  for (const char ch : bytes) {
    const auto b = static_cast<unsigned char>(ch);
    crc = ((crc << 8) ^ crc16_table[((crc >> 8) ^ b) & 0xFFU]) & 0xFFFFU;
  }
  return static_cast<std::uint16_t>(crc);
}

static_assert(crc16("123456789") == 0x31C3, "CRC16 must match the cluster specification's check");

/// The hash slot of a full Redis key, in [0, 16383].
inline int redis_key_slot(std::string_view redis_key) noexcept {
  return crc16(redis_hash_tag(redis_key)) & (redis_cluster_slots - 1);
}

/// A short hash tag of `slot` (in [0, 16383]): CRC16 of it mod 16384 is `slot`, so a key
/// "...{<tag>}..." lives in that slot. The regional storage names one dirty set per slot with
/// it, beside the hashes of that slot, so that one script touches both. Decimal numbers, the
/// smallest of each slot, at most 6 digits: the table is searched once per process, on first
/// use (a few 10^5 CRCs of short strings, about 20 ms), and then read only. Thread safety: safe
/// from many threads.
inline const std::string& redis_slot_tag(int slot) {
  static const std::array<std::string, redis_cluster_slots> tags = [] {
    std::array<std::string, redis_cluster_slots> t{};
    int left = redis_cluster_slots;
    for (std::uint64_t n = 0; left > 0; ++n) {
      std::string s = std::to_string(n);
      auto& tag = t[static_cast<std::size_t>(crc16(s) & (redis_cluster_slots - 1))];
      if (tag.empty()) {
        tag = std::move(s);
        --left;
      }
    }
    return t;
  }();
  return tags[static_cast<std::size_t>(slot) & (redis_cluster_slots - 1)];
}

}  // namespace ratelimit::detail
