#pragma once
/// @file anchored_window.hpp
/// A test-only sixth algorithm, added the way the registry says an algorithm is added: its own
/// model header (this file), its own script (support/lua/anchored_window.lua, embedded by
/// cmake/embed_lua.cmake into the build tree as <rltest_lua/anchored_window.hpp>) and one
/// registry line (`TestAlgorithms` below). No dispatch site of the library is edited for it.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <ratelimit/algorithms/registry.hpp>
#include <ratelimit/core/decision.hpp>
#include <ratelimit/core/detail/validate.hpp>
#include <ratelimit/core/rate.hpp>
#include <ratelimit/core/storage.hpp>
#include <ratelimit/core/wire.hpp>
#include <rltest_lua/anchored_window.hpp>

namespace rltest {

/// At most N units per window of W that starts at the key's first admitted request after the
/// previous window ended. Decision fields: limit = N; remaining = N - c; retry_after and
/// reset_after = the window's end - t (0 reset_after for an empty window).
struct AnchoredWindowModel {
  static constexpr std::string_view name = "anchored_window";
  static constexpr int wire_id = 6;
  struct Params {
    std::int64_t limit;      ///< N
    std::int64_t window_us;  ///< W, whole microseconds (the script's unit)
  };
  struct State {
    std::int64_t start = 0;  ///< ns: the window's start
    std::int64_t count = 0;  ///< units admitted in it
    std::int64_t last = 0;   ///< ns: latest admitted time
  };

  static Params from_rate(const ratelimit::Rate& r) {
    ratelimit::detail::check_rate("rate", r);
    if (r.period.count() % 1000 != 0)
      ratelimit::detail::invalid("rate.period (ns)", r.period.count(),
                                 "must be whole microseconds");
    return {r.count, r.period.count() / 1000};
  }

  static ratelimit::Decision apply(const Params& p, State& s, std::chrono::nanoseconds now,
                                   const ratelimit::Operation& op) noexcept {
    const std::int64_t t = now.count() > s.last ? now.count() : s.last;
    const std::int64_t end = s.start + p.window_us * 1000;
    const std::int64_t c = s.count > 0 && t < end ? s.count : 0;
    ratelimit::Decision d{};
    d.limit = p.limit;
    d.remaining = c < p.limit ? p.limit - c : 0;  // c > N: counted under a higher limit
    d.reset_after = std::chrono::nanoseconds{c > 0 ? end - t : 0};
    if (op.cost > p.limit) {
      d.retry_after = ratelimit::Decision::never;
      return d;
    }
    if (c + op.cost > p.limit) {
      d.retry_after = std::chrono::nanoseconds{end - t};
      return d;
    }
    d.allowed = true;
    if (op.peek) return d;
    const std::int64_t start = c == 0 ? t : s.start;
    s = State{start, c + op.cost, t};
    d.remaining = p.limit - s.count;
    d.reset_after = std::chrono::nanoseconds{start + p.window_us * 1000 - t};
    return d;
  }

  static std::chrono::nanoseconds fresh_at(const Params& p, const State& s) noexcept {
    if (s.count == 0) return std::chrono::nanoseconds{s.last};
    return std::chrono::nanoseconds{std::max(s.last, s.start + p.window_us * 1000)};
  }

  /// Its Redis twin: support/lua/anchored_window.lua.
  struct Wire {
    static constexpr std::string_view lua = rltest::lua::anchored_window;
    static constexpr std::string_view key_tag = "aw";
    struct BoundArgs {
      std::string window_us;
      std::string limit;
    };
    static BoundArgs bound_args(const Params& p) {
      ratelimit::detail::check_count("params.limit", p.limit);
      return {std::to_string(p.window_us), std::to_string(p.limit)};
    }
    static void args(const BoundArgs& b, const Params& p, std::string now_us,
                     const ratelimit::Operation& op, const std::string& margin_ms,
                     std::vector<std::string>& out) {
      out.push_back(std::move(now_us));
      out.push_back(b.window_us);
      out.push_back(std::to_string(std::min(op.cost, p.limit + 1)));
      out.push_back(b.limit);
      out.push_back(op.peek ? "1" : "0");
      out.push_back(margin_ms);
    }
    /// Reply: {admitted, t_us, start_us, c}.
    static std::optional<ratelimit::Decision> decode(const Params& p,
                                                     std::span<const ratelimit::detail::i128> r,
                                                     const ratelimit::Operation& op) {
      const auto admitted = ratelimit::detail::wire_reply_admitted(r, 0);
      const auto t = ratelimit::detail::wire_reply_time_ns(r, 1);
      const auto start = ratelimit::detail::wire_reply_time_ns(r, 2);
      // c may exceed this N (counted under a higher one), never the largest N.
      if (!admitted || !t || !start || r.size() < 4 || r[3] < 0 ||
          r[3] > ratelimit::detail::max_count)
        return std::nullopt;
      State s{*start, static_cast<std::int64_t>(r[3]), *t};
      const ratelimit::Decision d = apply(p, s, std::chrono::nanoseconds{*t}, op);
      if (d.allowed != *admitted) return std::nullopt;
      return d;
    }
    static Params fallback(const Params& p, std::int64_t divisor) noexcept {
      return {p.limit / divisor > 0 ? p.limit / divisor : 1, p.window_us};
    }
  };
};

/// The library's registry plus the test algorithm: the one line that adds it.
using TestAlgorithms = ratelimit::Algorithms::with<AnchoredWindowModel>;

}  // namespace rltest
