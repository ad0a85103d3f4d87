#pragma once
/// @file core/reservation.hpp
/// What a limiter's `reserve` returns: units taken now, due after a delay, that `cancel` can
/// give back while they are not yet due (x/time/rate's Reservation).

#include <chrono>
#include <cstdint>

#include "decision.hpp"

namespace ratelimit {

/// A reservation of `cost` units of one key (see `detail::Limiter::reserve`; docs/algorithms.md
/// "Reservations"). A plain value: it does not refer to the limiter or the key, which the
/// caller passes to `cancel` with it.
/// Thread safety: a plain value.
struct Reservation {
  /// The reservation's decision: `allowed` iff the units were taken (or, in shadow mode, would
  /// have been refused: `shadow_denied`, nothing taken); `delay` when they are due; remaining
  /// and reset_after as a cost-1 peek reports right after it; for a refusal, the key's state
  /// as it is and `retry_after` (`Decision::never` when the cost exceeds the limit).
  Decision decision{};
  /// Units asked for (>= 1).
  std::int64_t cost = 0;
  /// ns on the limiter's clock: the reading the reservation was decided at.
  std::chrono::nanoseconds reserved_at{0};

  /// Whether the units were granted (x/time/rate's `OK`): `decision.allowed`.
  bool ok() const noexcept { return decision.allowed; }

  /// ns on the limiter's clock: when the units are due (`reserved_at` + the delay). Meaningful
  /// only if `ok()`. Saturates at `Decision::never` (and reads negative fields as 0), so a
  /// value built by hand cannot overflow it.
  std::chrono::nanoseconds due_at() const noexcept {
    constexpr std::chrono::nanoseconds zero{0};
    const auto at = reserved_at < zero ? zero : reserved_at;
    const auto wait = decision.delay < zero ? zero : decision.delay;
    return wait > Decision::never - at ? Decision::never : at + wait;
  }

  /// How long after the reservation the units are due (x/time/rate's `Delay`): the decision's
  /// delay, or `Decision::never` if not `ok()`.
  std::chrono::nanoseconds delay() const noexcept {
    return ok() ? decision.delay : Decision::never;
  }

  /// How long after `now` (ns on the limiter's clock) the units are due, 0 once they are
  /// (x/time/rate's `DelayFrom`); `Decision::never` if not `ok()`.
  std::chrono::nanoseconds delay_from(std::chrono::nanoseconds now) const noexcept {
    if (!ok()) return Decision::never;
    if (now.count() < 0) now = std::chrono::nanoseconds{0};  // no clock reading is negative
    const auto due = due_at();
    return due > now ? due - now : std::chrono::nanoseconds{0};
  }

  friend constexpr bool operator==(const Reservation&, const Reservation&) = default;
};

}  // namespace ratelimit
