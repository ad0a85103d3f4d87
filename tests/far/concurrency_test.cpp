// The far storages from many threads (label `concurrent`: the test command also runs it under
// ThreadSanitizer). Time stands still on one instant of one window, so every bound is exact
// whatever the threads' interleaving.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/redis/lease/storage.hpp>
#include <ratelimit/redis/regional/storage.hpp>

#include "far/regions.hpp"
#include "support/redis_backend.hpp"

namespace {

using namespace std::chrono_literals;
using ratelimit::FixedWindowModel;

constexpr std::int64_t one_second_ns = 1'000'000'000;

}  // namespace

TEST_CASE(
    "Regions deciding and exchanging from many threads stay within N + (R - 1) U, and "
    "two exchangers of one region never push a unit twice",
    "[far][redis][concurrent]") {
  // N = 200, U = 10, R = 3: at most 200 + 2 x 10 = 220 admitted.
  constexpr std::int64_t N = 200, U = 10;
  rltest::Regions regions(3);
  std::vector<ratelimit::RegionalStorage> s;
  for (std::size_t i = 0; i < 3; ++i) s.emplace_back(regions.options(i, 100ms, 40ms));
  std::vector<ratelimit::RegionalWindowBinding<FixedWindowModel>> b;
  for (auto& r : s) b.push_back(r.bind<FixedWindowModel>("api", {N, one_second_ns}, U));
  const auto t = 3ms;
  std::atomic<std::int64_t> admitted{0};
  std::atomic<int> deciding{6};
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < 3; ++r) {
    for (int k = 0; k < 2; ++k)
      threads.emplace_back([&, r] {
        for (int i = 0; i < 150; ++i)
          if (b[r].apply("k", t, ratelimit::Operation{1}).allowed) admitted.fetch_add(1);
        deciding.fetch_sub(1);
      });
    for (int k = 0; k < 2; ++k)  // two exchangers per region, racing for the same claims
      threads.emplace_back([&, r] {
        while (deciding.load() > 0) (void)s[r].exchange(t);
      });
  }
  for (auto& th : threads) th.join();
  CHECK(admitted.load() <= N + 2 * U);
  // Once every region has pushed everything, each counts exactly what was admitted: a unit
  // pushed twice would show as more.
  for (auto& r : s) (void)r.exchange(t);
  for (auto& r : s) (void)r.exchange(t);
  const std::int64_t left = std::max<std::int64_t>(0, N - admitted.load());
  for (std::size_t r = 0; r < 3; ++r) {
    INFO("region " << r);
    CHECK(b[r].apply("k", t, ratelimit::Operation{1, true}).remaining == left);
  }
  // 6 threads x 150 = 900 requests for at most 220 units: the limit was reached.
  CHECK(admitted.load() >= N);
}

TEST_CASE("Leasing instances deciding from many threads never admit more than N",
          "[far][lease][redis][concurrent]") {
  constexpr std::int64_t N = 300;
  const auto prefix = rltest::unique_prefix("lease");
  std::vector<ratelimit::LeasedStorage> stores;
  for (int i = 0; i < 2; ++i) {
    ratelimit::LeaseOptions o;
    o.redis = rltest::test_redis_options("lease");
    o.redis.key_prefix = prefix;
    stores.emplace_back(o);
  }
  std::vector<ratelimit::LeasedBinding<FixedWindowModel>> b;
  for (auto& st : stores) b.push_back(st.bind<FixedWindowModel>("api", {N, one_second_ns}, 16));
  std::atomic<std::int64_t> admitted{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int i = 0; i < 200; ++i)
        if (b[static_cast<std::size_t>(k % 2)].apply("k", 1ms, ratelimit::Operation{1}).allowed)
          admitted.fetch_add(1);
    });
  for (auto& th : threads) th.join();
  CHECK(admitted.load() <= N);
  // 800 requests for 300 units: an instance holds back at most what its two threads leased at
  // once and did not spend, 2 x 16 each.
  CHECK(admitted.load() >= N - 2 * 2 * 16);
}
