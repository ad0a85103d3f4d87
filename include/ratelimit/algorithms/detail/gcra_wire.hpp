#pragma once
/// @file algorithms/detail/gcra_wire.hpp
/// The token and leaky buckets on the wire (see core/wire.hpp): lua/gcra.lua.

#include <algorithm>
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
#include "../../lua/gcra.hpp"
#include "gcra.hpp"

namespace ratelimit::detail {

/// `M` is the model (its `apply` rebuilds the Decision); `Shaping` selects the leaky bucket's
/// max_wait bound. Both run lua/gcra.lua: one Redis string per client key, its timestamp kept
/// as whole us plus a remainder in 1/count ns (see the script's header).
template <class M, bool Shaping>
struct GcraWire {
  static constexpr std::string_view lua = lua::gcra;
  static constexpr std::string_view key_tag = Shaping ? "lb" : "tb";

  /// The per-binding arguments, formatted once.
  struct BoundArgs {
    std::string unit;  ///< U = 1000 x count: one us in 1/count ns
  };

  /// Checks what the exact arithmetic relies on (the core range: limit and count in
  /// [1, 10^9], at most one unit per ns, a whole refill within 100 years).
  static BoundArgs bound_args(const GcraParams& p) {
    check_gcra_params(p);
    if (p.period > max_period.count())
      invalid("params.period (ns)", p.period, "must be in [1, 31622400000000000] ns");
    if (ceil_div(i128{p.limit} * p.period, p.count) > max_refill_time.count())
      invalid("params.limit", p.limit,
              "a whole refill (limit x period / count) would take more than 100 years");
    return {std::to_string(1000 * p.count)};
  }

  /// Appends `v` (in 1/count ns, 0 <= v <= a whole refill) as the pair (us, remainder).
  static void push_pair(i128 v, const GcraParams& p, std::vector<std::string>& out) {
    const auto [us, rem] = divmod(v, i128{1000} * p.count);
    out.push_back(to_decimal(us));
    out.push_back(to_decimal(rem));
  }

  static void args(const BoundArgs& f, const GcraParams& p, std::string now_us, const Operation& op,
                   const std::string& margin_ms, std::vector<std::string>& out) {
    out.push_back(std::move(now_us));
    out.push_back(f.unit);
    if (op.kind != Operation::Kind::spend) [[unlikely]] {
      if (op.kind == Operation::Kind::reserve)
        args_reserve(p, op, margin_ms, out);
      else
        args_adjust(p, op, margin_ms, out);
      return;
    }
    if (op.cost > p.limit) {  // never fits: a negative slack denies whatever the backlog
      out.insert(out.end(), {"0", "0", "-1", "0"});
    } else {
      push_pair(i128{op.cost} * p.period, p, out);
      push_pair(i128{p.limit - op.cost} * p.period, p, out);
    }
    out.push_back(op.peek ? "1" : "0");
    out.push_back(margin_ms);
    if (!Shaping || op.max_wait == Decision::never) {
      out.insert(out.end(), {"", ""});
    } else if (op.max_wait.count() < 0) {
      out.insert(out.end(), {"-1", "0"});
    } else {
      // delay = ceil(D / count) ns <= max_wait  <=>  D <= max_wait x count (in 1/count ns). A
      // backlog never exceeds a whole refill, so longer waits are capped there (and stay
      // below 2^53 us in the script).
      const i128 cap = i128{max_refill_time.count() + 1} * p.count;
      push_pair(std::min<i128>(i128{op.max_wait.count()} * p.count, cap), p, out);
    }
  }

  /// A refund's or a penalty's arguments after now_us and U: the units' worth (at most twice
  /// the limit), then for a penalty the backlog's cap (`penalty_cap`), for a refund
  /// nothing (0 0); the mode 'p', or 'r' and the take's time in us; the margin; no wait bound.
  [[gnu::cold]] static void args_adjust(const GcraParams& p, const Operation& op,
                                        const std::string& margin_ms,
                                        std::vector<std::string>& out) {
    push_pair(i128{adjust_units(op.cost, p.limit)} * p.period, p, out);
    if (op.kind == Operation::Kind::penalty) {
      push_pair(penalty_cap(p), p, out);
      out.emplace_back("p");
    } else {
      out.insert(out.end(), {"0", "0"});
      out.push_back("r" + std::to_string(wire_time_us(op.taken_at)));
    }
    out.push_back(margin_ms);
    out.insert(out.end(), {"", ""});
  }

  /// A reservation's arguments after now_us and U (detail::gcra_reserve), as a take's (mode
  /// '0': the script's test D <= slack, D <= wait, then at <- max(at, t) + n): the slack is
  /// what the debt allows, `penalty_cap` - n x period, and the wait bound is w <= max_wait x
  /// count in terms of D: D <= max_wait x count + (limit - n) x period for the token bucket,
  /// D <= max_wait x count for the leaky bucket. Bounds above the cap are sent as the cap (D
  /// never passes it), which keeps them below 2^53 us.
  [[gnu::cold]] static void args_reserve(const GcraParams& p, const Operation& op,
                                         const std::string& margin_ms,
                                         std::vector<std::string>& out) {
    if (op.cost > p.limit) {  // never reserved: a negative slack refuses whatever the backlog
      out.insert(out.end(), {"0", "0", "-1", "0"});
    } else {
      push_pair(i128{op.cost} * p.period, p, out);
      push_pair(penalty_cap(p) - i128{op.cost} * p.period, p, out);
    }
    out.push_back("0");
    out.push_back(margin_ms);
    if (op.max_wait == Decision::never) {
      out.insert(out.end(), {"", ""});
    } else if (op.max_wait.count() < 0) {  // refused, as the model does
      out.insert(out.end(), {"-1", "0"});
    } else {
      i128 bound = i128{op.max_wait.count()} * p.count;
      if (!Shaping) bound += i128{p.limit - std::min(op.cost, p.limit)} * p.period;
      push_pair(std::min(bound, penalty_cap(p)), p, out);
    }
  }

  /// Reply: {admitted, t_us, at_us, at_rem}: the key's whole state at t (see WireState). The
  /// script has already rounded a remainder written under another count into this U, so one
  /// out of range here is a protocol error.
  static std::optional<WireState<GcraState>> state(const GcraParams& p, std::span<const i128> r,
                                                   const Operation&) {
    const auto t = wire_reply_time_ns(r, 1);
    constexpr i128 max_at_us = (max_wire_time_ns + max_refill_time.count()) / 1000 + 1;
    if (!t || r.size() < 4 || r[2] < 0 || r[2] > max_at_us || r[3] < 0 ||
        r[3] >= i128{1000} * p.count)
      return std::nullopt;
    auto at = static_cast<std::int64_t>(r[2] * 1000 + r[3] / p.count);
    auto frac = static_cast<std::int64_t>(r[3] % p.count);
    // A bucket full before t (at < t) is full at t: the same decisions at every time from t
    // on, and GcraState keeps at >= its latest time.
    if (at < *t) {
      at = *t;
      frac = 0;
    }
    GcraState s;
    s.set(at, frac, *t, p.frac_bits);
    return WireState<GcraState>{s, std::chrono::nanoseconds{*t}};
  }

  /// The model evaluated on the state the script saw.
  static std::optional<Decision> decode(const GcraParams& p, std::span<const i128> r,
                                        const Operation& op) {
    const auto admitted = wire_reply_admitted(r, 0);
    auto s = state(p, r, op);
    if (!admitted || !s) return std::nullopt;
    const Decision d = M::apply(p, s->state, s->time, op);
    // A refund or a penalty always applies (reply 1) and reports what a peek would after it.
    const bool adjusts = op.kind == Operation::Kind::refund || op.kind == Operation::Kind::penalty;
    if (adjusts ? !*admitted : d.allowed != *admitted) return std::nullopt;
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
