// Compiled only by the test redis_far_storages_refuse_refunds (tests/redis/CMakeLists.txt),
// which passes when the compiler FAILS with the limiter's messages, in this order: a refund or a
// penalty on the leased or the regional storage must not compile (their bounds are proven for
// takes only), nor a reservation on each window (its state holds one window) nor a cancel on a
// far storage.

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

ratelimit::Reservation reserve_fixed_window(ratelimit::FixedWindow<ratelimit::SystemClock>& l) {
  return l.reserve("k", 1);
}

ratelimit::Reservation reserve_sliding_counter(
    ratelimit::SlidingCounter<ratelimit::SystemClock>& l) {
  return l.reserve("k", 1, std::chrono::seconds{1});
}

ratelimit::Decision cancel_sliding_log(ratelimit::SlidingLog<ratelimit::SystemClock>& l,
                                       const ratelimit::Reservation& r) {
  return l.cancel("k", r);
}

ratelimit::Decision cancel_leased(
    ratelimit::TokenBucket<ratelimit::SystemClock, ratelimit::LeasedStorage>& l,
    const ratelimit::Reservation& r) {
  return l.cancel("k", r);
}
