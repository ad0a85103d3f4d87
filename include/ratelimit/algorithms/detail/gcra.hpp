#pragma once
/// @file algorithms/detail/gcra.hpp
/// The exact arithmetic shared by the token bucket and the leaky bucket.
///
/// Both reduce to one timestamp, the Generic Cell Rate Algorithm's theoretical arrival time
/// (ITU-T I.371): the instant `at` when the bucket is full again (token bucket) or the queue is
/// empty (leaky bucket). With r = count/period, the backlog at time t is D = max(0, at - t) ns,
/// worth D*r tokens (or units of water). Fractions of a nanosecond are kept exactly: times are
/// scaled by `count` (after dividing count and period by their gcd), so `at` is stored as
/// whole ns plus a remainder in [0, count), and every product is taken in 128 bits.

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "../../core/decision.hpp"
#include "../../core/detail/arith.hpp"
#include "../../core/detail/validate.hpp"
#include "../../core/storage.hpp"

namespace ratelimit::detail {

/// A bucket reduced to integers: `limit` units, refilled (or drained) at `count` units per
/// `period` ns, with count/period in lowest terms.
struct GcraParams {
  std::int64_t limit;   ///< capacity B or queue size Q (units)
  std::int64_t count;   ///< units per `period`, reduced
  std::int64_t period;  ///< ns, reduced
  /// Divisions by `period` and `count` as multiplies (computed from them on construction).
  Divisor per_period{period};
  Divisor per_count{count};
  /// Whether limit x period <= 2^60, and the most ns `at` may lie ahead of t for the backlog
  /// (at - t) x count + frac to stay <= 2^61: then gcra_apply computes in 64 bits.
  bool fits_64 = i128{limit} * period <= (i128{1} << 60);
  std::int64_t max_ahead_64 = count > 0 ? ((std::int64_t{1} << 61) - count) / count : 0;
  /// Bits a remainder in [0, count) takes in GcraState (0 when count is 1).
  int frac_bits = count > 1
                      ? static_cast<int>(std::bit_width(static_cast<std::uint64_t>(count - 1)))
                      : 0;

  friend constexpr bool operator==(const GcraParams&, const GcraParams&) = default;
};

/// 16 bytes: `at` = at_ns + frac() / count, and last(), the latest time a request was admitted
/// at (a request stamped earlier is decided then). Sixteen rather than 24 so that a table slot
/// (tag, state, check) is 32 bytes: it never straddles two cache lines, which two threads
/// deciding one key would both write at every decision.
///
/// `packed`: bits 58 to 63 hold w, the remainder's width when it was written (the parameters'
/// `frac_bits`: at most 30, as count <= 10^9); bits 0 to w - 1 the remainder; bits w to 57 the
/// lag at_ns - last() >= 0. w is stored rather than taken from the parameters so that the
/// fields split where they were written; the remainder's unit, 1/count ns, is not stored: under
/// other parameters (a reloaded rule's) gcra_apply rounds `at` up to the next whole us when the
/// remainder cannot be one of the new unit (see gcra_read_at).
/// A lag of 2^(58 - w) - 1 ns or more (9 years when count is 1, 275 s at count 10^6, 0.27 s at
/// 10^9; count is reduced, so a rate per second, minute or hour has a small one) is not kept:
/// the field is then all ones and last() is 0, so a request stamped before the latest
/// admission is decided at its own time, where it only sees more backlog (never minted
/// capacity). Freshness does not change (the key is fresh only once t >= at > last), so a key
/// dropped fresh is still pinned no earlier than its latest admission.
struct GcraState {
  std::int64_t at_ns = 0;
  std::uint64_t packed = 0;

  static constexpr int width_shift = 58;
  static constexpr std::uint64_t low_mask = (std::uint64_t{1} << width_shift) - 1;

  /// The remainder of `at`, in [0, count) of the parameters it was written with.
  constexpr std::int64_t frac() const noexcept {
    const auto w = width();
    return static_cast<std::int64_t>(packed & ((std::uint64_t{1} << w) - 1));
  }
  /// w: the writer's `frac_bits`.
  constexpr int width() const noexcept { return static_cast<int>(packed >> width_shift); }
  /// ns: the latest admission's time; 0 if its lag did not fit (see above).
  constexpr std::int64_t last() const noexcept {
    const auto w = static_cast<int>(packed >> width_shift);
    const std::uint64_t lag = (packed & low_mask) >> w;
    return lag == low_mask >> w ? 0 : at_ns - static_cast<std::int64_t>(lag);
  }
  /// Stores at = `at` + `frac` / count and the latest time `latest` <= `at`, with `w` =
  /// the parameters' frac_bits (frac < 2^w).
  constexpr void set(std::int64_t at, std::int64_t frac, std::int64_t latest, int w) noexcept {
    const std::uint64_t most = low_mask >> w;  // all ones: the lag is not kept
    const std::uint64_t lag = std::min(static_cast<std::uint64_t>(at - latest), most);
    at_ns = at;
    packed =
        static_cast<std::uint64_t>(w) << width_shift | lag << w | static_cast<std::uint64_t>(frac);
  }
};

/// Checks parameters given directly (a binding's `bind` or `with_params`; the limiters' configs
/// are checked by `check_bucket`, more strictly): limit and count in [1, 10^9], which keeps
/// GcraState's remainder in 30 bits, and 1 <= count <= period <= 100 years (a fallback's
/// period may exceed the configs' 366 days). Throws `std::invalid_argument` naming the field
/// and the value.
inline void check_gcra_params(const GcraParams& p) {
  check_count("params.limit", p.limit);
  check_count("params.count", p.count);
  if (p.period < 1 || p.period > max_refill_time.count())
    invalid("params.period (ns)", p.period, "must be in [1, 3155760000000000000] ns");
  if (p.count > p.period) invalid("params.count", p.count, "more than one unit per nanosecond");
}

constexpr GcraParams make_gcra_params(std::int64_t limit, std::int64_t count,
                                      std::chrono::nanoseconds period) noexcept {
  const auto g = gcd(count, period.count());
  return {limit, count / g, period.count() / g};
}

/// For the leaky bucket (Shaping): whether a request admissible now is served within
/// `op.max_wait` after the backlog's `delay`; sets `d.delay` if so, else `d.retry_after` (when
/// it would fit). The token bucket has no delay: always true.
template <bool Shaping>
constexpr bool admit_within_wait(Decision& d, std::chrono::nanoseconds delay,
                                 const Operation& op) noexcept {
  if constexpr (Shaping) {
    if (delay > op.max_wait) {
      d.retry_after = delay - op.max_wait;
      return false;
    }
    d.delay = delay;
  }
  return true;
}

/// `at` as parameters `p` read it: whole ns and a remainder in [0, p.count).
struct GcraAt {
  std::int64_t ns;
  std::int64_t frac;
};

/// The instant `s` holds, read under `p`. A state written under another count (a reloaded
/// rule's, a limiter of the same name with another rate) holds its remainder in 1/count ns of
/// that count, which the state does not keep: a remainder that cannot be one of `p` (its width
/// or its value out of p's range) rounds `at` up to the next whole us, as lua/gcra.lua does
/// with a remainder out of its range, so both storages read such a bucket alike. Never before
/// the instant written (the remainder is a fraction of a ns past at_ns), so never more capacity
/// than the state had.
constexpr GcraAt gcra_read_at(const GcraParams& p, const GcraState& s) noexcept {
  const std::int64_t frac = s.frac();
  if (frac != 0 && (frac >= p.count || s.width() != p.frac_bits))
    return {(s.at_ns / 1000 + 1) * 1000, 0};  // at_ns >= 0, as every time a state holds
  return {s.at_ns, frac};
}

/// gcra_apply's arithmetic at time t >= s.last(), `at` read by gcra_read_at, with intermediates
/// of type I: std::int64_t when every product fits (see gcra_apply), i128 otherwise. The same
/// code either way. `Caller` only tells the instantiations of gcra_apply and gcra_adjust apart:
/// each then has one call site, so the compiler inlines it into that caller (the take's was left
/// out of line, 10 to 15 ns a take, once gcra_adjust called the same instantiation).
template <bool Shaping, class I, int Caller = 0>
Decision gcra_decide(const GcraParams& p, GcraState& s, std::int64_t t, GcraAt at, bool ahead,
                     const Operation& op) noexcept {
  const std::int64_t frac = at.frac;
  // Backlog D * count = (at - t) * count, from at's whole ns and remainder: no 128-bit division.
  const I backlog = ahead ? I{at.ns - t} * p.count + frac : 0;  // in 1/count ns
  const I full = I{p.limit} * p.period;  // B (or Q) in the same unit as D*count
  const std::int64_t n = op.cost;

  Decision d{};
  d.limit = p.limit;
  // Divisions by `count` are skipped when it is 1 (a whole number of ns per unit, the common
  // case once reduced); the others are multiplies (Divisor): a 64-bit division instruction
  // costs tens of cycles, much of a decision's budget.
  const auto per_count = [&](I v) -> I {
    return p.count == 1 ? v : static_cast<I>(ceil_div(v, p.count, p.per_count));
  };
  // The fields that describe the state with backlog `bl`; computed once, for the state the
  // decision leaves (the backlog before it unless it spends).
  const auto state_after = [&](I bl) {
    // Never negative: a key spent under a larger limit (a higher priority's, see
    // core/priority.hpp) may hold more backlog than this limit.
    const I left = p.limit - static_cast<I>(ceil_div(bl, p.period, p.per_period));
    d.remaining = left > 0 ? static_cast<std::int64_t>(left) : 0;
    d.reset_after = ns(per_count(bl));
  };
  I after = backlog;  // the backlog the decision leaves
  if (n > p.limit) {
    d.retry_after = Decision::never;
  } else if (const I needed = backlog + I{n} * p.period; needed > full) {
    d.retry_after = ns(per_count(needed - full));
  } else if (admit_within_wait<Shaping>(d, ns(per_count(backlog)), op)) {
    d.allowed = true;
    if (!op.peek) {
      // at <- max(at, t) + n * period / count, kept as whole ns plus a remainder below count.
      const I advance = (ahead ? frac : 0) + I{n} * p.period;
      I whole = advance, rem = 0;
      if (p.count != 1) {
        const auto [q, r] = divmod(advance, p.count, p.per_count);
        whole = static_cast<I>(q);
        rem = static_cast<I>(r);
      }
      // One call site: called from each branch, `set` kept gcra_decide out of its caller.
      s.set((ahead ? at.ns : t) + static_cast<std::int64_t>(whole), static_cast<std::int64_t>(rem),
            t, p.frac_bits);
      after = needed;
    }
  }
  // One call site, so the compiler inlines it (called from each branch, it was not).
  state_after(after);
  return d;
}

template <bool Shaping>
Decision gcra_adjust(const GcraParams& p, GcraState& s, std::chrono::nanoseconds now,
                     const Operation& op) noexcept;
template <bool Shaping>
Decision gcra_reserve(const GcraParams& p, GcraState& s, std::chrono::nanoseconds now,
                      const Operation& op) noexcept;

/// Shaping = false: token bucket. Shaping = true: leaky bucket (the admitted request's delay is
/// the backlog, and `op.max_wait` bounds it). A refund or a penalty goes to gcra_adjust.
template <bool Shaping>
Decision gcra_apply(const GcraParams& p, GcraState& s, std::chrono::nanoseconds now,
                    const Operation& op) noexcept {
  if (op.kind != Operation::Kind::spend) [[unlikely]] {
    if (op.kind == Operation::Kind::reserve) return gcra_reserve<Shaping>(p, s, now, op);
    return gcra_adjust<Shaping>(p, s, now, op);
  }
  const std::int64_t last = s.last();
  const std::int64_t t = now.count() > last ? now.count() : last;
  const GcraAt at = gcra_read_at(p, s);
  const bool ahead = at.ns > t || (at.ns == t && at.frac > 0);
  // In 64 bits when every intermediate stays below 2^62: full = limit x period <= 2^60
  // (p.fits_64), the cost's n x period <= full, and the backlog (at - t) x count + frac
  // <= 2^61 (checked here: a key spent under other parameters may hold more than full). Then
  // needed <= 2^61 + 2^60 and advance <= count + full. Most limits fit; the 128-bit
  // arithmetic, spilled to the stack, cost as much as the rest of the decision.
  if (p.fits_64 && (!ahead || at.ns - t <= p.max_ahead_64))
    return gcra_decide<Shaping, std::int64_t>(p, s, t, at, ahead, op);
  return gcra_decide<Shaping, i128>(p, s, t, at, ahead, op);
}

/// The most units a refund or a penalty counts: twice the limit (a penalty never leaves more
/// than that spent, and a take never removed more).
constexpr std::int64_t adjust_units(std::int64_t cost, std::int64_t limit) noexcept {
  return cost < 2 * limit ? cost : 2 * limit;
}

/// The most backlog a penalty leaves, in 1/count ns: twice the limit's worth, and at most 100
/// years (so that every time stays in the scripts' exact range).
constexpr i128 penalty_cap(const GcraParams& p) noexcept {
  const i128 twice = 2 * i128{p.limit} * p.period;
  const i128 most = i128{max_refill_time.count()} * p.count;
  return twice < most ? twice : most;
}

/// gcra_adjust's arithmetic at time t >= s.last(), `at` read by gcra_read_at, on the backlog
/// D = at - t in 1/count ns with intermediates of type I (as gcra_decide: std::int64_t when
/// limit x period <= 2^60 and D <= 2^61, i128 otherwise). Then the decision a cost-1 peek
/// reports, straight from the new backlog (gcra_decide on it: the state is not read again).
template <bool Shaping, class I>
Decision gcra_adjust_in(const GcraParams& p, GcraState& s, std::int64_t t, GcraAt at, bool ahead,
                        const Operation& op) noexcept {
  const I backlog = ahead ? I{at.ns - t} * p.count + at.frac : 0;
  // <= 2 x limit x period: <= 2^61 in 64 bits.
  const I worth = I{adjust_units(op.cost, p.limit)} * p.period;
  I next = -1;  // the backlog the operation leaves; < 0: unchanged
  if (op.kind == Operation::Kind::refund) {
    std::int64_t t0 = op.taken_at.count();
    t0 = t0 < 0 ? 0 : (t0 > t ? t : t0);
    // owed = worth - (t - t0) x count, only when positive: (t - t0) x count >= t - t0, so
    // nothing is owed once t - t0 >= worth (and the product is then never formed).
    const std::int64_t since = t - t0;
    if (backlog > 0 && I{since} < worth) {
      I elapsed;
      bool over = false;
      if constexpr (std::is_same_v<I, std::int64_t>)
        over = __builtin_mul_overflow(since, p.count, &elapsed);  // then > worth: owed < 0
      else
        elapsed = I{since} * p.count;  // < 2^63 x 2^30: fits
      if (!over && elapsed < worth) {
        const I owed = worth - elapsed;
        next = backlog > owed ? backlog - owed : 0;
      }
    }
  } else if (op.kind == Operation::Kind::penalty) {
    const I cap = static_cast<I>(penalty_cap(p));  // <= 2 x limit x period
    if (backlog < cap) next = backlog + worth < cap ? backlog + worth : cap;
  }
  if (next >= 0) {
    I whole = next, rem = 0;
    if (p.count != 1) {
      const auto [q, r] = divmod(next, p.count, p.per_count);
      whole = static_cast<I>(q);
      rem = static_cast<I>(r);
    }
    at = {t + static_cast<std::int64_t>(whole), static_cast<std::int64_t>(rem)};
    s.set(at.ns, at.frac, t, p.frac_bits);
    ahead = next > 0;
  }
  return gcra_decide<Shaping, I, 1>(p, s, t, at, ahead, Operation{1, true});
}

/// A refund or a penalty at t = max(now, the key's latest time), in 1/count ns (A = at, T = t),
/// then what a cost-1 peek reports (docs/algorithms.md "Refunds, penalties and lockouts"):
/// - refund of n taken at t0 <= t: the take's n units that time alone has not refilled since,
///   owed = t0 + n x period / count - t, leave the backlog: A <- max(A - owed, T) if owed > 0
///   and the bucket is not full (else nothing changes). Never more than the take removed: a
///   bucket that was full after the take is full only from t0 + n x period / count on.
/// - penalty of n: A <- max(A, T) + n x period / count, the backlog capped (`penalty_cap`).
/// Out of line, so that the hot path of a take only tests the kind (not cold: a penalty or a
/// refund is a request of its own, and should cost what a take costs: one read of the state,
/// 64-bit arithmetic where a take's fits, and the returned decision computed from the new
/// backlog rather than by a second pass over the state).
template <bool Shaping>
[[gnu::noinline]] Decision gcra_adjust(const GcraParams& p, GcraState& s,
                                       std::chrono::nanoseconds now, const Operation& op) noexcept {
  const std::int64_t last = s.last();
  const std::int64_t t = now.count() > last ? now.count() : last;
  const GcraAt at = gcra_read_at(p, s);
  const bool ahead = at.ns > t || (at.ns == t && at.frac > 0);
  // The same test as gcra_apply's: every intermediate then stays below 2^62 (the new backlog
  // is at most the cap, 2 x limit x period <= 2^61).
  if (p.fits_64 && (!ahead || at.ns - t <= p.max_ahead_64))
    return gcra_adjust_in<Shaping, std::int64_t>(p, s, t, at, ahead, op);
  return gcra_adjust_in<Shaping, i128>(p, s, t, at, ahead, op);
}

/// The wait, in 1/count ns, before a reservation of `worth` (n x period) taken on `backlog` D
/// is due: the token bucket's n are in the bucket once D + n x period <= B x period, the
/// leaky bucket's n are reached once the queue ahead of them, D, has leaked.
template <bool Shaping>
constexpr i128 gcra_reserve_wait(const GcraParams& p, i128 backlog, i128 worth) noexcept {
  if constexpr (Shaping) return backlog;
  const i128 over = backlog + worth - i128{p.limit} * p.period;
  return over > 0 ? over : 0;
}

/// A reservation of n = op.cost units at t = max(now, the key's latest time), in 1/count ns
/// (docs/algorithms.md "Reservations"; x/time/rate's ReserveN): with the backlog D = max(A - T,
/// 0) and the wait w = `gcra_reserve_wait`, it is refused, changing nothing, when n > limit
/// (retry_after `never`), or w > max_wait x count, or D + n x period > `penalty_cap` (more than
/// twice the limit would be spent); retry_after is then the least time after which neither
/// holds. Otherwise A <- max(A, T) + n x period, as a take: the bucket may go into debt.
/// Returns what a cost-1 peek reports right after it (remaining, reset_after), admitted, with
/// retry_after 0 and `delay` = ceil(w / count) ns: when the units are due.
template <bool Shaping>
[[gnu::noinline]] Decision gcra_reserve(const GcraParams& p, GcraState& s,
                                        std::chrono::nanoseconds now,
                                        const Operation& op) noexcept {
  const std::int64_t last = s.last();
  const std::int64_t t = now.count() > last ? now.count() : last;
  const auto at_t = std::chrono::nanoseconds{t};
  const Operation peek{1, true};
  if (op.cost > p.limit) {
    Decision d = gcra_apply<Shaping>(p, s, at_t, peek);
    d.allowed = false;
    d.retry_after = Decision::never;
    d.delay = std::chrono::nanoseconds{0};
    return d;
  }
  const GcraAt at = gcra_read_at(p, s);
  const i128 a = i128{at.ns} * p.count + at.frac;
  const i128 tt = i128{t} * p.count;
  const i128 backlog = a > tt ? a - tt : 0;
  const i128 worth = i128{op.cost} * p.period;
  const i128 wait = gcra_reserve_wait<Shaping>(p, backlog, worth);
  // Both excesses shrink by count per ns: time alone brings the reservation within bounds.
  i128 excess = backlog + worth - penalty_cap(p);
  if (op.max_wait != Decision::never) {
    const i128 late = wait - i128{op.max_wait.count()} * p.count;
    if (late > excess) excess = late;
  }
  if (excess > 0) {
    Decision d = gcra_apply<Shaping>(p, s, at_t, peek);
    d.allowed = false;
    d.retry_after = ns(ceil_div(excess, i128{p.count}));
    d.delay = std::chrono::nanoseconds{0};
    return d;
  }
  if (!op.peek) {
    const auto [whole, rem] = divmod((a > tt ? a : tt) + worth, i128{p.count});
    s.set(static_cast<std::int64_t>(whole), static_cast<std::int64_t>(rem), t, p.frac_bits);
  }
  Decision d = gcra_apply<Shaping>(p, s, at_t, peek);
  d.allowed = true;
  d.retry_after = std::chrono::nanoseconds{0};
  d.delay = ns(ceil_div(wait, i128{p.count}));
  return d;
}

/// When the bucket is full (token) or the queue empty (leaky) again: `at` as `p` reads it, or
/// the nanosecond after it if a fraction of a nanosecond is still owed. Never before the latest
/// admission, since at >= last.
constexpr std::chrono::nanoseconds gcra_fresh_at(const GcraParams& p, const GcraState& s) noexcept {
  const GcraAt at = gcra_read_at(p, s);
  return std::chrono::nanoseconds{at.ns + (at.frac > 0 ? 1 : 0)};
}

}  // namespace ratelimit::detail
