// The randomized differential replay of differential_test.cpp at nanosecond
// resolution, in-memory storage only, with rates whose exact durations fall between
// nanoseconds (3 per second, 5 per 13 ms, a prime window...), so that every "rounded up to
// 1 ns" and every exact comparison is exercised at random instants, not only at whole ms.
#include <chrono>
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

#include "../support/replay.hpp"

using namespace std::chrono_literals;
using ratelimit::Rate;
using rltest::Shape;

namespace {

template <class Algo>
void replay_ns(const std::vector<Shape>& shapes, std::uint64_t fixed_seed) {
  const auto seed = rltest::seed_for(fixed_seed);
  for (std::size_t i = 0; i < shapes.size(); ++i)
    rltest::replay<Algo>(shapes[i], ratelimit::InMemoryStorage{}, "in-memory", seed + i, 2500, 1ns);
}

// Buckets: 333 333 333.3 ns per token; 2.6 ms per token; 1 000 000 007 / 3 ns per token; and
// exactly one token per ns.
const std::vector<Shape> bucket_shapes = {{3, ratelimit::per_second(3)},
                                          {7, Rate{5, 13ms}},
                                          {2, Rate{3, 1'000'000'007ns}},
                                          {5, Rate{1'000'000, 1ms}}};
// Windows: N = 3 per second; 7 per 13 ms; 2 per a prime number of ns.
const std::vector<Shape> window_shapes = {{3, ratelimit::per_second(3)},
                                          {7, Rate{7, 13ms}},
                                          {2, Rate{2, 1'000'000'007ns}},
                                          {5, Rate{5, 1ms}}};

}  // namespace

TEST_CASE("Token bucket decisions equal the naive model's to the nanosecond",
          "[token_bucket][differential][in_memory][precision]") {
  replay_ns<rltest::TokenBucketAlgo>(bucket_shapes, 20240511);
}

TEST_CASE("Leaky bucket decisions equal the naive model's to the nanosecond",
          "[leaky_bucket][differential][in_memory][precision]") {
  replay_ns<rltest::LeakyBucketAlgo>(bucket_shapes, 20240512);
}

TEST_CASE("Fixed window decisions equal the naive model's to the nanosecond",
          "[fixed_window][differential][in_memory][precision]") {
  replay_ns<rltest::FixedWindowAlgo>(window_shapes, 20240513);
}

TEST_CASE("Sliding log decisions equal the naive model's to the nanosecond",
          "[sliding_log][differential][in_memory][precision]") {
  replay_ns<rltest::SlidingLogAlgo>(window_shapes, 20240514);
}

TEST_CASE("Sliding counter decisions equal the naive model's to the nanosecond",
          "[sliding_counter][differential][in_memory][precision]") {
  replay_ns<rltest::SlidingCounterAlgo>(window_shapes, 20240515);
}
