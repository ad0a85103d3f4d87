// Response headers from decisions (include/ratelimit/http.hpp). Decisions come from the real
// limiters driven by a ManualClock, so every expected header follows from the algorithm's
// definition and the header rules in http.hpp; the arithmetic is in the comments.

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include <ratelimit/http.hpp>
#include <ratelimit/ratelimit.hpp>

using namespace std::chrono_literals;
using ratelimit::HeaderList;
using ratelimit::QuotaPolicy;

namespace {

HeaderList expected(std::initializer_list<std::pair<const char*, const char*>> fields) {
  HeaderList h;
  for (const auto& [name, value] : fields) h.emplace_back(name, value);
  return h;
}

}  // namespace

TEST_CASE(
    "An admitted sliding-counter request gets the draft's fields and the X- fields but no "
    "Retry-After",
    "[http][sliding_counter]") {
  ratelimit::ManualClock clock;
  ratelimit::SlidingCounter<ratelimit::ManualClock> limiter(ratelimit::per_minute(100), {}, clock);
  // The sliding counter's worked example (c): 80 admitted in window 0 ([0, 60 s)), then at t = 75 s
  // (15 s into window 1) 30 more (each sees E <= 29 + 80 * 45 / 60 = 89) and the request under
  // test.
  for (int i = 0; i < 80; ++i) REQUIRE(limiter.try_acquire("k"));
  clock.set(75s);
  for (int i = 0; i < 30; ++i) REQUIRE(limiter.try_acquire("k"));
  const auto d = limiter.try_acquire("k");
  // Before: E = 30 + 80 * (60 - 15) / 60 = 90, 90 + 1 <= 100: admitted. After: c = 31,
  // E = 31 + 60 = 91, remaining = floor(100 - 91) = 9; reset_after = (k + 2) W - t
  // = 3 * 60 s - 75 s = 105 s.
  REQUIRE(d.allowed);
  REQUIRE(d.remaining == 9);
  REQUIRE(d.reset_after == 105s);
  const auto h = ratelimit::rate_limit_headers(d, QuotaPolicy{"default", 100, 60s});
  CHECK(h == expected({{"RateLimit-Policy", "\"default\";q=100;w=60"},
                       {"RateLimit", "\"default\";r=9;t=105"},
                       {"X-RateLimit-Limit", "100"},
                       {"X-RateLimit-Remaining", "9"},
                       {"X-RateLimit-Reset", "105"}}));
}

TEST_CASE("A denied fixed-window request gets Retry-After and t rounded up to whole seconds",
          "[http][fixed_window]") {
  ratelimit::ManualClock clock;
  ratelimit::FixedWindow<ratelimit::ManualClock> limiter(ratelimit::per_minute(10), {}, clock);
  clock.set(45500ms);
  for (int i = 0; i < 10; ++i) REQUIRE(limiter.try_acquire("k"));
  const auto d = limiter.try_acquire("k");
  // c = 10 = N: denied; retry_after = reset_after = (k + 1) W - t = 60 s - 45.5 s = 14.5 s,
  // which rounds up to 15 s. On a denial t is the wait (15), equal to Retry-After.
  REQUIRE_FALSE(d.allowed);
  REQUIRE(d.retry_after == 14500ms);
  const auto h = ratelimit::rate_limit_headers(d, QuotaPolicy{"per-minute", 10, 60s});
  CHECK(h == expected({{"RateLimit-Policy", "\"per-minute\";q=10;w=60"},
                       {"RateLimit", "\"per-minute\";r=0;t=15"},
                       {"X-RateLimit-Limit", "10"},
                       {"X-RateLimit-Remaining", "0"},
                       {"X-RateLimit-Reset", "15"},
                       {"Retry-After", "15"}}));
}

TEST_CASE("A denied token-bucket request waits for one token while the reset is the whole refill",
          "[http][token_bucket]") {
  ratelimit::ManualClock clock;
  ratelimit::TokenBucket<ratelimit::ManualClock> limiter({5, ratelimit::per_second(1)}, {}, clock);
  for (int i = 0; i < 5; ++i) REQUIRE(limiter.try_acquire("k"));
  const auto d = limiter.try_acquire("k");
  // The token bucket's worked example (b): T = 0, retry_after = (1 - 0) / (1/s) = 1 s; reset_after
  // = (5 - 0) / (1/s) = 5 s. Policy window: a full refill, 5 tokens at 1/s = 5 s.
  REQUIRE_FALSE(d.allowed);
  const auto h = ratelimit::rate_limit_headers(d, QuotaPolicy{"burst", 5, 5s});
  CHECK(h == expected({{"RateLimit-Policy", "\"burst\";q=5;w=5"},
                       {"RateLimit", "\"burst\";r=0;t=1"},
                       {"X-RateLimit-Limit", "5"},
                       {"X-RateLimit-Remaining", "0"},
                       {"X-RateLimit-Reset", "5"},
                       {"Retry-After", "1"}}));
}

TEST_CASE("A never-satisfiable request gets no Retry-After, since no wait would help",
          "[http][token_bucket]") {
  ratelimit::ManualClock clock;
  ratelimit::TokenBucket<ratelimit::ManualClock> limiter({5, ratelimit::per_second(1)}, {}, clock);
  const auto d = limiter.try_acquire("k", 6);
  // cost 6 > capacity 5: denied with retry_after = never; the bucket is untouched and fresh:
  // remaining 5, reset_after 0, so t = 0 and X-RateLimit-Reset = 0.
  REQUIRE(d.retry_after == ratelimit::Decision::never);
  const auto h = ratelimit::rate_limit_headers(d, QuotaPolicy{"burst", 5, 5s});
  CHECK(h == expected({{"RateLimit-Policy", "\"burst\";q=5;w=5"},
                       {"RateLimit", "\"burst\";r=5;t=0"},
                       {"X-RateLimit-Limit", "5"},
                       {"X-RateLimit-Remaining", "5"},
                       {"X-RateLimit-Reset", "0"}}));
}

TEST_CASE("Seconds round up: 1 ns is 1 s, a whole second stays whole", "[http]") {
  ratelimit::Decision d{};
  d.limit = 3;
  d.remaining = 0;
  d.retry_after = 1ns;  // ceil(1e-9 s) = 1
  d.reset_after = 2s;   // exactly 2
  const auto h = ratelimit::rate_limit_headers(d, QuotaPolicy{"p", 3, 2s});
  CHECK(h == expected({{"RateLimit-Policy", "\"p\";q=3;w=2"},
                       {"RateLimit", "\"p\";r=0;t=1"},
                       {"X-RateLimit-Limit", "3"},
                       {"X-RateLimit-Remaining", "0"},
                       {"X-RateLimit-Reset", "2"},
                       {"Retry-After", "1"}}));
}

TEST_CASE("Several policies are listed in order and the most restrictive fills the X- fields",
          "[http]") {
  ratelimit::Decision loose{};  // admitted, 99 left, fresh in 60 s
  loose.allowed = true;
  loose.limit = 100;
  loose.remaining = 99;
  loose.reset_after = 60s;
  ratelimit::Decision tight{};  // admitted, 4 left, fresh in 12.1 s -> 13
  tight.allowed = true;
  tight.limit = 5;
  tight.remaining = 4;
  tight.reset_after = 12100ms;
  const std::vector<ratelimit::PolicyDecision> both{{{"hour", 100, 1h}, loose},
                                                    {{"login", 5, 60s}, tight}};
  // Both admitted: the fewer remaining (4 < 99) speaks for the request.
  CHECK(ratelimit::rate_limit_headers(both) ==
        expected({{"RateLimit-Policy", "\"hour\";q=100;w=3600, \"login\";q=5;w=60"},
                  {"RateLimit", "\"hour\";r=99;t=60, \"login\";r=4;t=13"},
                  {"X-RateLimit-Limit", "5"},
                  {"X-RateLimit-Remaining", "4"},
                  {"X-RateLimit-Reset", "13"}}));

  ratelimit::Decision short_wait = tight, long_wait = loose;
  short_wait.allowed = long_wait.allowed = false;
  short_wait.remaining = long_wait.remaining = 0;
  short_wait.retry_after = 2s;
  long_wait.retry_after = 30s;
  const std::vector<ratelimit::PolicyDecision> denied{{{"hour", 100, 1h}, long_wait},
                                                      {{"login", 5, 60s}, short_wait}};
  // Both denied: the longer wait (30 s > 2 s) is the one the client must respect.
  CHECK(ratelimit::rate_limit_headers(denied) ==
        expected({{"RateLimit-Policy", "\"hour\";q=100;w=3600, \"login\";q=5;w=60"},
                  {"RateLimit", "\"hour\";r=0;t=30, \"login\";r=0;t=2"},
                  {"X-RateLimit-Limit", "100"},
                  {"X-RateLimit-Remaining", "0"},
                  {"X-RateLimit-Reset", "60"},
                  {"Retry-After", "30"}}));
  CHECK(ratelimit::rate_limit_headers(std::span<const ratelimit::PolicyDecision>{}).empty());
}

TEST_CASE("Policy names are valid Structured Field strings and windows are at least 1 s",
          "[http]") {
  ratelimit::Decision d{};
  d.allowed = true;
  d.limit = 7;
  d.remaining = 7;
  // '"' and '\' are escaped; a tab and the UTF-8 bytes of "é" (0xC3 0xA9) cannot appear in an
  // sf-string and become '?'. A 500 ms window rounds up to 1 s.
  const auto h = ratelimit::rate_limit_headers(d, QuotaPolicy{"a\"b\\c\td\xC3\xA9", 7, 500ms});
  REQUIRE(h.size() == 5);
  CHECK(h[0].second == "\"a\\\"b\\\\c?d??\";q=7;w=1");
  CHECK(h[1].second == "\"a\\\"b\\\\c?d??\";r=7;t=0");
}
