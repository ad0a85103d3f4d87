#pragma once
/// @file admissions.hpp
/// Exact admissions from many threads at a frozen time: with no refill, each admission of a key
/// leaves a distinct `remaining`, so all of them together, sorted, show a lost update (a
/// repeat) or an admission too many (a value out of range) at a glance.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace rltest {

/// The sorted list 0, 1, ..., n - 1: the remaining values n admissions from n tokens leave.
inline std::vector<std::int64_t> countdown(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

/// The remaining values of one key's admissions: `before` (made before the race) and each
/// thread's (`per_thread[t]`, written only by thread t), sorted.
inline std::vector<std::int64_t> merged(std::vector<std::int64_t> before,
                                        const std::vector<std::vector<std::int64_t>>& per_thread) {
  for (const auto& mine : per_thread) before.insert(before.end(), mine.begin(), mine.end());
  std::sort(before.begin(), before.end());
  return before;
}

/// `merged` for key number `k` of many, each thread's admissions kept per key
/// (`per_thread[t][k]`).
inline std::vector<std::int64_t> merged(
    std::vector<std::int64_t> before,
    const std::vector<std::vector<std::vector<std::int64_t>>>& per_thread, std::size_t k) {
  for (const auto& mine : per_thread) before.insert(before.end(), mine[k].begin(), mine[k].end());
  std::sort(before.begin(), before.end());
  return before;
}

}  // namespace rltest
