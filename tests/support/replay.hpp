#pragma once
/// @file replay.hpp
/// The randomized differential replay (issue 2, Tests): thousands of random events (time steps,
/// keys, costs, peeks, resets) through a limiter and, side by side, through the naive reference
/// model of each key (reference.hpp); every Decision must be identical, field by field.
///
/// Time moves in whole `tick`s: a quarter of the steps are zero (same-instant requests), most
/// are up to one unit's time (period / count), some up to three periods, and a few step back
/// (the key's latest time must win). The seed is fixed by the caller and printed with any
/// failure; RATELIMIT_TEST_SEED overrides it.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/manual_clock.hpp>

#include "algorithms.hpp"
#include "expect.hpp"

namespace rltest {

inline std::uint64_t seed_for(std::uint64_t fixed) {
  if (const char* s = std::getenv("RATELIMIT_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return fixed;
}

/// Replays `events` random events on `storage` with time in multiples of `tick`.
template <class Algo, class Storage>
void replay(const Shape& shape, Storage storage, const char* storage_name, std::uint64_t seed,
            int events, std::chrono::nanoseconds tick) {
  using namespace std::string_literals;
  const std::int64_t period = shape.rate.period.count();
  // The time one unit takes to come back at the nominal rate: the natural scale of the steps.
  const std::int64_t unit = std::max<std::int64_t>(tick.count(), period / shape.rate.count);

  INFO("algorithm: " << Algo::name << ", storage: " << storage_name << ", limit " << shape.limit
                     << ", rate " << shape.rate.count << " per " << period << " ns, tick "
                     << tick.count() << " ns, seed " << seed);
  ratelimit::ManualClock clock;
  auto limiter = Algo::make(shape, std::move(storage), clock);
  const std::vector<std::string> keys = {"alice"s, "bob"s, "c\0d"s, ""s};
  std::map<std::string, typename Algo::Reference> refs;
  for (const auto& k : keys) refs.emplace(k, Algo::reference(shape));

  std::mt19937_64 rng(seed);
  const auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  std::int64_t now = 1'000'000'000;
  for (int i = 0; i < events; ++i) {
    const auto roll = uniform(0, 99);
    std::int64_t step = 0;  // roll < 25: same instant
    if (roll >= 25 && roll < 80) step = uniform(1, unit);
    if (roll >= 80 && roll < 95) step = uniform(1, 3 * period);
    if (roll >= 95) step = -std::min(now, uniform(1, period));
    now += step / tick.count() * tick.count();
    clock.set(std::chrono::nanoseconds{now});

    const auto& key = keys[static_cast<std::size_t>(uniform(0, 3))];
    auto& ref = refs.at(key);
    const auto action = uniform(0, 99);
    INFO("event " << i << " at " << now << " ns, key #" << (&key - keys.data()));
    if (action < 3) {
      limiter.reset(key);
      ref = Algo::reference(shape);
      continue;
    }
    const bool peek = action < 15;
    const std::int64_t cost = peek ? 1 : uniform(1, 3);
    INFO((peek ? "peek" : "try_acquire, cost ") << (peek ? ""s : std::to_string(cost)));
    const auto want = ref.decide(clock.now(), cost, peek);
    const auto got = peek ? limiter.peek(key) : limiter.try_acquire(key, cost);
    REQUIRE(got == want);
  }
}

}  // namespace rltest
