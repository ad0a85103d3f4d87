#pragma once
/// @file algorithms/detail/window.hpp
/// Parameters shared by the window algorithms.

#include <chrono>
#include <cstdint>

#include "../../core/detail/arith.hpp"
#include "../../core/detail/validate.hpp"
#include "../../core/rate.hpp"

namespace ratelimit::detail {

/// N requests per window of W ns.
struct WindowParams {
  std::int64_t limit;   ///< N (requests)
  std::int64_t window;  ///< W (ns)
  /// Division by W as a multiply (computed from it on construction).
  Divisor per_window{window};

  /// floor(t / W): the index of the window holding t (ns, >= 0, as every clock reading).
  constexpr std::int64_t window_of(std::int64_t t) const noexcept {
    if (t >= 0) [[likely]]
      return static_cast<std::int64_t>(per_window.quot(static_cast<std::uint64_t>(t)));
    return window_before_epoch(t);
  }

  friend constexpr bool operator==(const WindowParams&, const WindowParams&) = default;

 private:
  /// floor(t / W) for t < 0, out of line: inline, its 128-bit division made the decision too
  /// large for the compiler to inline into the table's lookup.
  [[gnu::cold, gnu::noinline]] std::int64_t window_before_epoch(std::int64_t t) const noexcept {
    return static_cast<std::int64_t>(floor_div(t, window));
  }
};

inline WindowParams make_window_params(const Rate& r) {
  check_rate("rate", r);
  return {r.count, r.period.count()};
}

/// Checks parameters given directly (a binding's `bind` or `with_params`, in process or on
/// Redis): N in [1, 10^9], which keeps every count in 32 bits (SlidingCounterModel::State),
/// and W in [1 ms, 366 days], as `make_window_params` allows. Throws `std::invalid_argument`
/// naming the field and the value.
inline void check_window_params(const WindowParams& p) {
  check_count("params.limit", p.limit);
  if (p.window < min_period.count() || p.window > max_period.count())
    invalid("params.window (ns)", p.window,
            "must be in [1 ms, 366 days] = [1000000, 31622400000000000] ns");
}

}  // namespace ratelimit::detail
