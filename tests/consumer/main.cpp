// Uses the installed (or embedded) library: a token bucket of capacity 10 refilled at 2 per
// second, on a manual clock. 15 requests at t = 0 admit 10 (the capacity); 3 s later 6 tokens
// are back (2/s x 3 s), so 5 more are admitted leaving 1.
#include <chrono>
#include <cstdio>
#include <ratelimit/ratelimit.hpp>

int main() {
  using namespace std::chrono_literals;
  ratelimit::ManualClock clock;
  ratelimit::TokenBucket<ratelimit::ManualClock> bucket({10, ratelimit::per_second(2)}, {}, clock);
  int admitted = 0;
  for (int i = 0; i < 15; ++i) admitted += bucket.try_acquire("client").allowed ? 1 : 0;
  clock.advance(3s);
  ratelimit::Decision last{};
  for (int i = 0; i < 5; ++i) last = bucket.try_acquire("client");
  const bool ok = admitted == 10 && last.allowed && last.remaining == 1;
  std::printf("consumer: ratelimit %d.%d.%d %s\n", RATELIMIT_VERSION_MAJOR, RATELIMIT_VERSION_MINOR,
              RATELIMIT_VERSION_PATCH, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
