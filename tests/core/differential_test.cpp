// Issue 2, Tests: for each algorithm, a randomized replay of thousands of events (times, keys,
// costs, peeks, resets) against the deliberately naive reference models of
// tests/support/reference.hpp; every Decision must be identical, field by field. Run against
// every storage backend.
//
// Time moves in whole milliseconds (multiples of the backend's resolution, if coarser): a
// quarter of the steps are zero (same-instant requests), a few step back (the key's latest time
// must win). Rates are chosen so that every exact duration is a whole number of milliseconds.
// The seed is fixed and printed with any failure; RATELIMIT_TEST_SEED overrides it.
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

#include "../support/algorithms.hpp"
#include "../support/backends.hpp"
#include "../support/expect.hpp"

using namespace std::chrono_literals;
using ratelimit::ManualClock;
using ratelimit::Rate;
using rltest::Shape;

namespace {

std::uint64_t seed_for(std::uint64_t fixed) {
  if (const char* s = std::getenv("RATELIMIT_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return fixed;
}

template <class Algo, class Backend>
void replay(const Shape& shape, std::uint64_t seed, int events) {
  using namespace std::string_literals;
  const std::int64_t tick_ms =
      std::max<std::int64_t>(1, std::chrono::ceil<std::chrono::milliseconds>(Backend::resolution)
                                    .count());
  const std::int64_t period_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(shape.rate.period).count();
  // The time one unit takes to come back at the nominal rate: the natural scale of the steps.
  const std::int64_t unit_ms = std::max<std::int64_t>(1, period_ms / shape.rate.count);

  INFO("algorithm: " << Algo::name << ", storage: " << Backend::name << ", limit " << shape.limit
                     << ", rate " << shape.rate.count << " per " << period_ms << " ms, seed "
                     << seed);
  ManualClock clock;
  auto limiter = Algo::make(shape, Backend::make(), clock);
  const std::vector<std::string> keys = {"alice"s, "bob"s, "c\0d"s, ""s};
  std::map<std::string, typename Algo::Reference> refs;
  for (const auto& k : keys) refs.emplace(k, Algo::reference(shape));

  std::mt19937_64 rng(seed);
  const auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  std::int64_t now_ms = 1000;
  for (int i = 0; i < events; ++i) {
    const auto roll = uniform(0, 99);
    std::int64_t step = 0;  // roll < 25: same instant
    if (roll >= 25 && roll < 80) step = uniform(1, unit_ms);
    if (roll >= 80 && roll < 95) step = uniform(1, 3 * period_ms);
    if (roll >= 95) step = -std::min(now_ms, uniform(1, period_ms));
    now_ms += step / tick_ms * tick_ms;
    clock.set(std::chrono::milliseconds{now_ms});

    const auto& key = keys[static_cast<std::size_t>(uniform(0, 3))];
    auto& ref = refs.at(key);
    const auto action = uniform(0, 99);
    INFO("event " << i << " at " << now_ms << " ms, key #" << (&key - keys.data()));
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

template <class Algo, class Backend>
void replay_all(const std::vector<Shape>& shapes, std::uint64_t fixed_seed) {
  const auto seed = seed_for(fixed_seed);
  for (std::size_t i = 0; i < shapes.size(); ++i)
    replay<Algo, Backend>(shapes[i], seed + i, 2500);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("Token bucket decisions equal the naive model's over random events",
                        "[token_bucket][differential][any_storage]", Backends) {
  // One token per 500 ms, 100 ms, 600 ms and 1 s; capacity 2 makes cost 3 impossible.
  replay_all<rltest::TokenBucketAlgo, TestType>({{5, ratelimit::per_second(2)},
                                                 {3, ratelimit::per_second(10)},
                                                 {7, ratelimit::per_minute(100)},
                                                 {2, ratelimit::per_second(1)}},
                                                20240501);
}

TEMPLATE_LIST_TEST_CASE("Leaky bucket decisions equal the naive model's over random events",
                        "[leaky_bucket][differential][any_storage]", Backends) {
  replay_all<rltest::LeakyBucketAlgo, TestType>({{5, ratelimit::per_second(2)},
                                                 {3, ratelimit::per_second(10)},
                                                 {7, ratelimit::per_minute(100)},
                                                 {2, ratelimit::per_second(1)}},
                                                20240502);
}

TEMPLATE_LIST_TEST_CASE("Fixed window decisions equal the naive model's over random events",
                        "[fixed_window][differential][any_storage]", Backends) {
  replay_all<rltest::FixedWindowAlgo, TestType>({{5, ratelimit::per_second(5)},
                                                 {3, Rate{3, 250ms}},
                                                 {7, Rate{7, 1500ms}},
                                                 {2, ratelimit::per_second(2)}},
                                                20240503);
}

TEMPLATE_LIST_TEST_CASE("Sliding log decisions equal the naive model's over random events",
                        "[sliding_log][differential][any_storage]", Backends) {
  replay_all<rltest::SlidingLogAlgo, TestType>({{5, ratelimit::per_second(5)},
                                                {3, Rate{3, 250ms}},
                                                {7, Rate{7, 1500ms}},
                                                {2, ratelimit::per_second(2)}},
                                               20240504);
}

TEMPLATE_LIST_TEST_CASE("Sliding counter decisions equal the naive model's over random events",
                        "[sliding_counter][differential][any_storage]", Backends) {
  // The counter's exact retry instants are (c + n + p - N) W / p into a window: with p up to 7
  // they are whole ms only when W is a multiple of every p. W = 840 ms = lcm(1..8) x 1 ms keeps
  // them exact (the ns-precision cases are in precision_test.cpp).
  replay_all<rltest::SlidingCounterAlgo, TestType>({{5, Rate{5, 840ms}},
                                                    {3, Rate{3, 840ms}},
                                                    {7, Rate{7, 1680ms}},
                                                    {2, Rate{2, 840ms}}},
                                                   20240505);
}
