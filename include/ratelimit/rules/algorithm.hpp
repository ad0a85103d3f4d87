#pragma once
/// @file rules/algorithm.hpp
/// Which algorithm a rule runs: a name from the registry (algorithms/registry.hpp).

#include <string_view>

#include "../algorithms/fixed_window.hpp"
#include "../algorithms/leaky_bucket.hpp"
#include "../algorithms/sliding_counter.hpp"
#include "../algorithms/sliding_log.hpp"
#include "../algorithms/token_bucket.hpp"

namespace ratelimit {

/// The algorithm a rule runs (the `algorithm` extension of a rules file): its registry name,
/// e.g. "token_bucket". The constants name the library's own algorithms; an algorithm added to
/// a registry is `Algorithm{MyModel::name}`.
/// Thread safety: a plain value; `name` points at the model's static name.
struct Algorithm {
  std::string_view name;

  static const Algorithm token_bucket;
  static const Algorithm leaky_bucket;
  static const Algorithm fixed_window;
  static const Algorithm sliding_log;
  static const Algorithm sliding_counter;

  friend constexpr bool operator==(Algorithm a, Algorithm b) noexcept { return a.name == b.name; }
};

inline constexpr Algorithm Algorithm::token_bucket{TokenBucketModel::name};
inline constexpr Algorithm Algorithm::leaky_bucket{LeakyBucketModel::name};
inline constexpr Algorithm Algorithm::fixed_window{FixedWindowModel::name};
inline constexpr Algorithm Algorithm::sliding_log{SlidingLogModel::name};
inline constexpr Algorithm Algorithm::sliding_counter{SlidingCounterModel::name};

/// The name used in rules files: "sliding_counter", "token_bucket", ...
/// Thread safety: pure.
constexpr std::string_view algorithm_name(Algorithm a) noexcept { return a.name; }

}  // namespace ratelimit
