#pragma once
/// @file go_window.hpp
/// The counting of Envoy's reference rate limit service (envoyproxy/ratelimit, Go), as a model of
/// this library's registry: a fixed window aligned to the Unix epoch in whole seconds, one
/// counter per window that every hit increments, admitted or not (the reference runs `INCRBY key
/// hits` and compares the result with the limit: src/redis/fixed_cache_impl.go and
/// src/limiter/base_limiter.go). The library's own fixed window counts only admitted requests.

#include <chrono>
#include <cstdint>
#include <limits>
#include <string_view>

#include <ratelimit/core/decision.hpp>
#include <ratelimit/core/storage.hpp>

namespace ratelimit::server {

/// N hits per window of W whole seconds, windows [k*W, (k+1)*W) of Unix seconds (the reference
/// truncates the time to seconds, src/utils/utilities.go CalculateReset). A hit of cost c moves
/// the count from n to n + c whatever the outcome; it is over the limit iff n + c > N. A cost
/// of 0 only reads (the reference's `INCRBY key 0` for a descriptor's hits_addend of 0).
/// Decision fields: limit = N; remaining = N - (n + c) when within, else 0; reset_after =
/// retry_after (when over) = the window's end - now, in whole seconds as the reference
/// reports it. Thread safety: pure functions.
struct GoWindowModel {
  static constexpr std::string_view name = "go_fixed_window";
  struct Params {
    std::int64_t limit = 0;     ///< N, 0 to 2^32 - 1 (the wire's uint32)
    std::int64_t window_s = 1;  ///< W in seconds, >= 1
  };
  struct State {
    std::int64_t window = 0;  ///< k + 1 of the counted window; 0 for none
    std::int64_t count = 0;   ///< hits in that window
  };

  static Decision apply(const Params& p, State& s, std::chrono::nanoseconds now,
                        const Operation& op) noexcept {
    const std::int64_t t = now.count() < 0 ? 0 : now.count() / 1'000'000'000;
    const std::int64_t k = t / p.window_s;
    const std::int64_t before = s.window == k + 1 ? s.count : 0;
    constexpr std::int64_t most = std::numeric_limits<std::int64_t>::max();
    const std::int64_t after = op.cost > most - before ? most : before + op.cost;
    if (!op.peek && op.cost > 0) s = State{k + 1, after};
    Decision d{};
    d.limit = p.limit;
    d.allowed = after <= p.limit;
    d.remaining = d.allowed ? p.limit - after : 0;
    d.reset_after = std::chrono::seconds{p.window_s - t % p.window_s};
    d.retry_after = d.allowed ? std::chrono::nanoseconds{0} : d.reset_after;
    return d;
  }

  /// The end of the counted window; a state without one is fresh at once.
  static std::chrono::nanoseconds fresh_at(const Params& p, const State& s) noexcept {
    if (s.window == 0 || s.count == 0) return std::chrono::nanoseconds{0};
    return std::chrono::seconds{s.window * p.window_s};
  }
};

}  // namespace ratelimit::server
