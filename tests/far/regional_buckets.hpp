#pragma once
// What the regional bucket tests share: GCRA parameters, one RegionalStorage per region of a
// `Regions`, and a spending operation.

#include <chrono>
#include <cstdint>
#include <vector>

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis/regional/storage.hpp>

#include "far/regions.hpp"

namespace rltest {

/// A bucket of `capacity` refilling `count` per `period`.
inline ratelimit::detail::GcraParams bucket(std::int64_t capacity, std::int64_t count,
                                            std::chrono::nanoseconds period = std::chrono::seconds{
                                                1}) {
  return ratelimit::detail::make_gcra_params(capacity, count, period);
}

/// One storage per region, exchanging every `interval`, the regions `delay` apart one way.
inline std::vector<ratelimit::RegionalStorage> storages(
    const Regions& regions, std::chrono::milliseconds interval = std::chrono::milliseconds{100},
    std::chrono::milliseconds delay = std::chrono::milliseconds{40}) {
  std::vector<ratelimit::RegionalStorage> out;
  for (std::size_t i = 0; i < regions.size(); ++i)
    out.emplace_back(regions.options(i, interval, delay));
  return out;
}

/// Spends `cost` units.
inline ratelimit::Operation spend(std::int64_t cost = 1) { return ratelimit::Operation{cost}; }

}  // namespace rltest
