// The differential replay: for each algorithm, a randomized replay of thousands of events (times,
// keys, costs, peeks, resets) against the deliberately naive reference models of
// tests/support/reference.hpp (harness: tests/support/replay.hpp); every Decision must be
// identical, field by field. Run against every storage backend.
//
// Time moves in whole milliseconds (multiples of the backend's resolution, if coarser), and the
// rates are chosen so that every exact duration is a whole number of milliseconds. The
// nanosecond version with awkward rates is in-memory only: differential_ns_test.cpp.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/backends.hpp"
#include "../support/replay.hpp"

using namespace std::chrono_literals;
using ratelimit::Rate;
using rltest::Shape;

namespace {

template <class Algo, class Backend>
void replay_all(const std::vector<Shape>& shapes, std::uint64_t fixed_seed) {
  const auto seed = rltest::seed_for(fixed_seed);
  // Whole milliseconds, or the backend's resolution if coarser.
  const auto tick = std::max<std::chrono::nanoseconds>(
      1ms, std::chrono::ceil<std::chrono::milliseconds>(Backend::resolution));
  for (std::size_t i = 0; i < shapes.size(); ++i)
    rltest::replay<Algo>(shapes[i], Backend::make(), Backend::name, seed + i, 2500, tick);
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
  replay_all<rltest::SlidingCounterAlgo, TestType>(
      {{5, Rate{5, 840ms}}, {3, Rate{3, 840ms}}, {7, Rate{7, 1680ms}}, {2, Rate{2, 840ms}}},
      20240505);
}
