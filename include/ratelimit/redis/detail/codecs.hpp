#pragma once
/// @file redis/detail/codecs.hpp
/// What the Redis storage needs to know about each algorithm model: its script, the keys and
/// arguments of one call, and how to turn the script's reply into the model's Decision.
///
/// Division of labour: the script (lua/<algorithm>.lua) runs the model's admission rule and
/// state update atomically, in exact big integers, and returns the few exact integers the
/// decision depends on (the decision time, the state it saw). The client then evaluates the
/// C++ model itself on that state: durations need 128-bit divisions that Lua's doubles cannot
/// do exactly, and reusing the model means the two storages cannot drift apart. The script's
/// admit bit must equal the model's; a mismatch is reported as a protocol failure.

#include <hiredis/hiredis.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../../algorithms/detail/gcra.hpp"
#include "../../algorithms/detail/window.hpp"
#include "../../algorithms/fixed_window.hpp"
#include "../../algorithms/leaky_bucket.hpp"
#include "../../algorithms/sliding_counter.hpp"
#include "../../algorithms/sliding_log.hpp"
#include "../../algorithms/token_bucket.hpp"
#include "../../core/clock.hpp"
#include "../../core/decision.hpp"
#include "../../core/detail/arith.hpp"
#include "../../core/detail/validate.hpp"
#include "../../core/storage.hpp"
#include "decimal.hpp"
#include "scripts.hpp"

namespace ratelimit::detail {

/// The decision time the scripts work in: whole microseconds (floor), clamped to the clock range
/// [0, 2^62 ns], so it stays below 2^53 (exact in a Lua number).
inline std::int64_t redis_time_us(std::chrono::nanoseconds now) noexcept {
  const std::int64_t t = std::clamp(now.count(), std::int64_t{0}, max_clock_time.count());
  return t / 1000;
}

/// Converts a script's decision time (us) to ns, rejecting what no script can return.
inline std::optional<std::int64_t> reply_time_ns(const redisReply& r) noexcept {
  const auto t_us = reply_int(r, 1);
  if (!t_us || *t_us < 0 || *t_us > max_clock_time.count() / 1000) return std::nullopt;
  return static_cast<std::int64_t>(*t_us * 1000);
}

inline std::optional<bool> reply_admitted(const redisReply& r) noexcept {
  const auto a = reply_int(r, 0);
  if (!a || (*a != 0 && *a != 1)) return std::nullopt;
  return *a == 1;
}

inline void check_window_params(const WindowParams& p) {
  check_count("params.limit", p.limit);
  if (p.window < min_period.count() || p.window > max_period.count())
    invalid("params.window (ns)", p.window,
            "must be in [1 ms, 366 days] = [1000000, 31622400000000000] ns");
}

inline WindowParams window_fallback(const WindowParams& p, std::int64_t divisor) noexcept {
  return {std::max<std::int64_t>(1, p.limit / divisor), p.window};
}

/// No script: `RedisStorage` cannot hold this model (StorageFor is false).
template <class M>
struct RedisModel;

/// The token and leaky buckets: one hash {at, last}. Shaping selects the leaky bucket's
/// max_wait bound (ARGV[7]).
template <class M, bool Shaping>
struct RedisGcraModel {
  static constexpr const RedisScript* script =
      Shaping ? &redis_scripts::leaky_bucket : &redis_scripts::token_bucket;
  static constexpr std::array<std::string_view, 1> key_suffixes{""};

  /// The per-binding arguments, formatted once.
  struct Fixed {
    std::string count;
    std::string full;  ///< limit x period
  };

  /// Checks what the exact arithmetic relies on (the core range: limit and count in
  /// [1, 10^9], at most one unit per ns, a whole refill within 100 years).
  static Fixed fix(const GcraParams& p) {
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

  static void args(const Fixed& f, const GcraParams& p, std::string now_us, const Operation& op,
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

  /// Reply: {admitted, t_us, at}.
  static std::optional<Decision> decide(const GcraParams& p, const redisReply& r,
                                        const Operation& op) {
    const auto admitted = reply_admitted(r);
    const auto t = reply_time_ns(r);
    const auto at = reply_int(r, 2);
    if (!admitted || !t || !at || *at < 0 || *at / p.count > max_int64()) return std::nullopt;
    GcraState s{static_cast<std::int64_t>(*at / p.count), static_cast<std::int64_t>(*at % p.count),
                *t};
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

  static constexpr i128 max_int64() noexcept { return i128{INT64_MAX}; }
};

template <>
struct RedisModel<TokenBucketModel> : RedisGcraModel<TokenBucketModel, false> {};
template <>
struct RedisModel<LeakyBucketModel> : RedisGcraModel<LeakyBucketModel, true> {};

/// What the fixed window and the sliding counter share: the same parameters, arguments and
/// fallback; only the script and the reply they decide from differ.
struct RedisWindowModel {
  static constexpr std::array<std::string_view, 1> key_suffixes{""};
  struct Fixed {
    std::string window;
    std::string limit;
  };
  static Fixed fix(const WindowParams& p) {
    check_window_params(p);
    return {std::to_string(p.window), std::to_string(p.limit)};
  }
  static void args(const Fixed& f, const WindowParams&, std::string now_us, const Operation& op,
                   const std::string& margin_ms, std::vector<std::string>& out) {
    out.push_back(std::move(now_us));
    out.push_back(f.window);
    out.push_back(std::to_string(op.cost));
    out.push_back(f.limit);
    out.push_back(op.peek ? "1" : "0");
    out.push_back(margin_ms);
  }
  static WindowParams fallback(const WindowParams& p, std::int64_t divisor) noexcept {
    return window_fallback(p, divisor);
  }
};

template <>
struct RedisModel<FixedWindowModel> : RedisWindowModel {
  static constexpr const RedisScript* script = &redis_scripts::fixed_window;
  /// Reply: {admitted, t_us, c}.
  static std::optional<Decision> decide(const WindowParams& p, const redisReply& r,
                                        const Operation& op) {
    const auto admitted = reply_admitted(r);
    const auto t = reply_time_ns(r);
    const auto c = reply_int(r, 2);
    if (!admitted || !t || !c || *c < 0 || *c > p.limit) return std::nullopt;
    FixedWindowModel::State s{*t, static_cast<std::int64_t>(*c)};
    const Decision d = FixedWindowModel::apply(p, s, std::chrono::nanoseconds{*t}, op);
    if (d.allowed != *admitted) return std::nullopt;
    return d;
  }
};

template <>
struct RedisModel<SlidingCounterModel> : RedisWindowModel {
  static constexpr const RedisScript* script = &redis_scripts::sliding_counter;
  /// Reply: {admitted, t_us, c, p} as seen from the decision's window.
  static std::optional<Decision> decide(const WindowParams& p, const redisReply& r,
                                        const Operation& op) {
    const auto admitted = reply_admitted(r);
    const auto t = reply_time_ns(r);
    const auto c = reply_int(r, 2);
    const auto prev = reply_int(r, 3);
    if (!admitted || !t || !c || !prev || *c < 0 || *c > p.limit || *prev < 0 || *prev > p.limit)
      return std::nullopt;
    SlidingCounterModel::State s{*t, static_cast<std::int64_t>(*c),
                                 static_cast<std::int64_t>(*prev)};
    const Decision d = SlidingCounterModel::apply(p, s, std::chrono::nanoseconds{*t}, op);
    if (d.allowed != *admitted) return std::nullopt;
    return d;
  }
};

template <>
struct RedisModel<SlidingLogModel> {
  static constexpr const RedisScript* script = &redis_scripts::sliding_log;
  static constexpr std::array<std::string_view, 2> key_suffixes{":log", ":meta"};
  struct Fixed {
    std::string reach_us;  ///< floor((W - 1) / 1000)
    std::string limit;
    std::string window;
  };
  static Fixed fix(const WindowParams& p) {
    check_window_params(p);
    return {std::to_string((p.window - 1) / 1000), std::to_string(p.limit),
            std::to_string(p.window)};
  }
  static void args(const Fixed& f, const WindowParams&, std::string now_us, const Operation& op,
                   const std::string& margin_ms, std::vector<std::string>& out) {
    out.push_back(std::move(now_us));
    out.push_back(f.reach_us);
    out.push_back(std::to_string(op.cost));
    out.push_back(f.limit);
    out.push_back(op.peek ? "1" : "0");
    out.push_back(margin_ms);
    out.push_back(f.window);
  }
  /// Reply: {admitted, t_us, live, newest_us, target_us}. The model is evaluated on the
  /// smallest log that decides alike: the unit a denial waits for, then the newest entry.
  static std::optional<Decision> decide(const WindowParams& p, const redisReply& r,
                                        const Operation& op) {
    const auto admitted = reply_admitted(r);
    const auto t = reply_time_ns(r);
    const auto live = reply_int(r, 2);
    const auto newest = reply_int(r, 3);
    const auto target = reply_int(r, 4);
    if (!admitted || !t || !live || !newest || !target || *live < 0 || *live > p.limit)
      return std::nullopt;
    SlidingLogModel::State s;
    s.last = *t;
    const std::int64_t units = static_cast<std::int64_t>(*live);
    if (units > 0) {
      if (*newest < 0 || *newest * 1000 > *t) return std::nullopt;
      const auto newest_ns = static_cast<std::int64_t>(*newest * 1000);
      const std::int64_t n = op.cost;
      const std::int64_t to_drop = units + n - p.limit;
      if (n <= p.limit && to_drop > 0) {
        if (*target < 0 || *target > *newest) return std::nullopt;
        s.entries.push_back({static_cast<std::int64_t>(*target * 1000), to_drop});
        if (units > to_drop) s.entries.push_back({newest_ns, units - to_drop});
      } else {
        s.entries.push_back({newest_ns, units});
      }
    }
    const Decision d = SlidingLogModel::apply(p, s, std::chrono::nanoseconds{*t}, op);
    if (d.allowed != *admitted) return std::nullopt;
    return d;
  }
  static WindowParams fallback(const WindowParams& p, std::int64_t divisor) noexcept {
    return window_fallback(p, divisor);
  }
};

/// Models the Redis storage has a script for.
template <class M>
concept RedisScripted = Model<M> && requires(const typename M::Params& p) {
  { RedisModel<M>::script } -> std::convertible_to<const RedisScript*>;
  RedisModel<M>::fix(p);
};

}  // namespace ratelimit::detail
