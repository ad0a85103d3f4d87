#pragma once
/// @file go_keys.hpp
/// The Go window's counters under the reference's own keys (envoyproxy/ratelimit,
/// src/limiter/cache_key.go): what every storage shares, so that the server and the Go service
/// count on the same keys with the same values.

#include <chrono>
#include <cstdint>
#include <random>
#include <string>

#include <ratelimit/core/decision.hpp>
#include <ratelimit/core/storage.hpp>

#include "counters.hpp"
#include "go_window.hpp"

namespace ratelimit::server::detail {

/// Whether `hit` is counted under its Go key (outside `count_all`): the Go window with a key.
inline bool uses_go_key(const Hit& hit) noexcept {
  return hit.algorithm.empty() && !hit.go_key.empty();
}

/// Unix seconds of `now`, 0 before the epoch (the reference's time source has whole seconds).
inline std::int64_t unix_seconds(std::chrono::nanoseconds now) noexcept {
  return now.count() < 0 ? 0 : now.count() / 1'000'000'000;
}

/// The reference's key: prefix, go_key, then the window's start (now / W * W) in decimal. No
/// unit is in it: two units whose windows start at the same second share the key.
inline std::string go_counter_key(const GoKeyOptions& go, const Hit& hit, std::int64_t now_s) {
  std::string key = go.prefix;
  key += hit.go_key;
  key += std::to_string(now_s / hit.window_s * hit.window_s);
  return key;
}

/// The expiry the reference gives a key on every hit: the window (UnitToDivider) plus a
/// random [0, jitter_max_s) seconds. Thread safety: safe from many threads (one generator per
/// thread).
inline std::int64_t go_expiry_s(const GoKeyOptions& go, std::int64_t window_s) {
  if (go.jitter_max_s <= 0) return window_s;
  thread_local std::mt19937_64 random{std::random_device{}()};
  return window_s + std::uniform_int_distribution<std::int64_t>(0, go.jitter_max_s - 1)(random);
}

/// The result on a counter that held `before` hits and now holds `before + hits` (or, for a
/// read, `before`): the decision as the reference's base_limiter.go makes it (over iff after >
/// limit) and that count after, beside it. A negative `before` is taken as 0.
inline HitResult go_result(const Hit& hit, std::int64_t before, std::chrono::nanoseconds now) {
  const std::int64_t t = unix_seconds(now);
  const std::int64_t start = t - t % hit.window_s;
  GoWindowModel::State s{start + 1, before < 0 ? 0 : before, start + hit.window_s};
  const GoWindowModel::Params p{hit.limit, hit.window_s, hit.hits <= 0, true};
  const std::int64_t from = s.count;
  HitResult out;
  out.decision = GoWindowModel::apply(p, s, now, Operation{hit.hits > 0 ? hit.hits : 1, false});
  // The model saturates the count at INT64_MAX as well; a read leaves it as it was.
  out.count = hit.hits > 0 && from <= INT64_MAX - hit.hits ? from + hit.hits
              : hit.hits > 0                               ? INT64_MAX
                                                           : from;
  return out;
}

}  // namespace ratelimit::server::detail
