#pragma once
/// @file algorithms/detail/window.hpp
/// Parameters shared by the window algorithms.

#include <chrono>
#include <cstdint>

#include "../../core/detail/validate.hpp"
#include "../../core/rate.hpp"

namespace ratelimit::detail {

/// N requests per window of W ns.
struct WindowParams {
  std::int64_t limit;   ///< N (requests)
  std::int64_t window;  ///< W (ns)

  friend constexpr bool operator==(const WindowParams&, const WindowParams&) = default;
};

inline WindowParams make_window_params(const Rate& r) {
  check_rate("rate", r);
  return {r.count, r.period.count()};
}

}  // namespace ratelimit::detail
