#pragma once
/// @file algorithms/fixed_window.hpp
/// Fixed window counter: N requests per window aligned to the clock's epoch.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/clock.hpp"
#include "../core/decision.hpp"
#include "../core/limiter.hpp"
#include "../core/rate.hpp"
#include "../core/storage.hpp"
#include "../core/wire.hpp"
#include "../memory/in_memory_storage.hpp"
#include "detail/window.hpp"
#include "detail/window_wire.hpp"

namespace ratelimit {

/// The fixed window counter as a pure transition (see `ratelimit::Model`).
///
/// Window k = floor(t / W), aligned to the clock's epoch; count c of window k. Admit iff
/// c + n <= N. Allows up to 2N around a window boundary (the "boundary problem"). Source: the
/// classic counter per calendar period (e.g. "user42:10:05"). 16 bytes of state per key.
struct FixedWindowModel {
  static constexpr std::string_view name = "fixed_window";
  using Params = detail::WindowParams;
  struct State {
    std::int64_t last = 0;   ///< ns: latest time seen; its window is the counted one
    std::int64_t count = 0;  ///< requests admitted in last's window
  };

  /// This algorithm's id inside a composed Redis script (see core/wire.hpp).
  static constexpr int wire_id = 3;
  /// Its Redis twin: lua/window.lua, shared with the sliding counter.
  using Wire = detail::WindowWire<FixedWindowModel, false>;

  /// The parameters of a rules-file limit of `r`: r.count per window of r.period.
  static Params from_rate(const Rate& r) { return detail::make_window_params(r); }
  /// Checks parameters given directly to a storage (`bind`, `with_params`); throws
  /// `std::invalid_argument` naming the field (see detail::check_window_params).
  static void check_params(const Params& p) { detail::check_window_params(p); }

  /// Takes `Operation::Kind::refund` and `penalty` (see `adjust`).
  static constexpr bool adjustable = true;

  static Decision apply(const Params& p, State& s, std::chrono::nanoseconds now,
                        const Operation& op) noexcept {
    if (op.kind != Operation::Kind::spend) [[unlikely]]
      return adjust(p, s, now, op);
    const std::int64_t t = now.count() > s.last ? now.count() : s.last;
    const std::int64_t k = p.window_of(t);
    // last <= t, so last is in t's window iff last >= its start (one division, not two).
    const std::int64_t c = s.last >= k * p.window ? s.count : 0;
    const std::chrono::nanoseconds to_end{(k + 1) * p.window - t};
    return detail::count_decision(p.limit, c, op.cost, to_end, op.peek, [&](std::int64_t count) {
      s = State{t, count};
    });
  }

  /// A refund or a penalty at t = max(now, last), then what a cost-1 peek reports
  /// (docs/algorithms.md "Refunds, penalties and lockouts"): a refund of n taken at t0 takes
  /// min(n, c) off the count if t0 lies in t's window (a take of an earlier window left with
  /// it); a penalty adds n, the count capped at 2N. Nothing changes when nothing would.
  [[gnu::noinline]] static Decision adjust(const Params& p, State& s, std::chrono::nanoseconds now,
                                           const Operation& op) noexcept {
    const std::int64_t t = now.count() > s.last ? now.count() : s.last;
    const std::int64_t k = p.window_of(t);
    const std::int64_t c = s.last >= k * p.window ? s.count : 0;
    std::int64_t after = c;  // the count the operation leaves
    if (op.kind == Operation::Kind::refund) {
      const std::int64_t t0 = std::clamp<std::int64_t>(op.taken_at.count(), 0, t);
      if (c > 0 && p.window_of(t0) == k) s = State{t, after = c - std::min(op.cost, c)};
    } else if (op.kind == Operation::Kind::penalty && c < 2 * p.limit) {
      s = State{t, after = c + std::min(op.cost, 2 * p.limit - c)};
    }
    // A cost-1 peek on the count left, in the same window (no second pass over the state).
    const std::chrono::nanoseconds to_end{(k + 1) * p.window - t};
    return detail::count_decision(p.limit, after, 1, to_end, true, [](std::int64_t) {});
  }

  /// The end of last's window if it counted anything, else last.
  static std::chrono::nanoseconds fresh_at(const Params& p, const State& s) noexcept {
    if (s.count == 0) return std::chrono::nanoseconds{s.last};
    return std::chrono::nanoseconds{(p.window_of(s.last) + 1) * p.window};
  }
};

/// A fixed window limiter per key: at most `rate.count` requests per window of `rate.period`,
/// windows aligned to the clock's epoch (with SystemClock, calendar minutes, hours, days).
/// Decision fields: limit = N; remaining = max(0, N - c); retry_after and reset_after = time to the
/// window's end.
///
/// Errors: the constructor throws `std::invalid_argument` naming the out-of-range field; the
/// calls throw it for cost < 1. Thread safety: every member is safe from many threads.
template <Clock C = SteadyClock, class Storage = InMemoryStorage>
class FixedWindow : public detail::Limiter<FixedWindowModel, C, Storage> {
 public:
  /// `rate.count` requests per `rate.period`; count in [1, 10^9], period in [1 ms, 366 days].
  explicit FixedWindow(Rate rate, Storage storage = {}, C clock = {}, std::string name = {})
      : detail::Limiter<FixedWindowModel, C, Storage>(detail::make_window_params(rate),
                                                      std::move(storage), std::move(clock),
                                                      std::move(name)),
        rate_(rate) {}

  /// The rate it was built with.
  const Rate& rate() const noexcept { return rate_; }

 private:
  Rate rate_;
};

}  // namespace ratelimit
