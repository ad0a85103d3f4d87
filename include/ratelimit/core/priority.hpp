#pragma once
/// @file core/priority.hpp
/// Load shedding by priority: a request's `Priority`, and the `Reserves` that keep part of a limit
/// back from the lower priorities, so that as a limit fills the least important traffic is denied
/// first (Stripe's fleet-wide reserve for critical requests is the model).
///
/// A reserve is an admission threshold, never a separate counter: a request of priority p is
/// decided exactly as if the limit were reduced by p's reserve (the burst tolerance of a bucket,
/// the count a window allows), on the same key and state as every other priority. So the
/// arithmetic is each algorithm's own, exact and identical on every storage (a Redis script
/// receives the reduced limit like any per-call limit), and `retry_after` is p's own.

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "detail/arith.hpp"

namespace ratelimit {

/// How important a request is. Lower priorities are shed first.
/// Thread safety: a plain value.
enum class Priority : std::uint8_t {
  critical = 0,   ///< never held back: may use the whole limit
  normal = 1,     ///< held back by `Reserves::normal`
  sheddable = 2,  ///< held back by `Reserves::sheddable`: the first to be denied
};

/// The share of a limit each priority may not touch, as fractions in [0, 1], with
/// normal <= sheddable (a lower priority never gets more than a higher one). Critical requests
/// may always use the whole limit.
///
/// Exact: a fraction f is taken in millionths, ppm = round(f x 10^6), and on a limit of L units
/// (capacity, queue size or window count) the reserve is R = ceil(L x ppm / 10^6) whole units;
/// a request of that priority is admitted only if at least R units are left after it. For
/// example sheddable = 0.4 on a bucket of 10 tokens: sheddable requests stop when 4 tokens are
/// left. A reserve of the whole limit (R = L) denies that priority always (`retry_after` never).
/// All zero (the default) decides every priority as today, bit for bit.
/// Thread safety: a plain value.
struct Reserves {
  double normal = 0.0;     ///< share kept back from normal requests, [0, 1]
  double sheddable = 0.0;  ///< share kept back from sheddable requests, [normal, 1]
};

namespace detail {

/// Millionths of `fraction`, named `field` in errors: throws `std::invalid_argument` unless
/// it is a number in [0, 1].
inline std::int64_t reserve_ppm(std::string_view field, double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0))  // NaN fails both
    throw std::invalid_argument(std::string(field) + " = " + std::to_string(fraction) +
                                ": must be a fraction of the limit in [0, 1]");
  return std::llround(fraction * 1e6);
}

/// The reserves in millionths, index = Priority; throws `std::invalid_argument` naming the field
/// and value when one is outside [0, 1] or sheddable < normal.
struct ReservePpm {
  std::int64_t of[3] = {0, 0, 0};
};
inline ReservePpm check_reserves(const Reserves& r) {
  ReservePpm out;
  out.of[1] = reserve_ppm("reserves.normal", r.normal);
  out.of[2] = reserve_ppm("reserves.sheddable", r.sheddable);
  if (out.of[2] < out.of[1])
    throw std::invalid_argument("reserves.sheddable = " + std::to_string(r.sheddable) +
                                ": must be >= reserves.normal = " + std::to_string(r.normal) +
                                " (a lower priority never gets more of the limit)");
  return out;
}

/// R = ceil(limit x ppm / 10^6) units, for limit in [1, 10^9] and ppm in [0, 10^6].
constexpr std::int64_t reserve_units(std::int64_t limit, std::int64_t ppm) noexcept {
  return static_cast<std::int64_t>(ceil_div(i128{limit} * ppm, 1'000'000));
}

/// A model's parameters as priority `ppm` sees them: the limit reduced by its reserve; the
/// limit is 0 when nothing is left to that priority (never admitted). Needs `Params::limit`.
template <class P>
constexpr P reserved_params(P p, std::int64_t ppm) noexcept {
  p.limit -= reserve_units(p.limit, ppm);
  return p;
}

/// True when `a` and `b` are the same parameters but for their limit: a key's state under one
/// decides exactly under the other (every model's state counts units or time, never the limit).
template <class P>
constexpr bool same_but_limit(const P& a, P b) noexcept {
  if constexpr (requires { b.limit = a.limit; }) {
    b.limit = a.limit;
    return a == b;
  } else {
    return a == b;
  }
}

}  // namespace detail
}  // namespace ratelimit
