// The circuit breaker's back-off grows per failed probe, not per failure in flight.
// Times are given to the breaker explicitly (steady ns), so nothing sleeps.
#include <chrono>
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/redis/detail/breaker.hpp>

using namespace std::chrono_literals;
using ratelimit::detail::CircuitBreaker;
using Pass = CircuitBreaker::Pass;

namespace {
constexpr std::int64_t ms(std::int64_t v) { return v * 1'000'000; }
}  // namespace

TEST_CASE("Failures of calls in flight keep the breaker open one back-off, without growing it",
          "[redis][breaker]") {
  CircuitBreaker b(100ms, 2000ms);
  // 8 threads each let through at t = 0 while closed; Redis stalls, and their calls fail at
  // t = 100, 101, ..., 107 ms (their timeouts).
  std::vector<Pass> passes;
  for (int i = 0; i < 8; ++i) passes.push_back(b.allow(0));
  for (const Pass p : passes) CHECK(p == Pass::closed);
  for (int i = 0; i < 8; ++i) b.record_failure(passes[i], ms(100 + i));
  // Open until one back-off after the last of them: 107 + 100 = 207 ms; the back-off is still
  // the base 100 ms (the old rule doubled it per failure: 100 x 2^7, capped at 2 s).
  CHECK(b.backoff() == 100ms);
  CHECK(b.retry_in(ms(150)) == 57ms);  // 207 - 150
  CHECK(b.allow(ms(150)) == Pass::refused);
  // The stall ended at 200 ms: the probe at 207 ms succeeds and closes it. Degraded from the
  // first failure (100 ms) to 207 ms: the stall plus one base back-off, give or take the spread
  // of the timeouts.
  REQUIRE(b.allow(ms(207)) == Pass::probe);
  CHECK(b.allow(ms(207)) == Pass::refused);  // one probe at a time
  b.record_success();
  CHECK_FALSE(b.is_open());
  CHECK(b.allow(ms(208)) == Pass::closed);
}

TEST_CASE("Each failed probe doubles the back-off up to the maximum; a success resets it",
          "[redis][breaker]") {
  CircuitBreaker b(100ms, 500ms);
  b.record_failure(b.allow(0), 0);  // opens until 100 ms
  // Probes at the end of each opening, each failing at once: 200, 400, then 500 (capped), 500.
  std::int64_t t = ms(100);
  for (const auto expected : {200ms, 400ms, 500ms, 500ms}) {
    REQUIRE(b.allow(t) == Pass::probe);
    b.record_failure(Pass::probe, t);
    CHECK(b.backoff() == expected);
    CHECK(b.retry_in(t) == expected);
    t += std::chrono::nanoseconds(expected).count();
  }
  REQUIRE(b.allow(t) == Pass::probe);
  b.record_success();
  CHECK(b.backoff() == 100ms);
  // The next failure opens for the base back-off again.
  b.record_failure(b.allow(t + 1), t + 1);
  CHECK(b.retry_in(t + 1) == 100ms);
}

TEST_CASE("A late failure of a call in flight never shortens an opening", "[redis][breaker]") {
  CircuitBreaker b(100ms, 2000ms);
  b.record_failure(b.allow(0), 0);
  REQUIRE(b.allow(ms(100)) == Pass::probe);  // pushes the next probe to 200 ms
  b.record_failure(Pass::probe, ms(100));    // back-off 200 ms: open until 300 ms
  b.record_failure(Pass::closed, ms(120));   // a straggler: 120 + 200 = 320 ms
  CHECK(b.retry_in(ms(120)) == 200ms);       // 320 - 120
  b.record_failure(Pass::closed, ms(50));    // an older one: 50 + 200 = 250 < 320, no change
  CHECK(b.retry_in(ms(120)) == 200ms);
}
