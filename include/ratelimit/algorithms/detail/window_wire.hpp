#pragma once
/// @file algorithms/detail/window_wire.hpp
/// The window algorithms on the wire (see core/wire.hpp): their fallback share, and the fixed
/// window's and sliding counter's one script (lua/window.lua) and decoder.

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
#include "../../core/detail/validate.hpp"
#include "../../core/storage.hpp"
#include "../../core/wire.hpp"
#include "../../lua/window.hpp"
#include "window.hpp"

namespace ratelimit::detail {

/// What every window algorithm shares on the wire: one Redis key per client key, and the
/// fallback share.
struct WindowWireBase {
  /// The mode argument of a refund ('r' and the take's time in us) or a penalty ('p'), where a
  /// take sends its peek flag ('0' or '1').
  [[gnu::cold]] static std::string adjust_mode(const Operation& op) {
    if (op.kind == Operation::Kind::penalty) return "p";
    return "r" + std::to_string(wire_time_us(op.taken_at));
  }

  /// limit / divisor (at least 1) per window.
  static WindowParams fallback(const WindowParams& p, std::int64_t divisor) noexcept {
    return {std::max<std::int64_t>(1, p.limit / divisor), p.window};
  }
};

/// The fixed window (`Sliding` false) and the sliding counter (true), model `M`: one Redis
/// string {last, cur, prev} per client key, decided by lua/window.lua in whole microseconds.
template <class M, bool Sliding>
struct WindowWire : WindowWireBase {
  static constexpr std::string_view lua = lua::window;
  static constexpr std::string_view key_tag = Sliding ? "sc" : "fw";

  struct BoundArgs {
    std::string window_us;
    std::string limit;
  };
  /// The core range, and a whole number of microseconds: the script's time unit, in which every
  /// window boundary is then exact (a rules file's units, and any Rate written in ms, s, min,
  /// h or days, are).
  static BoundArgs bound_args(const WindowParams& p) {
    check_window_params(p);
    if (p.window % 1000 != 0)
      invalid("params.window (ns)", p.window,
              "must be a whole number of microseconds on Redis (the scripts' time unit)");
    return {std::to_string(p.window / 1000), std::to_string(p.limit)};
  }
  static void args(const BoundArgs& f, const WindowParams& p, std::string now_us,
                   const Operation& op, const std::string& margin_ms,
                   std::vector<std::string>& out) {
    out.push_back(std::move(now_us));
    out.push_back(f.window_us);
    // Any cost above N is denied alike; N + 1 keeps the script's numbers small. A refund or a
    // penalty counts at most 2N (the cap of a count).
    const bool take = op.kind == Operation::Kind::spend;
    out.push_back(std::to_string(std::min(op.cost, take ? p.limit + 1 : 2 * p.limit)));
    out.push_back(f.limit);
    if (take) [[likely]]
      out.push_back(op.peek ? "1" : "0");
    else
      out.push_back(adjust_mode(op));
    out.push_back(margin_ms);
    out.emplace_back(Sliding ? "s" : "f");
  }

  /// Reply: {admitted, t_us, c, p} as seen from t's window: the state that gives those counts at
  /// t, which decides every later time exactly as the key's (see WireState). A count may exceed
  /// this N (spent under a higher limit: a reload that lowered it, or instances of a rolling
  /// deploy that disagree), never the largest N (each admission keeps c + n <= its N).
  static std::optional<WireState<typename M::State>> state(const WindowParams&,
                                                           std::span<const i128> r,
                                                           const Operation&) {
    const auto t = wire_reply_time_ns(r, 1);
    // A penalty may count up to twice the largest N.
    if (!t || r.size() < 4 || r[2] < 0 || r[2] > 2 * max_count || r[3] < 0 ||
        r[3] > (Sliding ? 2 * max_count : 0))
      return std::nullopt;
    typename M::State s;
    if constexpr (Sliding)
      s = {*t, static_cast<std::uint32_t>(r[2]), static_cast<std::uint32_t>(r[3])};
    else
      s = {*t, static_cast<std::int64_t>(r[2])};
    return WireState<typename M::State>{s, std::chrono::nanoseconds{*t}};
  }

  /// The model evaluated on that state.
  static std::optional<Decision> decode(const WindowParams& p, std::span<const i128> r,
                                        const Operation& op) {
    const auto admitted = wire_reply_admitted(r, 0);
    auto s = state(p, r, op);
    if (!admitted || !s) return std::nullopt;
    const Decision d = M::apply(p, s->state, s->time, op);
    // A refund or a penalty always applies (reply 1) and reports what a peek would after it.
    if (op.kind != Operation::Kind::spend ? !*admitted : d.allowed != *admitted)
      return std::nullopt;
    return d;
  }
};

}  // namespace ratelimit::detail
