#pragma once
/// @file algorithms/detail/window.hpp
/// Parameters shared by the window algorithms.

#include <chrono>
#include <cstdint>

#include "../../core/decision.hpp"
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

/// A count `c` against a limit `limit` until its period ends in `to_end` (ns, > 0): the decision
/// for `n` more (the fixed window; the calendar quota, whose periods are calendar days, weeks or
/// months). Admitted iff c + n <= limit; then, unless `peek`, `store(c + n)` writes the new
/// count (a callback rather than a flag the caller tests again: the decision stays one chain of
/// branches). The fields describe the count that leaves: remaining = max(0, limit - count) (a
/// count above the limit was spent under a higher one), reset_after = to_end if it is above 0.
template <class Store>
constexpr Decision count_decision(std::int64_t limit, std::int64_t c, std::int64_t n,
                                  std::chrono::nanoseconds to_end, bool peek, Store&& store) {
  Decision d{};
  d.limit = limit;
  d.remaining = c < limit ? limit - c : 0;
  d.reset_after = c > 0 ? to_end : std::chrono::nanoseconds{0};
  if (n > limit) {
    d.retry_after = Decision::never;
  } else if (c + n > limit) {
    d.retry_after = to_end;
  } else {
    d.allowed = true;
    if (!peek) {
      store(c + n);
      d.remaining = limit - (c + n);
      d.reset_after = to_end;
    }
  }
  return d;
}

}  // namespace ratelimit::detail
