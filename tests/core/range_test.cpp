// Range, errors and bad input, in-memory storage only: every out-of-range field throws
// std::invalid_argument naming the field and the value; cost < 1 and max_wait < 0 throw;
// parse_rate accepts the documented forms and nothing else; and the extremes of the ranges are
// computed exactly, without overflow (UBSan reports any signed overflow), near 2^62 ns too.
#include <chrono>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

#include "../support/expect.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using ratelimit::Decision;
using ratelimit::LeakyBucketConfig;
using ratelimit::ManualClock;
using ratelimit::Rate;
using ratelimit::TokenBucketConfig;
using rltest::admitted;
using rltest::denied;
using std::chrono::nanoseconds;

namespace {

constexpr nanoseconds day = std::chrono::hours{24};
constexpr nanoseconds days366 = 366 * day;  // 31 622 400 000 000 000 ns, the longest period
constexpr nanoseconds two_to_62{std::int64_t{1} << 62};  // 4 611 686 018 427 387 904 ns
/// Periods outside [1 ms, 366 days].
const nanoseconds bad_periods[] = {999'999ns, 0ns, -1s, days366 + 1ns};

/// Matches a std::invalid_argument whose message names `field` and `value`.
class Names : public Catch::MatcherBase<std::invalid_argument> {
 public:
  Names(std::string field, std::int64_t value)
      : field_(std::move(field)), value_(std::to_string(value)) {}
  bool match(const std::invalid_argument& e) const override {
    const std::string what = e.what();
    return what.find(field_) != std::string::npos && what.find(value_) != std::string::npos;
  }
  std::string describe() const override {
    return "is std::invalid_argument naming \"" + field_ + "\" and \"" + value_ + "\"";
  }

 private:
  std::string field_, value_;
};

using TB = ratelimit::TokenBucket<ManualClock>;
using LB = ratelimit::LeakyBucket<ManualClock>;
using FW = ratelimit::FixedWindow<ManualClock>;
using SL = ratelimit::SlidingLog<ManualClock>;
using SC = ratelimit::SlidingCounter<ManualClock>;

}  // namespace

TEST_CASE("A token bucket rejects every out-of-range field, naming it and its value",
          "[token_bucket][in_memory][range]") {
  const auto make = [](std::int64_t capacity, Rate r) { return TB({capacity, r}); };
  for (const std::int64_t bad : {std::int64_t{0}, std::int64_t{-7}, std::int64_t{1'000'000'001}})
    CHECK_THROWS_MATCHES(make(bad, ratelimit::per_second(1)), std::invalid_argument,
                         Names("capacity", bad));
  for (const std::int64_t bad : {std::int64_t{0}, std::int64_t{-1}, std::int64_t{1'000'000'001}})
    CHECK_THROWS_MATCHES(make(1, Rate{bad, std::chrono::hours{1}}), std::invalid_argument,
                         Names("refill.count", bad));
  for (const nanoseconds bad : bad_periods)
    CHECK_THROWS_MATCHES(make(1, Rate{1, bad}), std::invalid_argument,
                         Names("refill.period", bad.count()));
  // More than one token per ns: 1 000 001 tokens per 1 000 000 ns.
  CHECK_THROWS_MATCHES(make(1, Rate{1'000'001, 1ms}), std::invalid_argument,
                       Names("refill.count", 1'000'001));
  // A whole refill longer than 100 years: 10^9 x 366 days / 10^7 = 36 600 days; and one day
  // past 100 Julian years (36 525 days).
  CHECK_THROWS_MATCHES(make(1'000'000'000, Rate{10'000'000, days366}), std::invalid_argument,
                       Names("capacity", 1'000'000'000));
  CHECK_THROWS_MATCHES(make(36'526, ratelimit::per_day(1)), std::invalid_argument,
                       Names("capacity", 36'526));
  CHECK_THROWS_AS(make(0, ratelimit::per_second(1)), std::invalid_argument);
  // The edges themselves are accepted.
  CHECK_NOTHROW(make(1'000'000'000, ratelimit::per_second(1'000'000'000)));
  CHECK_NOTHROW(make(1'000'000'000, Rate{1'000'000'000, 1s}));
  CHECK_NOTHROW(make(1, Rate{1'000'000, 1ms}));  // exactly one token per ns
  CHECK_NOTHROW(make(1, Rate{1, 1ms}));
  CHECK_NOTHROW(make(1, Rate{1, days366}));
  CHECK_NOTHROW(make(1'000'000'000, Rate{10'000'000, 365 * day}));  // 36 500 days
}

TEST_CASE("A leaky bucket rejects every out-of-range field, naming it and its value",
          "[leaky_bucket][in_memory][range]") {
  const auto make = [](std::int64_t queue, Rate r) { return LB({queue, r}); };
  for (const std::int64_t bad : {std::int64_t{0}, std::int64_t{-7}, std::int64_t{1'000'000'001}})
    CHECK_THROWS_MATCHES(make(bad, ratelimit::per_second(1)), std::invalid_argument,
                         Names("queue_size", bad));
  for (const std::int64_t bad : {std::int64_t{0}, std::int64_t{-1}, std::int64_t{1'000'000'001}})
    CHECK_THROWS_MATCHES(make(1, Rate{bad, std::chrono::hours{1}}), std::invalid_argument,
                         Names("leak.count", bad));
  for (const nanoseconds bad : bad_periods)
    CHECK_THROWS_MATCHES(make(1, Rate{1, bad}), std::invalid_argument,
                         Names("leak.period", bad.count()));
  CHECK_THROWS_MATCHES(make(1, Rate{1'000'001, 1ms}), std::invalid_argument,
                       Names("leak.count", 1'000'001));
  CHECK_THROWS_MATCHES(make(1'000'000'000, Rate{10'000'000, days366}), std::invalid_argument,
                       Names("queue_size", 1'000'000'000));
  CHECK_NOTHROW(make(1'000'000'000, ratelimit::per_second(1'000'000'000)));
  CHECK_NOTHROW(make(1, Rate{1, days366}));
  CHECK_NOTHROW(make(1'000'000'000, Rate{10'000'000, 365 * day}));
}

TEMPLATE_TEST_CASE("A window limiter rejects an out-of-range rate, naming the field and value",
                   "[fixed_window][sliding_log][sliding_counter][in_memory][range]", FW, SL, SC) {
  for (const std::int64_t bad : {std::int64_t{0}, std::int64_t{-1}, std::int64_t{1'000'000'001}})
    CHECK_THROWS_MATCHES(TestType(Rate{bad, 1s}), std::invalid_argument, Names("rate.count", bad));
  for (const nanoseconds bad : bad_periods)
    CHECK_THROWS_MATCHES(TestType(Rate{1, bad}), std::invalid_argument,
                         Names("rate.period", bad.count()));
  CHECK_NOTHROW(TestType(Rate{1'000'000'000, 1ms}));
  CHECK_NOTHROW(TestType(Rate{1'000'000'000, days366}));
  CHECK_NOTHROW(TestType(Rate{1, 1ms}));
}

TEMPLATE_TEST_CASE("A cost below 1 and a negative max_wait throw, naming the value",
                   "[token_bucket][leaky_bucket][fixed_window][sliding_log][sliding_counter]"
                   "[in_memory][range]",
                   TB, LB, FW, SL, SC) {
  ManualClock clock;
  auto limiter = [&] {
    if constexpr (std::is_same_v<TestType, TB>)
      return TB({5, ratelimit::per_second(1)}, {}, clock);
    else if constexpr (std::is_same_v<TestType, LB>)
      return LB({5, ratelimit::per_second(1)}, {}, clock);
    else
      return TestType(ratelimit::per_second(5), {}, clock);
  }();
  CHECK_THROWS_MATCHES(limiter.try_acquire("k", 0), std::invalid_argument, Names("cost", 0));
  CHECK_THROWS_MATCHES(limiter.try_acquire("k", -5), std::invalid_argument, Names("cost", -5));
  CHECK_THROWS_MATCHES(limiter.acquire("k", -5, 1s), std::invalid_argument, Names("cost", -5));
  CHECK_THROWS_MATCHES(limiter.acquire("k", 1, -3ns), std::invalid_argument, Names("max_wait", -3));
  CHECK_THROWS_AS(limiter.try_acquire("k", std::numeric_limits<std::int64_t>::min()),
                  std::invalid_argument);
  // A cost far above the limit is no error: denied, never.
  CHECK(limiter.try_acquire("k", std::numeric_limits<std::int64_t>::max()).retry_after ==
        Decision::never);
  CHECK(limiter.peek("k").remaining == 5);
}

TEST_CASE("parse_rate reads the documented forms", "[rate][in_memory]") {
  using std::chrono::hours;
  using std::chrono::minutes;
  CHECK(ratelimit::parse_rate("100/minute") == Rate{100, minutes{1}});
  CHECK(ratelimit::parse_rate("10/s") == Rate{10, 1s});
  CHECK(ratelimit::parse_rate("5/15m") == Rate{5, minutes{15}});
  CHECK(ratelimit::parse_rate("1000 per hour") == Rate{1000, hours{1}});
  CHECK(ratelimit::parse_rate("3 per 2 days") == Rate{3, hours{48}});
  CHECK(ratelimit::parse_rate("7/ms") == Rate{7, 1ms});
  CHECK(ratelimit::parse_rate("1/d") == Rate{1, hours{24}});
  CHECK(ratelimit::parse_rate("60/min") == Rate{60, minutes{1}});
  CHECK(ratelimit::parse_rate("2/sec") == Rate{2, 1s});
  CHECK(ratelimit::parse_rate("2/seconds") == Rate{2, 1s});
  CHECK(ratelimit::parse_rate("5 per 15 minutes") == Rate{5, minutes{15}});
  CHECK(ratelimit::parse_rate("  10/s  ") == Rate{10, 1s});
  CHECK(ratelimit::parse_rate("1000000000/h") == Rate{1'000'000'000, hours{1}});
  // A value read from a file or an environment variable often keeps its line end.
  CHECK(ratelimit::parse_rate("5/h\n") == Rate{5, hours{1}});
  CHECK(ratelimit::parse_rate("5/h\r\n") == Rate{5, hours{1}});
  CHECK(ratelimit::per_second(10) == Rate{10, 1s});
  CHECK(ratelimit::per_minute(100) == Rate{100, minutes{1}});
  CHECK(ratelimit::per_hour(1000) == Rate{1000, hours{1}});
  CHECK(ratelimit::per_day(5) == Rate{5, hours{24}});
}

TEST_CASE("parse_rate rejects everything else, quoting the text", "[rate][in_memory]") {
  for (const std::string bad : {"",
                                " ",
                                "100",
                                "/s",
                                "100/",
                                "0/s",
                                "-1/s",
                                "+5/s",
                                "1.5/s",
                                "ten/s",
                                "10/x",
                                "10/0s",
                                "10/-1s",
                                "10/S",
                                "10/Minute",
                                "10/s extra",
                                "10 per",
                                "per hour",
                                "10 per hour per day",
                                "10//s",
                                "99999999999999999999/s",
                                "10/99999999999999d",
                                "10/1.5s",
                                "10 s",
                                "10/s/m"}) {
    INFO("text: \"" << bad << "\"");
    CHECK_THROWS_AS(ratelimit::parse_rate(bad), std::invalid_argument);
    CHECK_THROWS_WITH(ratelimit::parse_rate(bad), Contains("\"" + bad + "\""));
  }
}

TEST_CASE("parse_rate says which part of the text is wrong", "[rate][in_memory]") {
  // The newcomer trial found "1e3/s" and an overflowing count both reported as "whole number",
  // and "5/" or "5/1.5s" as a bare "unknown unit".
  CHECK_THROWS_WITH(ratelimit::parse_rate("1e3/s"), Contains("digits only"));
  CHECK_THROWS_WITH(ratelimit::parse_rate("99999999999999999999/s"),
                    Contains("does not fit in 64 bits"));
  CHECK_THROWS_WITH(ratelimit::parse_rate("5/"), Contains("missing unit"));
  CHECK_THROWS_WITH(ratelimit::parse_rate("5/1.5s"), Contains("unknown unit \".5s\""));
  CHECK_THROWS_WITH(ratelimit::parse_rate("5/S"), Contains("lower case"));
}

TEST_CASE("A bucket of 10^9 tokens refilled at 10^9 per second is exact to the nanosecond",
          "[token_bucket][leaky_bucket][in_memory][range][extremes]") {
  ManualClock clock;
  TB tb({1'000'000'000, ratelimit::per_second(1'000'000'000)}, {}, clock);
  LB lb({1'000'000'000, ratelimit::per_second(1'000'000'000)}, {}, clock);
  // One token per ns: the whole bucket refills in 10^9 ns.
  CHECK(tb.try_acquire("k", 1'000'000'000) == admitted(1'000'000'000, 0, 1s));
  CHECK(tb.try_acquire("k") == denied(1'000'000'000, 0, 1ns, 1s));
  CHECK(lb.try_acquire("k", 1'000'000'000) == admitted(1'000'000'000, 0, 1s, 0ns));
  CHECK(lb.try_acquire("k") == denied(1'000'000'000, 0, 1ns, 1s));
  clock.set(1ns);
  // One token back: T = 1 -> 0. The queue leaked one unit: L = 10^9 - 1, delay 10^9 - 1 ns.
  CHECK(tb.try_acquire("k") == admitted(1'000'000'000, 0, 1s));
  CHECK(lb.try_acquire("k") == admitted(1'000'000'000, 0, 1s, 999'999'999ns));
  // At 500 000 001 ns: T = 5 x 10^8, exactly a cost of 5 x 10^8; a cost of 10^9 waits 10^9 -
  // 5 x 10^8 tokens = 5 x 10^8 ns.
  clock.set(500'000'001ns);
  CHECK(tb.try_acquire("k", 1'000'000'000) == denied(1'000'000'000, 500'000'000, 500ms, 500ms));
  CHECK(tb.try_acquire("k", 500'000'000) == admitted(1'000'000'000, 0, 1s));
  // The same near the clock's end: spend all 1 s before 2^62, full again at 2^62.
  clock.set(two_to_62 - 1s);
  CHECK(tb.try_acquire("far", 1'000'000'000) == admitted(1'000'000'000, 0, 1s));
  CHECK(lb.try_acquire("far", 1'000'000'000) == admitted(1'000'000'000, 0, 1s, 0ns));
  clock.set(two_to_62 - 1ns);
  CHECK(tb.peek("far") == admitted(1'000'000'000, 999'999'999, 1ns));
  CHECK(lb.peek("far") == admitted(1'000'000'000, 999'999'999, 1ns, 1ns));
  clock.set(two_to_62);
  CHECK(tb.peek("far") == admitted(1'000'000'000, 1'000'000'000, 0ns));
  CHECK(tb.try_acquire("far", 1'000'000'000) == admitted(1'000'000'000, 0, 1s));
}

TEST_CASE("A bucket of 1 token refilled once per 366 days is exact",
          "[token_bucket][leaky_bucket][in_memory][range][extremes]") {
  ManualClock clock;
  TB tb({1, Rate{1, days366}}, {}, clock);
  LB lb({1, Rate{1, days366}}, {}, clock);
  CHECK(tb.try_acquire("k") == admitted(1, 0, days366));
  CHECK(tb.try_acquire("k") == denied(1, 0, days366, days366));
  CHECK(lb.try_acquire("k") == admitted(1, 0, days366, 0ns));
  CHECK(lb.try_acquire("k") == denied(1, 0, days366, days366));
  clock.set(days366 - 1ns);
  CHECK(tb.try_acquire("k") == denied(1, 0, 1ns, 1ns));
  CHECK(lb.try_acquire("k") == denied(1, 0, 1ns, 1ns));
  clock.set(days366);
  CHECK(tb.try_acquire("k") == admitted(1, 0, days366));
  CHECK(lb.try_acquire("k") == admitted(1, 0, days366, 0ns));
  // Spent at 2^62 - 366 days (4 580 063 618 427 387 904 ns), full again exactly at 2^62.
  clock.set(two_to_62 - days366);
  CHECK(tb.try_acquire("far") == admitted(1, 0, days366));
  clock.set(two_to_62 - 1ns);
  CHECK(tb.try_acquire("far") == denied(1, 0, 1ns, 1ns));
  clock.set(two_to_62);
  CHECK(tb.try_acquire("far") == admitted(1, 0, days366));
  CHECK(tb.try_acquire("far") == denied(1, 0, days366, days366));
}

TEST_CASE(
    "A bucket of 10^9 tokens refilled at 10^7 per 365 days (a refill just under 100 years) "
    "is exact near 2^62 ns",
    "[token_bucket][leaky_bucket][in_memory][range][extremes]") {
  ManualClock clock;
  const Rate slow{10'000'000, 365 * day};
  TB tb({1'000'000'000, slow}, {}, clock);
  LB lb({1'000'000'000, slow}, {}, clock);
  // One token per 365 days / 10^7 = 31 536 000 000 000 000 / 10^7 = 3 153 600 000 ns; the whole
  // bucket in 10^9 times that: 3 153 600 000 000 000 000 ns (36 500 days).
  constexpr nanoseconds per_token{3'153'600'000};
  constexpr nanoseconds whole{3'153'600'000'000'000'000};
  clock.set(two_to_62 - 1s);  // 4 611 686 017 427 387 904 ns
  CHECK(tb.try_acquire("k", 1'000'000'000) == admitted(1'000'000'000, 0, whole));
  CHECK(tb.try_acquire("k") == denied(1'000'000'000, 0, per_token, whole));
  CHECK(tb.try_acquire("k", 1'000'000'000) == denied(1'000'000'000, 0, whole, whole));
  CHECK(lb.try_acquire("k", 1'000'000'000) == admitted(1'000'000'000, 0, whole, 0ns));
  CHECK(lb.try_acquire("k") == denied(1'000'000'000, 0, per_token, whole));
  // 1 s later, at 2^62: 10^9 / 3 153 600 000 = 0.317 tokens back: remaining 0; a unit waits
  // 3 153 600 000 - 10^9 = 2 153 600 000 ns; the refill 3 153 600 000 000 000 000 - 10^9 ns.
  clock.set(two_to_62);
  CHECK(tb.try_acquire("k") == denied(1'000'000'000, 0, 2'153'600'000ns, whole - 1s));
  CHECK(tb.try_acquire("k", 1'000'000'000) == denied(1'000'000'000, 0, whole - 1s, whole - 1s));
  CHECK(lb.try_acquire("k") == denied(1'000'000'000, 0, 2'153'600'000ns, whole - 1s));
}

TEST_CASE(
    "A bucket whose latest admission lies further back than its state keeps decides an earlier "
    "request at that request's own time",
    "[token_bucket][in_memory][range][extremes][step_back]") {
  // In process a bucket's state is at (whole ns and a remainder below count) and the lag
  // at - last, packed in one word beside the remainder's w = bit_width(count - 1) bits: the lag
  // is kept below 2^(58 - w) - 1 ns. 999 999 937 (a prime) tokens per second stay unreduced
  // (count = 999 999 937 < 2^30: w = 30), so the lag is kept below 2^28 - 1 = 268 435 455 ns.
  // Capacity B = count: the whole refill takes 1 s, one token 10^9 / count = 1.000000063 ns.
  ManualClock clock;
  constexpr std::int64_t count = 999'999'937;
  TB tb({count, Rate{count, 1s}}, {}, clock);
  // One token at 10 s: at = 10 s + 10^9 / count = 10 s + 1 ns, remainder 63 (in 1/count ns).
  // The lag, 1 ns, is kept. Read back at 9.5 s, the request is decided at 10 s: backlog
  // 1 ns x count + 63 = 10^9 / count ns, one token: remaining B - 1, reset ceil(1.000000063) =
  // 2 ns.
  clock.set(10s);
  CHECK(tb.try_acquire("near") == admitted(count, count - 1, 2ns));
  clock.set(9500ms);
  CHECK(tb.peek("near") == admitted(count, count - 1, 2ns));
  // The whole bucket at 10 s: at = 10 s + 1 s (B x 10^9 / count = 10^9 ns exactly). The lag,
  // 1 s, is not kept. Read back at 9.5 s the request is decided there: backlog 1.5 s (reset
  // 1.5 s); a token needs 1.5 s + 10^9 / count ns of backlog to fit in 1 s of bucket: it waits
  // 0.5 s + ceil(1.000000063) ns = 500 000 002 ns. Decided at 10 s it would wait 2 ns: the
  // state never decides later than the request's time when it cannot, so it only denies more.
  clock.set(10s);
  CHECK(tb.try_acquire("far", count) == admitted(count, 0, 1s));
  clock.set(9500ms);
  CHECK(tb.try_acquire("far") == denied(count, 0, 500'000'002ns, 1500ms));
  // At or after the admission, the state decides exactly as ever: at 10 s it waits 2 ns.
  clock.set(10s);
  CHECK(tb.try_acquire("far") == denied(count, 0, 2ns, 1s));
}

TEST_CASE("A bucket's state read from a Redis reply as full before its time is full at it",
          "[token_bucket][in_memory][step_back]") {
  // The reply {admitted, t_us, at_us, at_rem}: decided at t = 5 ms, at = 1 ms (full since).
  // The state keeps at >= its latest time, so it is read as at = t = 5 ms: from t on it decides
  // as the reply's state would (full), and an earlier request is decided at t.
  using ratelimit::TokenBucketModel;
  using ratelimit::detail::i128;
  const auto p = TokenBucketModel::make_params({10, ratelimit::per_second(2)});
  const i128 reply[] = {1, 5'000, 1'000, 0};
  const auto w = TokenBucketModel::Wire::state(p, reply, ratelimit::Operation{});
  REQUIRE(w);
  CHECK(w->time == 5ms);
  CHECK(w->state.at_ns == 5'000'000);
  CHECK(w->state.frac() == 0);
  CHECK(w->state.last() == 5'000'000);
  // The whole bucket at 4 ms is taken at 5 ms: at = 5 ms + 10 x 500 ms.
  auto s = w->state;
  CHECK(TokenBucketModel::apply(p, s, 4ms, ratelimit::Operation{10, false, Decision::never}) ==
        admitted(10, 0, 5s));
  CHECK(s.at_ns == nanoseconds(5ms + 5s).count());
  CHECK(s.last() == 5'000'000);
}

TEST_CASE(
    "Parameters given to an in-process binding directly are checked against the model's range",
    "[in_memory][range][validation]") {
  // A sliding counter's counts are kept in 32 bits, which holds because every limit is at most
  // 10^9. A limit of 5 x 10^9 given through with_params, unchecked, stored a count of 2^32 as
  // 0: requests of 2^32 were admitted without end (the second needs 2^33 > 5 x 10^9). Every
  // way parameters reach a binding without a limiter's config is now checked.
  ratelimit::InMemoryStorage storage;
  const auto sc = storage.bind<ratelimit::SlidingCounterModel>("", {1000, 1'000'000'000});
  CHECK_THROWS_WITH(sc.with_params({5'000'000'000, 3'600'000'000'000}),
                    Contains("params.limit = 5000000000"));
  CHECK_THROWS_WITH(
      storage.bind<ratelimit::SlidingCounterModel>("", {5'000'000'000, 1'000'000'000}),
      Contains("params.limit = 5000000000"));
  CHECK_THROWS_WITH(sc.with_params({5, 999'999}), Contains("params.window (ns) = 999999"));
  // A bucket's remainder is kept in bit_width(count - 1) <= 30 bits: a count of 2^59 + 1 would
  // overwrite the bits beside it.
  const auto tb = storage.bind<ratelimit::TokenBucketModel>(
      "", ratelimit::TokenBucketModel::make_params({10, ratelimit::per_second(1)}));
  const ratelimit::detail::GcraParams wide{4, (std::int64_t{1} << 59) + 1,
                                           (std::int64_t{1} << 61) + 3};
  CHECK_THROWS_WITH(tb.with_params(wide), Contains("params.count = 576460752303423489"));
  CHECK_THROWS_WITH(storage.bind<ratelimit::TokenBucketModel>("", wide),
                    Contains("params.count = 576460752303423489"));
  CHECK_THROWS_WITH(tb.with_params({0, 1, 1'000'000}), Contains("params.limit = 0"));
  // Parameters in range still pass, a fallback's longer period included (100 years at most).
  CHECK_NOTHROW(sc.with_params({1'000'000'000, 1'000'000'000}));
  CHECK_NOTHROW(tb.with_params({1, 1, 3'155'760'000'000'000'000}));
  CHECK_THROWS_WITH(tb.with_params({1, 1, 3'155'760'000'000'000'001}),
                    Contains("params.period (ns) = 3155760000000000001"));
}

TEST_CASE("Windows of 10^9 per 366 days are exact at 2^62 ns",
          "[fixed_window][sliding_log][sliding_counter][in_memory][range][extremes]") {
  ManualClock clock;
  const Rate r{1'000'000'000, days366};
  FW fw(r, {}, clock);
  SL sl(r, {}, clock);
  SC sc(r, {}, clock);
  // 2^62 / W = 145.8...: window k = 145 ends at 146 W = 4 616 870 400 000 000 000 ns,
  // 5 184 381 572 612 096 ns after 2^62.
  constexpr nanoseconds to_end{5'184'381'572'612'096};
  clock.set(two_to_62);
  CHECK(fw.try_acquire("k", 1'000'000'000) == admitted(1'000'000'000, 0, to_end));
  CHECK(fw.try_acquire("k") == denied(1'000'000'000, 0, to_end, to_end));
  // The log holds 10^9 units stamped 2^62: they leave W later.
  CHECK(sl.try_acquire("k", 1'000'000'000) == admitted(1'000'000'000, 0, days366));
  CHECK(sl.try_acquire("k") == denied(1'000'000'000, 0, days366, days366));
  // c = 10^9: fresh again at (k + 2) W, to_end + W = 36 806 781 572 612 096 ns from now. A unit
  // fits in window 146 once 10^9 e >= (1 + 10^9 - 10^9) W, e = W / 10^9 = 31 622 400 ns.
  CHECK(sc.try_acquire("k", 1'000'000'000) == admitted(1'000'000'000, 0, to_end + days366));
  CHECK(sc.try_acquire("k") == denied(1'000'000'000, 0, to_end + 31'622'400ns, to_end + days366));
}
