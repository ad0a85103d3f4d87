// Every duration is rounded up to the clock's tick (1 ns), never down (which would admit early),
// in-memory storage only:
// rates whose exact durations fall between nanoseconds, and window edges 1 ns apart, which a
// millisecond-resolution backend cannot express.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/core/detail/decimal.hpp>
#include <ratelimit/ratelimit.hpp>

#include "../support/expect.hpp"

using namespace std::chrono_literals;
using ratelimit::ManualClock;
using rltest::admitted;
using rltest::denied;

// Three per second: one unit every 1e9 / 3 = 333 333 333.33... ns.

TEST_CASE("Token bucket durations between nanoseconds are rounded up",
          "[token_bucket][in_memory][precision]") {
  ManualClock clock;
  ratelimit::TokenBucket<ManualClock> tb({3, ratelimit::per_second(3)}, {}, clock);
  // T = 2: reset (3 - 2) / 3 s = 333 333 333.3 ns -> 333 333 334.
  CHECK(tb.try_acquire("k") == admitted(3, 2, 333'333'334ns));
  // T = 0: reset exactly 1 s.
  CHECK(tb.try_acquire("k", 2) == admitted(3, 0, 1s));
  // retry (1 - 0) / 3 s -> 333 333 334 ns.
  CHECK(tb.try_acquire("k") == denied(3, 0, 333'333'334ns, 1s));
  // At 333 333 333 ns T = 3 x 333 333 333 / 1e9 = 0.999999999: 1e-9 token short, which takes
  // 1/3 ns -> 1 ns; reset (3 - 0.999999999) / 3 s = 2 000 000 001 / 3 ns = 666 666 667 ns exactly.
  clock.set(333'333'333ns);
  CHECK(tb.try_acquire("k") == denied(3, 0, 1ns, 666'666'667ns));
  // At 333 333 334 ns T = 1.000000002 -> 0.000000002 left: remaining 0, reset
  // (3e9 - 2) / 3 ns = 999 999 999.3 -> 1 000 000 000 ns.
  clock.set(333'333'334ns);
  CHECK(tb.try_acquire("k") == admitted(3, 0, 1s));
}

TEST_CASE("Leaky bucket delays and waits between nanoseconds are rounded up",
          "[leaky_bucket][in_memory][precision]") {
  ManualClock clock;
  ratelimit::LeakyBucket<ManualClock> lb({3, ratelimit::per_second(3)}, {}, clock);
  // The i-th unit: delay (i - 1) / 3 s, reset i / 3 s, each rounded up.
  CHECK(lb.try_acquire("k") == admitted(3, 2, 333'333'334ns, 0ns));
  CHECK(lb.try_acquire("k") == admitted(3, 1, 666'666'667ns, 333'333'334ns));
  CHECK(lb.try_acquire("k") == admitted(3, 0, 1s, 666'666'667ns));
  // L = 3: retry (3 + 1 - 3) / 3 s -> 333 333 334 ns.
  CHECK(lb.try_acquire("k") == denied(3, 0, 333'333'334ns, 1s));
  // At 333 333 333 ns L = 2.000000001: remaining floor(0.999999999) = 0; 1e-9 unit too much
  // -> 1/3 ns -> 1 ns; reset 2 000 000 001 / 3 = 666 666 667 ns.
  clock.set(333'333'333ns);
  CHECK(lb.try_acquire("k") == denied(3, 0, 1ns, 666'666'667ns));
  // At 333 333 334 ns L = 1.999999998: delay 1 999 999 998 / 3 = 666 666 666 ns exactly; then
  // L = 2.999999998: remaining 0, reset 2 999 999 998 / 3 = 999 999 999.3 -> 1 s.
  clock.set(333'333'334ns);
  CHECK(lb.try_acquire("k") == admitted(3, 0, 1s, 666'666'666ns));
}

TEST_CASE("Sliding counter retry instants between nanoseconds are rounded up",
          "[sliding_counter][in_memory][precision]") {
  ManualClock clock;
  ratelimit::SlidingCounter<ManualClock> sc(ratelimit::per_second(3), {}, clock);
  CHECK(sc.try_acquire("k", 3) == admitted(3, 0, 2s));
  // At 1 s (k = 1, e = 0): c = 0, p = 3, E = 3. A unit fits once 3 e >= (0 + 1 + 3 - 3) W, i.e.
  // e = 1e9 / 3 -> 333 333 334 ns; only p > 0: reset (1 + 1) s - 1 s.
  clock.set(1s);
  CHECK(sc.try_acquire("k") == denied(3, 0, 333'333'334ns, 1s));
  // At e = 333 333 333: E = 3 x 666 666 667 / 1e9 = 2.000000001, remaining floor(0.999999999) = 0.
  clock.set(1s + 333'333'333ns);
  CHECK(sc.try_acquire("k") == denied(3, 0, 1ns, 666'666'667ns));
  // At e = 333 333 334: E = 1.999999998 admits; then c = 1, E = 2.999999998, remaining 0,
  // reset (1 + 2) s - 1 333 333 334 ns = 1 666 666 666 ns.
  clock.set(1s + 333'333'334ns);
  CHECK(sc.try_acquire("k") == admitted(3, 0, 1'666'666'666ns));
  // Next unit: 3 e >= (1 + 1 + 3 - 3) W: e = 2e9 / 3 -> 666 666 667, 333 333 333 ns from now.
  CHECK(sc.try_acquire("k") == denied(3, 0, 333'333'333ns, 1'666'666'666ns));
  clock.set(1s + 666'666'666ns);
  CHECK(sc.try_acquire("k") == denied(3, 0, 1ns, 1'333'333'334ns));
  clock.set(1s + 666'666'667ns);
  CHECK(sc.try_acquire("k").allowed);
}

TEST_CASE("Window edges are exact to the nanosecond",
          "[fixed_window][sliding_log][in_memory]"
          "[precision]") {
  ManualClock clock;
  ratelimit::FixedWindow<ManualClock> fw(ratelimit::per_second(1), {}, clock);
  ratelimit::SlidingLog<ManualClock> sl(ratelimit::per_second(1), {}, clock);
  clock.set(1ns);
  // Window 0 ends 999 999 999 ns later; the log's entry leaves 1 s later.
  CHECK(fw.try_acquire("k") == admitted(1, 0, 999'999'999ns));
  CHECK(sl.try_acquire("k") == admitted(1, 0, 1s));
  clock.set(999'999'999ns);
  CHECK(fw.try_acquire("k") == denied(1, 0, 1ns, 1ns));
  CHECK(sl.try_acquire("k") == denied(1, 0, 2ns, 2ns));
  clock.set(1s);
  CHECK(fw.try_acquire("k") == admitted(1, 0, 1s));
  CHECK(sl.try_acquire("k") == denied(1, 0, 1ns, 1ns));
  // At 1 s + 1 ns the entry at 1 ns is exactly t - W: it no longer counts.
  clock.set(1s + 1ns);
  CHECK(sl.try_acquire("k") == admitted(1, 0, 1s));
}

namespace divisor_test {

using ratelimit::detail::Divisor;

/// floor(n / d) by the hardware's division, the definition the multiply must equal.
std::uint64_t by_division(std::uint64_t n, std::int64_t d) {
  return n / static_cast<std::uint64_t>(d);
}

// core/detail/arith.hpp: Divisor replaces a division by a multiply and a shift, and must equal
// floor(n / d) for every n in [0, 2^63) and d in [1, 2^63). Checked where a multiply-and-shift
// goes wrong if its constant is off by one: at the multiples of d and one below, at the range's
// ends, for divisors at, below and above powers of two, and on pseudo-random pairs.
TEST_CASE("Divisor divides exactly like the division instruction", "[arith][divisor]") {
  constexpr std::uint64_t top = (std::uint64_t{1} << 63) - 1;  // the largest n
  std::vector<std::int64_t> divisors{1,
                                     2,
                                     3,
                                     5,
                                     7,
                                     10,
                                     1000,
                                     1'000'000,
                                     1'000'000'007,
                                     3'600'000'000'000,
                                     std::int64_t{1} << 62,
                                     static_cast<std::int64_t>(top)};
  for (int b = 1; b < 63; ++b) {
    const std::int64_t p = std::int64_t{1} << b;
    divisors.insert(divisors.end(), {p - 1, p, p + 1});
  }
  std::uint64_t x = 0x9e3779b97f4a7c15;  // xorshift64 state
  const auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (int i = 0; i < 2000; ++i)
    divisors.push_back(static_cast<std::int64_t>(next() >> (1 + next() % 63)) | 1);
  for (const std::int64_t d : divisors) {
    const Divisor inv(d);
    const auto ud = static_cast<std::uint64_t>(d);
    std::vector<std::uint64_t> ns{0, 1, top, top - 1, ud - 1, ud, ud + 1};
    for (const std::uint64_t q : {std::uint64_t{2}, std::uint64_t{3}, top / ud}) {
      if (q == 0 || q > top / ud) continue;
      ns.insert(ns.end(), {q * ud - 1, q * ud, q * ud + (ud > 1 ? ud - 1 : 0)});
    }
    for (int i = 0; i < 50; ++i) ns.push_back(next() >> 1);
    for (const std::uint64_t n : ns) {
      if (n > top) continue;
      if (inv.quot(n) != by_division(n, d)) {
        INFO("n = " << n << ", d = " << d);
        REQUIRE(inv.quot(n) == by_division(n, d));
      }
    }
  }
  // The helpers built on it, against the i128 definitions.
  using ratelimit::detail::i128;
  CHECK(ratelimit::detail::ceil_div(i128{7}, 2, Divisor(2)) == 4);     // ceil(7 / 2)
  CHECK(ratelimit::detail::ceil_div(i128{8}, 2, Divisor(2)) == 4);     // 8 / 2
  CHECK(ratelimit::detail::floor_div(i128{-7}, 2, Divisor(2)) == -4);  // floor(-3.5)
  const i128 big = i128{1} << 100;                                     // past the multiply's range
  CHECK(ratelimit::detail::ceil_div(big + 1, 3, Divisor(3)) == (big + 1 + 2) / 3);
  CHECK(ratelimit::detail::ceil_div(std::int64_t{10}, 4, Divisor(4)) == 3);  // ceil(2.5)
}

}  // namespace divisor_test

namespace decimal_test {

// core/detail/decimal.hpp writes the scripts' exact arguments: 64-bit values by std::to_chars,
// larger ones digit by digit. Both sides of the boundary, against the numbers' decimal forms.
TEST_CASE("to_decimal writes 64-bit and 128-bit integers exactly", "[arith][decimal]") {
  using ratelimit::detail::i128;
  using ratelimit::detail::to_decimal;
  const i128 two63 = i128{1} << 63;
  CHECK(to_decimal(0) == "0");
  CHECK(to_decimal(-7) == "-7");
  CHECK(to_decimal(two63 - 1) == "9223372036854775807");    // 2^63 - 1, the last in 64 bits
  CHECK(to_decimal(two63) == "9223372036854775808");        // 2^63, the first past them
  CHECK(to_decimal(-two63) == "-9223372036854775808");      // -2^63, still 64 bits
  CHECK(to_decimal(-two63 - 1) == "-9223372036854775809");  // past them
  i128 e30 = 1;
  for (int i = 0; i < 30; ++i) e30 *= 10;
  CHECK(to_decimal(e30) == "1" + std::string(30, '0'));              // 10^30
  CHECK(to_decimal(-e30 - 5) == "-1" + std::string(29, '0') + "5");  // -(10^30 + 5)
  for (const i128 v : {two63 - 1, two63, -two63 - 1, e30})
    CHECK(ratelimit::detail::parse_decimal(to_decimal(v)) == v);
}

}  // namespace decimal_test
