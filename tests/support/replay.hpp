#pragma once
/// @file replay.hpp
/// The randomized differential replay: thousands of random events (time steps,
/// keys, costs, peeks, resets) through a limiter and, side by side, through the naive reference
/// model of each key (reference.hpp); every Decision must be identical, field by field.
///
/// Time moves in whole `tick`s: a quarter of the steps are zero (same-instant requests), most
/// are up to one unit's time (period / count), some up to three periods, and a few step back
/// (the key's latest time must win). Beside comparing with the model, some events act on what
/// a decision promised: `remaining` unit requests pass at once and no more; a denied request
/// passes exactly `retry_after` later, not a tick sooner; the key is fresh exactly
/// `reset_after` later, not a tick sooner. The seed is fixed by the caller and printed with
/// any failure; RATELIMIT_TEST_SEED overrides it.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

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
  std::int64_t latest = now;  // the clock's high-water mark
  for (int i = 0; i < events; ++i) {
    const auto roll = uniform(0, 99);
    std::int64_t step = 0;  // roll < 25: same instant
    if (roll >= 25 && roll < 80) step = uniform(1, unit);
    if (roll >= 80 && roll < 95) step = uniform(1, 3 * period);
    if (roll >= 95) step = -std::min(now, uniform(1, period));
    now += step / tick.count() * tick.count();
    latest = std::max(latest, now);
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
    const auto check = [&](std::int64_t cost, bool peek) {
      INFO((peek ? "peek" : "try_acquire, cost ")
           << (peek ? ""s : std::to_string(cost)) << " at " << clock.now().count() << " ns");
      const auto want = ref.decide(clock.now(), cost, peek);
      const auto got = peek ? limiter.peek(key) : limiter.try_acquire(key, cost);
      REQUIRE(got == want);
      return got;
    };
    const auto move_to = [&](std::int64_t t) {
      now = latest = t;
      clock.set(std::chrono::nanoseconds{now});
    };
    if (action < 6) {
      // What the fields promise, checked by acting on them rather than by formula:
      // `remaining` cost-1 requests pass right now and the next does not...
      const std::int64_t remaining = check(1, true).remaining;
      for (std::int64_t k = 0; k < remaining; ++k) REQUIRE(check(1, false).allowed);
      REQUIRE_FALSE(check(1, false).allowed);
      continue;
    }
    const bool peek = action < 18;
    const std::int64_t cost = peek ? 1 : uniform(1, 3);
    const auto got = check(cost, peek);
    // After a step back a key may be decided at its own later time, which the durations count
    // from: probe only when the clock is at its high-water mark.
    const auto probe = now == latest ? uniform(0, 99) : 100;
    const auto retry = got.retry_after.count(), reset = got.reset_after.count();
    if (probe < 4 && !got.allowed && got.retry_after != ratelimit::Decision::never &&
        retry % tick.count() == 0) {
      // ... the same request is still denied one tick before `retry_after` and admitted at it...
      const std::int64_t t0 = now;
      move_to(t0 + retry - tick.count());
      REQUIRE_FALSE(check(cost, false).allowed);
      move_to(t0 + retry);
      REQUIRE(check(cost, false).allowed);
    } else if (probe < 8 && reset > 0 && reset % tick.count() == 0) {
      // ... and the key is fresh again exactly `reset_after` later, not one tick sooner.
      const std::int64_t t0 = now;
      move_to(t0 + reset - tick.count());
      REQUIRE(check(1, true).reset_after > std::chrono::nanoseconds{0});
      move_to(t0 + reset);
      const auto fresh = check(1, true);
      REQUIRE(fresh.reset_after == std::chrono::nanoseconds{0});
      REQUIRE(fresh.remaining == shape.limit);
    }
  }
}

}  // namespace rltest
