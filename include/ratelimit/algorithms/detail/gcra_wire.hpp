#pragma once
/// @file algorithms/detail/gcra_wire.hpp
/// The token and leaky buckets on the wire (see core/wire.hpp): one Redis hash {at, last}.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../../core/decision.hpp"
#include "../../core/detail/arith.hpp"
#include "../../core/detail/decimal.hpp"
#include "../../core/detail/validate.hpp"
#include "../../core/storage.hpp"
#include "../../core/wire.hpp"
#include "gcra.hpp"

namespace ratelimit::detail {

/// `M` is the model (its `apply` rebuilds the Decision); `Shaping` selects the leaky bucket's
/// max_wait bound (ARGV[7]) and script.
template <class M, bool Shaping>
struct GcraWire {
  static constexpr std::array<std::string_view, 1> key_suffixes{""};
  static constexpr bool cheap_to_save = true;

  /// The per-binding arguments, formatted once.
  struct BoundArgs {
    std::string count;
    std::string full;  ///< limit x period
  };

  /// Checks what the exact arithmetic relies on (the core range: limit and count in
  /// [1, 10^9], at most one unit per ns, a whole refill within 100 years).
  static BoundArgs bound_args(const GcraParams& p) {
    check_count("params.limit", p.limit);
    check_count("params.count", p.count);
    if (p.period < 1 || p.period > max_period.count())
      invalid("params.period (ns)", p.period, "must be in [1, 31622400000000000] ns");
    if (p.count > p.period) invalid("params.count", p.count, "more than one unit per nanosecond");
    if (ceil_div(i128{p.limit} * p.period, p.count) > max_refill_time.count())
      invalid("params.limit", p.limit,
              "a whole refill (limit x period / count) would take more than 100 years");
    return {to_decimal(p.count), to_decimal(i128{p.limit} * p.period)};
  }

  static void args(const BoundArgs& f, const GcraParams& p, std::string now_us, const Operation& op,
                   const std::string& margin_ms, std::vector<std::string>& out) {
    out.push_back(std::move(now_us));
    out.push_back(f.count);
    out.push_back(to_decimal(i128{op.cost} * p.period));
    out.push_back(f.full);
    out.push_back(op.peek ? "1" : "0");
    out.push_back(margin_ms);
    if constexpr (Shaping) {
      if (op.max_wait == Decision::never)
        out.emplace_back();
      else if (op.max_wait.count() < 0)
        out.emplace_back("-");
      else
        out.push_back(to_decimal(i128{op.max_wait.count()} * p.count));
    }
  }

  /// Reply: {admitted, t_us, at}; the model is evaluated on the state the script saw.
  static std::optional<Decision> decode(const GcraParams& p, std::span<const i128> r,
                                        const Operation& op) {
    const auto admitted = wire_reply_admitted(r, 0);
    const auto t = wire_reply_time_ns(r, 1);
    if (!admitted || !t || r.size() < 3 || r[2] < 0 || r[2] / p.count > i128{INT64_MAX})
      return std::nullopt;
    GcraState s{static_cast<std::int64_t>(r[2] / p.count),
                static_cast<std::int64_t>(r[2] % p.count), *t};
    const Decision d = M::apply(p, s, std::chrono::nanoseconds{*t}, op);
    if (d.allowed != *admitted) return std::nullopt;
    return d;
  }

  /// limit / divisor (at least 1) refilled at rate / divisor, exactly where it fits; the
  /// period saturates at 100 years for extreme divisors (a fallback only needs to be safe).
  static GcraParams fallback(const GcraParams& p, std::int64_t divisor) noexcept {
    if (divisor == 1) return p;
    const std::int64_t g = gcd(p.count, divisor);
    const std::int64_t count = p.count / g;
    i128 period = i128{p.period} * (divisor / g);
    if (period > max_refill_time.count()) period = max_refill_time.count();
    return make_gcra_params(std::max<std::int64_t>(1, p.limit / divisor), count,
                            std::chrono::nanoseconds{static_cast<std::int64_t>(period)});
  }
};

}  // namespace ratelimit::detail
