#pragma once
/// @file algorithms/sliding_counter.hpp
/// Sliding window counter: the current window plus the overlapping share of the previous one.

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
#include "../core/detail/arith.hpp"
#include "../core/limiter.hpp"
#include "../core/rate.hpp"
#include "../core/storage.hpp"
#include "../core/wire.hpp"
#include "../memory/in_memory_storage.hpp"
#include "detail/window.hpp"
#include "detail/window_wire.hpp"

namespace ratelimit {

/// The sliding window counter as a pure transition (see `ratelimit::Model`).
///
/// Windows as the fixed window; c counts window k, p counted window k-1, e = t - kW. Estimate
/// E = c + p (W - e) / W (the approximation popularized by Cloudflare's "counting things" post
/// and the design doc's case study). Admit iff E + n <= N, decided exactly as
/// (c + n) W + p (W - e) <= N W in 128-bit integers. 16 bytes of state per key in process.
struct SlidingCounterModel {
  static constexpr std::string_view name = "sliding_counter";
  using Params = detail::WindowParams;
  /// 16 bytes, so that a table slot (tag, state, check) is 32 and never straddles two cache
  /// lines (which two threads deciding one key would both write at every decision). The counts
  /// fit 32 bits: an admission keeps c + n <= N <= 10^9 (every limit is validated, and a count
  /// read from Redis is refused above 10^9), so a count never exceeds the largest N.
  struct State {
    std::int64_t last = 0;       ///< ns: latest time seen
    std::uint32_t current = 0;   ///< requests in last's window
    std::uint32_t previous = 0;  ///< requests in the window before last's
  };

  /// This algorithm's id inside a composed Redis script (see core/wire.hpp).
  static constexpr int wire_id = 5;
  /// Its Redis twin: lua/window.lua, shared with the fixed window.
  using Wire = detail::WindowWire<SlidingCounterModel, true>;

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
    const auto [c, prev] = counts_at(p, s, k);
    return decide(p, s, t, k, c, prev, op);
  }

  /// A refund or a penalty at t = max(now, last), then what a cost-1 peek reports
  /// (docs/algorithms.md "Refunds, penalties and lockouts"): a refund of n taken at t0 takes
  /// min(n, c) off the current count if t0 lies in t's window k, min(n, p) off the previous
  /// one if it lies in k - 1 (where the take still weighs on the estimate), and nothing for an
  /// earlier window; a penalty adds n to the current count, capped at 2N. Nothing changes when
  /// nothing would.
  [[gnu::noinline]] static Decision adjust(const Params& p, State& s, std::chrono::nanoseconds now,
                                           const Operation& op) noexcept {
    const std::int64_t t = now.count() > s.last ? now.count() : s.last;
    const std::int64_t k = p.window_of(t);
    const auto [c, prev] = counts_at(p, s, k);
    std::int64_t cur = c, pre = prev;  // the counts the operation leaves
    const auto make = [&](std::int64_t next_cur, std::int64_t next_pre) {
      cur = next_cur;
      pre = next_pre;
      s = State{t, static_cast<std::uint32_t>(cur), static_cast<std::uint32_t>(pre)};
    };
    if (op.kind == Operation::Kind::refund) {
      const std::int64_t k0 = p.window_of(std::clamp<std::int64_t>(op.taken_at.count(), 0, t));
      if (k0 == k && c > 0)
        make(c - std::min(op.cost, c), prev);
      else if (k0 == k - 1 && prev > 0)
        make(c, prev - std::min(op.cost, prev));
    } else if (op.kind == Operation::Kind::penalty && c < 2 * p.limit) {
      make(c + std::min(op.cost, 2 * p.limit - c), prev);
    }
    // A cost-1 peek on the counts left, in the same window (no second pass over the state).
    return decide<1>(p, s, t, k, cur, pre, Operation{1, true});
  }

  /// A count of last's window k weighs on window k + 1 too: fresh from (k + 2) W if the current
  /// count is not 0, from (k + 1) W if only the previous is, else from last.
  static std::chrono::nanoseconds fresh_at(const Params& p, const State& s) noexcept {
    const std::int64_t k = p.window_of(s.last);
    if (s.current > 0) return std::chrono::nanoseconds{(k + 2) * p.window};
    if (s.previous > 0) return std::chrono::nanoseconds{(k + 1) * p.window};
    return std::chrono::nanoseconds{s.last};
  }

 private:
  /// `apply`'s decision at t in window k, on the counts c (current) and prev seen from it.
  /// `Caller` only tells apply's instantiation from adjust's: each has one call site, so the
  /// compiler inlines it there (called from both, it was left out of line, a call per take).
  template <int Caller = 0>
  static Decision decide(const Params& p, State& s, std::int64_t t, std::int64_t k, std::int64_t c,
                         std::int64_t prev, const Operation& op) noexcept {
    using detail::i128;
    const std::int64_t W = p.window, N = p.limit;
    const std::int64_t e = t - k * W;
    const std::int64_t n = op.cost;
    Decision d{};
    d.limit = N;
    std::int64_t left_current = c;  // the current count the decision leaves
    if (n > N) {
      d.retry_after = Decision::never;
    } else if (i128{c + n} * W + i128{prev} * (W - e) > i128{N} * W) {
      d.retry_after = std::chrono::nanoseconds{retry_at(p, c, prev, k, n) - t};
    } else {
      d.allowed = true;
      if (!op.peek) {
        s = State{t, static_cast<std::uint32_t>(c + n), static_cast<std::uint32_t>(prev)};
        left_current = c + n;
      }
    }
    // remaining and reset_after describe the state the decision leaves: computed once, at one
    // call site (so the compiler inlines it), for that state.
    describe(d, p, left_current, prev, t, k);
    return d;
  }

  struct Counts {
    std::int64_t current, previous;
  };

  /// The counts as seen from window k (k >= the window of s.last). Compared with the windows'
  /// starts rather than by dividing s.last (a division costs tens of cycles): s.last is in
  /// window k iff s.last >= kW, in window k - 1 iff it is not but s.last >= (k - 1)W.
  static Counts counts_at(const Params& p, const State& s, std::int64_t k) noexcept {
    const std::int64_t start = k * p.window;
    if (s.last >= start) return {s.current, s.previous};
    if (s.last >= start - p.window) return {0, s.current};
    return {0, 0};
  }

  static void describe(Decision& d, const Params& p, std::int64_t c, std::int64_t prev,
                       std::int64_t t, std::int64_t k) noexcept {
    using detail::i128;
    const std::int64_t W = p.window;
    const i128 free_scaled = i128{p.limit} * W - i128{c} * W - i128{prev} * (W - (t - k * W));
    const i128 rem = detail::floor_div(free_scaled, W, p.per_window);
    d.remaining = rem < 0 ? 0 : static_cast<std::int64_t>(rem);
    if (c > 0)
      d.reset_after = std::chrono::nanoseconds{(k + 2) * W - t};
    else if (prev > 0)
      d.reset_after = std::chrono::nanoseconds{(k + 1) * W - t};
    else
      d.reset_after = std::chrono::nanoseconds{0};
  }

  /// The earliest instant at which n would be admitted if nothing else happened (n <= N).
  static std::int64_t retry_at(const Params& p, std::int64_t c, std::int64_t prev, std::int64_t k,
                               std::int64_t n) noexcept {
    using detail::i128;
    const std::int64_t W = p.window, N = p.limit;
    if (prev > 0) {
      // Within window k, need prev * e >= (c + n + prev - N) * W.
      const i128 need = i128{c + n + prev - N} * W;
      const i128 e = detail::ceil_div(need, prev);
      if (e < W) return k * W + static_cast<std::int64_t>(e);
    }
    // In window k+1 the current count c becomes the previous: need c * e >= (n + c - N) * W.
    const i128 need = i128{n + c - N} * W;
    if (need <= 0) return (k + 1) * W;
    const i128 e = detail::ceil_div(need, c);
    if (e < W) return (k + 1) * W + static_cast<std::int64_t>(e);
    return (k + 2) * W;
  }
};

/// A sliding window counter limiter per key: about `rate.count` requests in any window of
/// `rate.period`, with two counters per key and no boundary burst.
/// Decision fields: limit = N; remaining = floor(N - E); retry_after exact (it may fall in the
/// next window); reset_after = (k + 2) W - t if the current window counted, (k + 1) W - t if only
/// the previous did.
///
/// Errors: the constructor throws `std::invalid_argument` naming the out-of-range field; the
/// calls throw it for cost < 1. Thread safety: every member is safe from many threads.
template <Clock C = SteadyClock, class Storage = InMemoryStorage>
class SlidingCounter : public detail::Limiter<SlidingCounterModel, C, Storage> {
 public:
  /// `rate.count` requests per `rate.period`; count in [1, 10^9], period in [1 ms, 366 days].
  explicit SlidingCounter(Rate rate, Storage storage = {}, C clock = {}, std::string name = {})
      : detail::Limiter<SlidingCounterModel, C, Storage>(detail::make_window_params(rate),
                                                         std::move(storage), std::move(clock),
                                                         std::move(name)),
        rate_(rate) {}

  /// The rate it was built with.
  const Rate& rate() const noexcept { return rate_; }

 private:
  Rate rate_;
};

}  // namespace ratelimit
