// Compiled only by the test redis_far_storages_refuse_refunds (tests/redis/CMakeLists.txt),
// which passes when the compiler FAILS with the limiter's message: a refund or a penalty on the
// leased or the regional storage must not compile (their bounds are proven for takes only).

#include <chrono>

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis/lease/storage.hpp>
#include <ratelimit/redis/regional/storage.hpp>

ratelimit::Decision refund_leased(
    ratelimit::TokenBucket<ratelimit::SystemClock, ratelimit::LeasedStorage>& limiter) {
  return limiter.refund("k", 1, std::chrono::nanoseconds{0});
}

ratelimit::Decision penalize_regional(
    ratelimit::FixedWindow<ratelimit::SystemClock, ratelimit::RegionalStorage>& limiter) {
  return limiter.penalty("k", 1);
}
