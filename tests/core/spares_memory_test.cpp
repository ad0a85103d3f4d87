// Spare arrays: the in-memory table never frees a slot array while it lives (a lock-free decision
// may still read one); an emptied array is kept as a spare, its pages given back, and a later
// array takes the smallest spare of its size to twice it. Repeated floods of distinct keys,
// each followed by a reclaim that drops them all and shrinks every shard, must then reuse the
// spares rather than map new arrays at every cycle: address space and resident memory stay
// bounded by what the first cycles took.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>
#include <ratelimit/memory/detail/table.hpp>
#include <ratelimit/ratelimit.hpp>

#include "support/sanitized.hpp"

namespace spares_memory_test {

using namespace std::chrono_literals;
using ratelimit::Operation;
using ratelimit::TokenBucketModel;

using rltest::sanitized;

/// A field of /proc/self/status in bytes ("VmSize:", "VmRSS:"; the file gives kB), or -1.
long long status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(field.size())) * 1024;
  return -1;
}

TEST_CASE("Twenty flood and reclaim cycles reuse the spare arrays: address space stays bounded",
          "[in_memory][memory][lock_free]") {
  // Each cycle spends 1 token of 1 (refilled at 1 per second) on 30,000 new keys at 10 c s,
  // then reclaims at 10 c s + 5 s, when every bucket is full again: all dropped, every shard
  // shrunk back to its smallest array. After the first two cycles each array size a cycle
  // needs has a spare within 2x (the same flood grows the shards through about the same sizes),
  // so later cycles add a block only where a shard grows a few pages past every earlier size:
  // the growth over cycles 3 to 20 stays under one flood's slot arrays (stats().bytes at its
  // peak), where mapping new arrays each cycle would add about 5 times that per cycle (all of a
  // shard's sizes from 8 slots up, each 1.225 times the last: a sum of 1 / (1 - 1 / 1.225)
  // = 5.4 times the largest).
  constexpr int cycles = 20;
  constexpr int keys = 30'000;
  ratelimit::detail::Table<TokenBucketModel> table;
  using T = decltype(table);
  const auto params = TokenBucketModel::make_params({1, ratelimit::per_second(1)});
  long long vm_after_two = 0, rss_after_two = 0;
  std::size_t peak_bytes = 0;
  for (int c = 0; c < cycles; ++c) {
    const auto t = std::chrono::seconds(10 * (c + 1));
    const std::string prefix = "c" + std::to_string(c) + "-";
    for (int i = 0; i < keys; ++i)
      REQUIRE(table.apply(params, prefix + std::to_string(i), t, Operation{}).allowed);
    peak_bytes = std::max(peak_bytes, table.stats().bytes);
    CHECK(table.reclaim(t + 5s) == static_cast<std::size_t>(keys));
    const auto s = table.stats();
    REQUIRE(s.keys == 0);
    // Every shard back to its smallest array (no resize left in progress).
    REQUIRE(s.slots == T::shard_count * T::min_capacity);
    if (c == 1) {
      vm_after_two = status_bytes("VmSize:");
      rss_after_two = status_bytes("VmRSS:");
    }
  }
  if constexpr (sanitized) return;  // their allocators map and keep memory of their own
  const long long vm_growth = status_bytes("VmSize:") - vm_after_two;
  const long long rss_growth = status_bytes("VmRSS:") - rss_after_two;
  INFO("peak slot bytes " << peak_bytes << ", VmSize growth " << vm_growth << ", VmRSS growth "
                          << rss_growth);
  CHECK(vm_growth <= static_cast<long long>(peak_bytes));
  // Pages of emptied arrays go back to the kernel: resident memory does not follow the spares.
  CHECK(rss_growth <= static_cast<long long>(peak_bytes / 4));
}

}  // namespace spares_memory_test
