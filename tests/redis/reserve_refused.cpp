// Compiled only by the test reserve_refused (tests/redis/CMakeLists.txt), which passes when the
// compiler FAILS with the limiter's messages: a reservation on each window (its state holds one
// window) and a cancel on a far storage (its bounds are proven for takes only) must not compile.

#include <chrono>

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis/lease/storage.hpp>

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
