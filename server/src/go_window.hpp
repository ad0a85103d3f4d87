#pragma once
/// @file go_window.hpp
/// The counting of Envoy's reference rate limit service (envoyproxy/ratelimit, Go), as a model of
/// this library's registry: a fixed window aligned to the Unix epoch in whole seconds, one
/// counter per window that every hit increments, admitted or not (the reference runs `INCRBY key
/// hits` and compares the result with the limit: src/redis/fixed_cache_impl.go and
/// src/limiter/base_limiter.go). The library's own fixed window counts only admitted requests.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <ratelimit/algorithms/registry.hpp>
#include <ratelimit/core/decision.hpp>
#include <ratelimit/core/detail/arith.hpp>
#include <ratelimit/core/storage.hpp>
#include <ratelimit/core/wire.hpp>
#include <server_lua/go_window.hpp>

namespace ratelimit::server {

/// N hits per window of W whole seconds, windows [k*W, (k+1)*W) of Unix seconds (the reference
/// truncates the time to seconds, src/utils/utilities.go CalculateReset). A hit of cost c moves
/// the count from n to n + c whatever the outcome; it is over the limit iff n + c > N. A peek
/// decides c hits and changes nothing (the library's dry run, as `decide_all` makes one). A
/// read (`Params::read`: the reference's `INCRBY key 0` for a descriptor's hits_addend of 0)
/// is c = 0 whatever the operation's cost: over iff n > N. With `count_denied` false only an
/// admitted hit is counted.
/// Decision fields: limit = N; remaining = max(0, N - (n + c)); reset_after =
/// retry_after (when over) = the window's end - now, in whole seconds as the reference
/// reports it. Thread safety: pure functions.
struct GoWindowModel {
  static constexpr std::string_view name = "go_fixed_window";
  /// Its id inside a composed Redis script: above the library's and its tests' ids.
  static constexpr int wire_id = 32;
  struct Params {
    std::int64_t limit = 0;     ///< N, 0 to 2^32 - 1 (the wire's uint32)
    std::int64_t window_s = 1;  ///< W in seconds, >= 1
    /// Every operation is a read (c = 0): the storages take no cost below 1, so a read is
    /// a binding of its own on the same counter.
    bool read = false;
    /// false: only admitted hits are counted (the server's all-or-nothing option, where a
    /// call over its limits counts nothing); true, the reference's: every hit.
    bool count_denied = true;
  };
  /// The counted window is named by its start, not by k: the reference's key carries the
  /// window's start and no unit, so two units whose windows start at the same second (a minute
  /// and a day at midnight) count on one key there, and on one state here when the storage keys
  /// them alike (the Go keys of go_keys.hpp).
  struct State {
    std::int64_t window = 0;  ///< the counted window's start (Unix seconds) + 1; 0 for none
    std::int64_t count = 0;   ///< hits in that window
    std::int64_t end_s = 0;   ///< when the longest window counted on this state ends
  };

  /// The window of a rules file's unit, as the reference's UnitToDivider
  /// (src/utils/utilities.go): second 1, minute 60, hour 3600, day 86400, week 7 days, month
  /// 30 days, year 365 days, in seconds; 0 for another name.
  static constexpr std::int64_t divider(std::string_view unit) noexcept {
    constexpr std::int64_t day = 86400;
    if (unit == "second") return 1;
    if (unit == "minute") return 60;
    if (unit == "hour") return 3600;
    if (unit == "day") return day;
    if (unit == "week") return 7 * day;
    if (unit == "month") return 30 * day;
    if (unit == "year") return 365 * day;
    return 0;
  }

  /// A limit given as a rate: N per period, the period in whole seconds (rounded up, >= 1).
  static Params from_rate(const Rate& r) {
    const std::int64_t ns = r.period.count();
    return {r.count, std::max<std::int64_t>(1, (ns + 999'999'999) / 1'000'000'000)};
  }

  /// A rules file's limit: requests_per_unit per the unit's divider. Throws
  /// `std::invalid_argument` naming the field for a time zone or first day (the reference's
  /// windows are aligned to the Unix epoch: they have neither).
  static Params from_limit(const LimitSpec& spec) {
    if (!spec.time_zone.empty())
      throw std::invalid_argument("rate_limit.time_zone = \"" + std::string(spec.time_zone) +
                                  "\": Envoy's rate limit service's windows are aligned to the "
                                  "Unix epoch and take no time zone");
    if (!spec.first_day.empty())
      throw std::invalid_argument("rate_limit.first_day = \"" + std::string(spec.first_day) +
                                  "\": Envoy's rate limit service's weeks are aligned to the "
                                  "Unix epoch and take no first day");
    const std::int64_t w = divider(spec.unit);
    if (w == 0)
      throw std::invalid_argument("rate_limit.unit = \"" + std::string(spec.unit) +
                                  "\": not a unit of Envoy's rate limit service");
    return {spec.rate.count, w};
  }

  static Decision apply(const Params& p, State& s, std::chrono::nanoseconds now,
                        const Operation& op) noexcept {
    const std::int64_t t = now.count() < 0 ? 0 : now.count() / 1'000'000'000;
    const std::int64_t start = t - t % p.window_s;
    const bool same = s.window == start + 1;
    const std::int64_t before = same ? s.count : 0;
    constexpr std::int64_t most = std::numeric_limits<std::int64_t>::max();
    const std::int64_t cost = p.read || op.cost < 0 ? 0 : op.cost;
    const std::int64_t after = cost > most - before ? most : before + cost;
    Decision d{};
    d.limit = p.limit;
    d.allowed = after <= p.limit;
    if (cost > 0 && !op.peek && (d.allowed || p.count_denied))
      s = State{start + 1, after, std::max(same ? s.end_s : 0, start + p.window_s)};
    // A dry run reports the counter as it is, as the library's models do. The count itself
    // is not in the decision: the counters return it beside (counters.hpp, `Counted`).
    d.remaining = std::max<std::int64_t>(0, p.limit - (op.peek ? before : after));
    d.reset_after = std::chrono::seconds{p.window_s - t % p.window_s};
    d.retry_after = d.allowed ? std::chrono::nanoseconds{0} : d.reset_after;
    return d;
  }

  /// The end of the counted window (of the longest unit counted on it); a state without one is
  /// fresh at once. Not from `p`: bindings of several units may share a table (the Go keys).
  static std::chrono::nanoseconds fresh_at(const Params&, const State& s) noexcept {
    if (s.window == 0 || s.count == 0) return std::chrono::nanoseconds{0};
    return std::chrono::seconds{s.end_s};
  }

  /// Its Redis twin: server/lua/go_window.lua.
  struct Wire {
    static constexpr std::string_view lua = lua::go_window;
    static constexpr std::string_view key_tag = "gw";
    /// Hits sent per call at most: counts stay exact in a Lua number (below 2^53) for 2^13
    /// such calls in one window; a hit that large is over any uint32 limit either way.
    static constexpr std::int64_t max_hits = std::int64_t{1} << 40;
    struct BoundArgs {
      std::string window_s;
    };
    static BoundArgs bound_args(const Params& p) { return {std::to_string(p.window_s)}; }
    static void args(const BoundArgs& b, const Params& p, std::string now_us, const Operation& op,
                     const std::string& margin_ms, std::vector<std::string>& out) {
      out.push_back(std::move(now_us));
      out.push_back(b.window_s);
      out.push_back(p.read ? "0" : std::to_string(std::clamp<std::int64_t>(op.cost, 0, max_hits)));
      out.push_back(op.peek ? "1" : "0");
      out.push_back(margin_ms);
      out.push_back(std::to_string(p.limit));
      out.push_back(p.count_denied ? "1" : "0");
    }
    /// Reply: {admitted, t_us, count before}; the decision is the model's on that state.
    static std::optional<Decision> decode(const Params& p,
                                          std::span<const ratelimit::detail::i128> r,
                                          const Operation& op) {
      const auto t = ratelimit::detail::wire_reply_time_ns(r, 1);
      if (!t || r.size() < 3 || r[2] < 0 || r[2] > (ratelimit::detail::i128{1} << 53))
        return std::nullopt;
      const std::int64_t sec = *t / 1'000'000'000;
      const std::int64_t start = sec - sec % p.window_s;
      State s{start + 1, static_cast<std::int64_t>(r[2]), start + p.window_s};
      Operation o = op;
      o.cost = std::clamp<std::int64_t>(op.cost, 0, max_hits);
      return apply(p, s, std::chrono::nanoseconds{*t}, o);
    }
    static Params fallback(const Params& p, std::int64_t divisor) noexcept {
      return {p.limit / divisor > 0 ? p.limit / divisor : 1, p.window_s, p.read, p.count_denied};
    }
  };
};

}  // namespace ratelimit::server
