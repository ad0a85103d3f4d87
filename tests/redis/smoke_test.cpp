#include <catch2/catch.hpp>
#include <ratelimit/manual_clock.hpp>
#include <ratelimit/redis.hpp>
#include <ratelimit/token_bucket.hpp>

#include "support/expect.hpp"
#include "support/redis_backend.hpp"

using namespace std::chrono_literals;

TEST_CASE("smoke") {
  ratelimit::ManualClock clock;
  ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::RedisStorage> tb(
      {10, ratelimit::per_second(2)}, RedisBackend::make(), clock);
  ratelimit::TokenBucket<ratelimit::ManualClock> mem({10, ratelimit::per_second(2)}, {}, clock);
  for (int i = 0; i < 15; ++i) CHECK(tb.try_acquire("k") == mem.try_acquire("k"));
  clock.advance(3s);
  for (int i = 0; i < 5; ++i) CHECK(tb.try_acquire("k") == mem.try_acquire("k"));
  CHECK(tb.peek("k") == mem.peek("k"));
}
