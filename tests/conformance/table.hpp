#pragma once
/// @file table.hpp
/// The conformance suite's table of expected values: one `Row<Algo>` per algorithm, each value
/// derived in a comment from the algorithm's definition (README, "The algorithms"; the rules in
/// include/ratelimit/algorithms/*.hpp). The scenarios that read a row are written once, in
/// limits_test.cpp, side_effects_test.cpp and keys_test.cpp; what each field means is said by
/// the structs below, the steps that use them by the scenario.
///
/// Every time is a whole number of milliseconds and every rate makes every duration a whole
/// number of milliseconds, so a storage that decides at whole microseconds (Redis) must agree
/// exactly. A new algorithm needs its Algo struct in tests/support/algorithms.hpp, one line in
/// `rltest::Algorithms`, and its row here.

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>

#include <ratelimit/ratelimit.hpp>

#include "support/algorithms.hpp"
#include "support/expect.hpp"

namespace rltest::conformance {

using namespace std::chrono_literals;
using ratelimit::Decision;
using std::chrono::nanoseconds;

/// A denied cost and when it would pass.
struct Denial {
  std::int64_t cost;
  nanoseconds retry_after;
};

/// "A denied request changes nothing" (side_effects_test.cpp).
struct DenialRow {
  nanoseconds at;             ///< when the key is first spent, by `first_cost`
  std::int64_t first_cost;    ///< less than the limit: m = first.remaining units are left
  Decision first;             ///< what `first_cost` gets on a fresh key at `at`
  nanoseconds partial_retry;  ///< retry_after of cost m + 1 right after (denied, changes nothing)
  Decision rest;              ///< cost m right after: admitted, the key is spent (remaining 0)
  nanoseconds deny_at;        ///< when the spent key is asked again (>= at)
  std::array<Denial, 3> denials;  ///< at deny_at: costs 1, some middle one, and the limit
  nanoseconds reset_after;        ///< reported by those denials at deny_at
  nanoseconds later;              ///< a step after deny_at that is shorter than every retry_after
  std::int64_t pass_cost;         ///< one of the denied costs: 1 ms before its retry_after
  std::int64_t remaining_1ms_before;  ///< it is still denied, with this many units left,
  Decision pass;                      ///< and exactly then it is admitted, with this decision
};

/// "A cost above the limit is never admitted" (limits_test.cpp).
struct NeverRow {
  nanoseconds spend_at;  ///< when `cost` is spent on a fresh key (after a fresh denial at 0)
  std::int64_t cost;
  Decision spent;
  nanoseconds ask_at;  ///< when costs above the limit are asked (>= spend_at)
  Decision never;      ///< what they get: the key as it is, retry_after never
  Decision peek;       ///< and what a peek reports then
};

/// "peek reports what a cost-1 request would get and changes nothing" (side_effects_test.cpp).
struct PeekRow {
  nanoseconds spend_at;  ///< when `cost` is spent on a fresh key
  std::int64_t cost;
  Decision spent;
  nanoseconds peek_at;           ///< >= spend_at
  Decision peek;                 ///< three peeks then, all equal
  Decision unit;                 ///< then a cost-1 request, which the peeks did not change
  std::optional<Decision> rest;  ///< then cost unit.remaining, when that is not 0: spent
  Decision spent_peek;           ///< a peek of the spent key (denied: equal to a cost-1 request)
  nanoseconds later_at;          ///< a later time when a unit fits again
  Decision later_peek;           ///< two peeks then
  Decision later_unit;           ///< and a cost-1 request
};

/// "reset puts a key back to fresh and touches no other key" (keys_test.cpp).
struct ResetRow {
  nanoseconds at;  ///< when "k" and "j" are spent
  std::int64_t k_cost;
  Decision k_spent;
  std::int64_t j_cost;
  Decision j_spent;
  nanoseconds reset_at;  ///< when "k" is reset (>= at)
  Decision k_before;     ///< peek of "k" just before
  Decision k_again;      ///< after the reset, "k" spends k_cost again as a fresh key would
  Decision j_after;      ///< peek of "j", which the reset did not touch
};

/// "A clock stepped back never mints capacity" (side_effects_test.cpp).
struct StepBackRow {
  nanoseconds at;  ///< the key's latest time: the whole limit is spent then
  Decision spent;
  nanoseconds back_to;        ///< < at: a peek and a cost-1 request are decided at `at`
  Decision back;              ///< (denied); half its retry_after after `at` it has half left
  Decision after;             ///< a cost-1 request exactly back.retry_after after `at`
  nanoseconds back_again_to;  ///< < the key's new latest time
  std::int64_t back_again_cost;
  Decision back_again;  ///< decided at the key's latest time, at + back.retry_after
  Decision other;       ///< a cost-1 request on a never-seen key at back_again_to: its own time
};

/// "A refund gives back at most what the take removed, in its own window; a penalty spends
/// beyond the limit, at most twice it" (side_effects_test.cpp; docs/algorithms.md "Refunds,
/// penalties and lockouts"). Each refund and penalty reports what a cost-1 peek gets after it.
struct AdjustRow {
  nanoseconds at;  ///< "k" takes `cost` on a fresh key
  std::int64_t cost;
  Decision taken;
  nanoseconds refund_at;  ///< >= at: "k" refunds `refund_cost` of that take
  std::int64_t refund_cost;
  Decision refunded;
  std::int64_t late_cost;     ///< "j" takes `late_cost` at `at`, and refunds it all at `late_at`:
  nanoseconds late_at;        ///< by then nothing of the take is left to give back,
  Decision late;              ///< so the refund changes nothing (equal to a peek then)
  std::int64_t penalty_cost;  ///< "p", fresh, pays a penalty of this many units at `at`
  Decision penalized;
  Decision pass;    ///< a unit on "p" penalized.retry_after after `at`: admitted
  Decision capped;  ///< "c", fresh, pays 100 x the limit at `at`: capped at twice the limit
};

/// "A reservation takes now, into debt, and says when its units are due; one due later than
/// its bound or that would leave more than twice the limit spent is refused and changes
/// nothing; a cancel before the units are due gives them all back" (side_effects_test.cpp;
/// docs/algorithms.md "Reservations"). The buckets only (`ratelimit::Reservable`).
struct ReserveRow {
  std::int64_t spent_cost;  ///< "k", fresh, takes this at 0 (a try_acquire)
  Decision spent;
  std::int64_t cost;  ///< then reserves this, unbounded: granted, due after its delay
  Decision reserved;
  nanoseconds late_wait;  ///< then a reservation of the limit bounded by this: refused
  Decision late;
  std::int64_t over_cost;  ///< then one of this, unbounded: refused (the debt would pass 2x)
  Decision over;
  nanoseconds cancel_at;  ///< before the reservation is due: its cancel gives all `cost` back
  Decision cancelled;
  std::int64_t now_cost;  ///< "j", fresh, reserves this at 0: due at once (delay 0)
  Decision now;
  Decision kept;     ///< its cancel at 1 ms, past due: nothing goes back (the peek then)
  nanoseconds wait;  ///< "m" takes the limit at 0, then reserves 2 bounded by this:
  Decision edge;     ///< granted, due exactly `wait` later;
  Decision past;     ///< then 1 more with the same bound: refused
};

/// The primary template has no row: the suite names the algorithm that lacks one.
template <class Algo>
struct Row;

// --- TokenBucket --------------------------------------------------------------------------------
// B = 10 tokens refilled at r = 2/s: a token takes 500 ms, a whole refill 5 s. T tokens after a
// decision: T <- min(B, T + r * elapsed), admit n iff T >= n, then T - n. Reported: remaining
// floor(T), retry_after (n - T) / r, reset_after (B - T) / r, no delay.
template <>
struct Row<TokenBucketAlgo> {
  static constexpr Shape shape{10, ratelimit::per_second(2)};

  // Cost 10 on a fresh key at 7 s: T = 10 - 10 = 0, reset 10 / 2 = 5 s.
  static constexpr Decision whole_at_7s = admitted(10, 0, 5s);

  // The i-th unit request at 0: T = 10 - i, reset i / 2 s.
  static constexpr Decision unit(std::int64_t i) { return admitted(10, 10 - i, i * 500ms); }
  // The 11th: T = 0, retry (1 - 0) / 2 = 500 ms, reset 10 / 2 = 5 s.
  static constexpr Decision unit_denied = denied(10, 0, 500ms, 5s);

  static constexpr DenialRow denial{
      .at = 0ms,
      .first_cost = 7,
      .first = admitted(10, 3, 3500ms),  // T = 3, reset (10 - 3) / 2 = 3.5 s
      .partial_retry = 500ms,            // cost 4: (4 - 3) / 2
      .rest = admitted(10, 0, 5s),       // cost 3: T = 0, reset 10 / 2
      .deny_at = 0ms,
      // T = 0: (n - 0) / 2 for n = 1, 3, 10.
      .denials = {{{1, 500ms}, {3, 1500ms}, {10, 5s}}},
      .reset_after = 5s,
      .later = 250ms,  // T = 0.5: 250 ms less for every cost, reset (10 - 0.5) / 2 = 4.75 s
      .pass_cost = 3,
      .remaining_1ms_before = 2,    // at 1.499 s T = 2.998
      .pass = admitted(10, 0, 5s),  // at 1.5 s T = 3: exactly cost 3, T = 0 again
  };

  static constexpr NeverRow never{
      .spend_at = 0ms,
      .cost = 4,
      .spent = admitted(10, 6, 2s),  // T = 6, reset (10 - 6) / 2
      .ask_at = 0ms,
      .never = denied(10, 6, Decision::never, 2s),
      .peek = admitted(10, 6, 2s),
  };

  static constexpr PeekRow peek{
      .spend_at = 0ms,
      .cost = 3,
      .spent = admitted(10, 7, 1500ms),  // T = 7, reset (10 - 7) / 2
      .peek_at = 0ms,
      .peek = admitted(10, 7, 1500ms),         // T = 7 as it is
      .unit = admitted(10, 6, 2s),             // T = 6, reset (10 - 6) / 2
      .rest = admitted(10, 0, 5s),             // cost 6: T = 0
      .spent_peek = denied(10, 0, 500ms, 5s),  // T = 0: (1 - 0) / 2
      .later_at = 750ms,
      .later_peek = admitted(10, 1, 4250ms),  // T = 2 x 0.75 = 1.5: floor 1, (10 - 1.5) / 2
      .later_unit = admitted(10, 0, 4750ms),  // T = 0.5: floor 0, (10 - 0.5) / 2
  };

  static constexpr ResetRow reset{
      .at = 0ms,
      .k_cost = 10,
      .k_spent = admitted(10, 0, 5s),
      .j_cost = 4,
      .j_spent = admitted(10, 6, 2s),
      .reset_at = 0ms,
      .k_before = denied(10, 0, 500ms, 5s),
      .k_again = admitted(10, 0, 5s),
      .j_after = admitted(10, 6, 2s),
  };

  static constexpr StepBackRow step_back{
      .at = 10s,
      .spent = admitted(10, 0, 5s),
      .back_to = 4s,  // read at 4 s the bucket would be full; decided at 10 s, T = 0
      .back = denied(10, 0, 500ms, 5s),
      .after = admitted(10, 0, 5s),  // 10.5 s: T = 1 -> 0
      .back_again_to = 3s,
      .back_again_cost = 1,
      .back_again = denied(10, 0, 500ms, 5s),  // decided at 10.5 s: T = 0
      .other = admitted(10, 9, 500ms),         // fresh at 3 s: T = 9
  };

  // Refunds: owed = t0 + n / r - t (the part time has not refilled), at <- max(at - owed, t).
  // Penalties: at <- max(at, t) + n / r, the backlog at most 2B / r = 10 s.
  static constexpr AdjustRow adjust{
      .at = 0ms,
      .cost = 4,
      .taken = admitted(10, 6, 2s),  // T = 6: the bucket is full again at 4 / 2 = 2 s
      // At 1 s, refund 3: owed = 0 + 3 / 2 - 1 = 0.5 s (time refilled 2 of the 3), so the full
      // instant moves from 2 s to 1.5 s: T = 10 - 0.5 x 2 = 9 (8 without the refund).
      .refund_at = 1s,
      .refund_cost = 3,
      .refunded = admitted(10, 9, 500ms),
      // "j" takes 4 at 0; at 2 s a refund of 4 owes 0 + 4 / 2 - 2 = 0: time has refilled the
      // whole take (the bucket is full), nothing is given back.
      .late_cost = 4,
      .late_at = 2s,
      .late = fresh(10),
      // 14 on a fresh key: backlog 14 / 2 = 7 s, T = -4: a unit waits until T = 1, (1 + 4) / 2
      // = 2.5 s, instead of 0; reset 7 s.
      .penalty_cost = 14,
      .penalized = denied(10, 0, 2500ms, 7s),
      .pass = admitted(10, 0, 5s),  // at 2.5 s T = 1 -> 0
      // 1000 counts as 2B = 20: backlog 10 s, T = -10: (1 + 10) / 2 = 5.5 s.
      .capped = denied(10, 0, 5500ms, 10s),
  };

  // Reservations: backlog D (tokens owed, B - T), wait w = max(0, D + n - B) / r; refused if
  // w > max_wait or D + n > 2B = 20 (retry_after: the larger excess / r), else D <- D + n.
  static constexpr ReserveRow reserve{
      .spent_cost = 8,
      .spent = admitted(10, 2, 4s),  // T = 2, full again at 8 / 2 = 4 s
      // D = 8: w = (8 + 5 - 10) / 2 = 1.5 s; D = 13 (T = -3): reset 13 / 2 = 6.5 s.
      .cost = 5,
      .reserved = admitted(10, 0, 6500ms, 1500ms),
      // 10 more: w = (13 + 10 - 10) / 2 = 6.5 s, 5.5 s past the 1 s bound; the debt would be
      // 23, 3 past 2B (1.5 s): retry_after 5.5 s.
      .late_wait = 1s,
      .late = denied(10, 0, 5500ms, 6500ms),
      .over_cost = 8,  // 13 + 8 = 21: 1 token past 2B, (21 - 20) / 2 = 0.5 s
      .over = denied(10, 0, 500ms, 6500ms),
      // At 1 s (due at 1.5 s) the 5 go back: full at 6.5 - 5 / 2 = 4 s, D = (4 - 1) x 2 = 6,
      // T = 4: as if only the take of 8 at 0 had happened.
      .cancel_at = 1s,
      .cancelled = admitted(10, 4, 3s),
      // 5 of a full bucket: w = 0, T = 5, full at 2.5 s.
      .now_cost = 5,
      .now = admitted(10, 5, 2500ms),
      // At 1 ms the 5 are past due: nothing back. D = 5 - 0.002 = 4.998, remaining 10 - ceil(D).
      .kept = admitted(10, 5, 2499ms),
      // After 10 at 0 (D = 10): 2 more have w = (10 + 2 - 10) / 2 = 1 s <= 1 s, D = 12; then 1
      // more: w = (12 + 1 - 10) / 2 = 1.5 s, 0.5 s past the bound.
      .wait = 1s,
      .edge = admitted(10, 0, 6s, 1s),
      .past = denied(10, 0, 500ms, 6s),
  };
};

// --- LeakyBucket --------------------------------------------------------------------------------
// A queue of Q = 10 units leaking at r = 2/s: a unit leaks in 500 ms, a full queue in 5 s. Level
// L >= 0 drains at r; admit n iff L + n <= Q, after waiting delay = L / r behind the queued work,
// then L <- L + n. Reported: remaining floor(Q - L), retry_after (L + n - Q) / r, reset_after
// L / r, delay L / r before the request joined.
template <>
struct Row<LeakyBucketAlgo> {
  static constexpr Shape shape{10, ratelimit::per_second(2)};

  // Cost 10 on an empty queue at 7 s: no delay, L = 10, reset 10 / 2 = 5 s.
  static constexpr Decision whole_at_7s = admitted(10, 0, 5s, 0ms);

  // The i-th unit at 0 waits behind L = i - 1: delay (i - 1) / 2 s; then L = i, reset i / 2 s.
  static constexpr Decision unit(std::int64_t i) {
    return admitted(10, 10 - i, i * 500ms, (i - 1) * 500ms);
  }
  // The 11th: L = 10, retry (10 + 1 - 10) / 2 = 500 ms, reset 10 / 2 = 5 s.
  static constexpr Decision unit_denied = denied(10, 0, 500ms, 5s);

  static constexpr DenialRow denial{
      .at = 0ms,
      .first_cost = 7,
      .first = admitted(10, 3, 3500ms, 0ms),  // L = 7, reset 7 / 2, no wait
      .partial_retry = 500ms,                 // cost 4: (7 + 4 - 10) / 2
      .rest = admitted(10, 0, 5s, 3500ms),    // cost 3 waits 7 / 2, then L = 10
      .deny_at = 0ms,
      // L = 10: (10 + n - 10) / 2 for n = 1, 3, 10.
      .denials = {{{1, 500ms}, {3, 1500ms}, {10, 5s}}},
      .reset_after = 5s,
      .later = 250ms,  // L = 9.5: 250 ms less for every cost, reset 9.5 / 2 = 4.75 s
      .pass_cost = 3,
      .remaining_1ms_before = 2,            // at 1.499 s L = 7.002: floor(10 - 7.002)
      .pass = admitted(10, 0, 5s, 3500ms),  // at 1.5 s L = 7: cost 3 waits 7 / 2, L = 10
  };

  static constexpr NeverRow never{
      .spend_at = 0ms,
      .cost = 4,
      .spent = admitted(10, 6, 2s, 0ms),  // L = 4, reset 4 / 2
      .ask_at = 0ms,
      .never = denied(10, 6, Decision::never, 2s),
      .peek = admitted(10, 6, 2s, 2s),  // a unit would wait behind L = 4: 2 s
  };

  static constexpr PeekRow peek{
      .spend_at = 0ms,
      .cost = 3,
      .spent = admitted(10, 7, 1500ms, 0ms),  // L = 3
      .peek_at = 0ms,
      .peek = admitted(10, 7, 1500ms, 1500ms),  // a unit would wait 3 / 2 = 1.5 s
      .unit = admitted(10, 6, 2s, 1500ms),      // it waits 1.5 s, L = 4
      .rest = admitted(10, 0, 5s, 2s),          // cost 6 waits 4 / 2 = 2 s, L = 10
      .spent_peek = denied(10, 0, 500ms, 5s),   // L = 10: (10 + 1 - 10) / 2
      .later_at = 750ms,
      // L = 10 - 2 x 0.75 = 8.5: a unit fits, waits 8.5 / 2 = 4.25 s; remaining floor(1.5).
      .later_peek = admitted(10, 1, 4250ms, 4250ms),
      .later_unit = admitted(10, 0, 4750ms, 4250ms),  // L = 9.5: reset 9.5 / 2
  };

  static constexpr ResetRow reset{
      .at = 0ms,
      .k_cost = 10,
      .k_spent = admitted(10, 0, 5s, 0ms),
      .j_cost = 4,
      .j_spent = admitted(10, 6, 2s, 0ms),
      .reset_at = 0ms,
      .k_before = denied(10, 0, 500ms, 5s),
      .k_again = admitted(10, 0, 5s, 0ms),
      .j_after = admitted(10, 6, 2s, 2s),  // a unit would wait behind L = 4
  };

  static constexpr StepBackRow step_back{
      .at = 10s,
      .spent = admitted(10, 0, 5s, 0ms),
      .back_to = 4s,  // decided at 10 s, where L = 10
      .back = denied(10, 0, 500ms, 5s),
      .after = admitted(10, 0, 5s, 4500ms),  // 10.5 s: L = 9, waits 9 / 2, L = 10
      .back_again_to = 3s,
      .back_again_cost = 1,
      .back_again = denied(10, 0, 500ms, 5s),  // decided at 10.5 s: L = 10
      .other = admitted(10, 9, 500ms, 0ms),    // empty at 3 s: no wait, L = 1
  };

  // The same GCRA steps as the token bucket, on the level L (see its row).
  static constexpr AdjustRow adjust{
      .at = 0ms,
      .cost = 4,
      .taken = admitted(10, 6, 2s, 0ms),  // L = 4
      // At 1 s, refund 3: owed 0.5 s, the queue empties at 1.5 s instead of 2 s: L = 1, a unit
      // would wait 1 / 2 = 0.5 s.
      .refund_at = 1s,
      .refund_cost = 3,
      .refunded = admitted(10, 9, 500ms, 500ms),
      // "j": L = 4 at 0; at 2 s the queue has drained the take: a refund of 4 owes nothing.
      .late_cost = 4,
      .late_at = 2s,
      .late = fresh(10),
      // 14 on an empty queue: L = 14, a unit fits once L <= 9: in (14 - 9) / 2 = 2.5 s.
      .penalty_cost = 14,
      .penalized = denied(10, 0, 2500ms, 7s),
      .pass = admitted(10, 0, 5s, 4500ms),   // at 2.5 s L = 9: waits 4.5 s, L = 10
      .capped = denied(10, 0, 5500ms, 10s),  // L = 20: (20 + 1 - 10) / 2
  };

  // Reservations: the level L may pass Q into debt; the units are due when the queue ahead of
  // them has leaked, w = L / r; refused if w > max_wait or L + n > 2Q = 20 (retry_after: the
  // larger excess / r), else L <- L + n.
  static constexpr ReserveRow reserve{
      .spent_cost = 8,
      .spent = admitted(10, 2, 4s, 0ms),  // L = 8
      // w = 8 / 2 = 4 s; L = 13: reset 6.5 s.
      .cost = 5,
      .reserved = admitted(10, 0, 6500ms, 4s),
      // 10 more: w = 13 / 2 = 6.5 s, 5.5 s past the 1 s bound; L would be 23, 3 past 2Q (1.5 s).
      .late_wait = 1s,
      .late = denied(10, 0, 5500ms, 6500ms),
      .over_cost = 8,  // 13 + 8 = 21: (21 - 20) / 2 = 0.5 s
      .over = denied(10, 0, 500ms, 6500ms),
      // At 1 s (due at 4 s) the 5 go back: L = 13 - 2 - 5 = 6, a unit waits 6 / 2 = 3 s.
      .cancel_at = 1s,
      .cancelled = admitted(10, 4, 3s, 3s),
      .now_cost = 5,
      .now = admitted(10, 5, 2500ms, 0ms),  // an empty queue: due at once, L = 5
      // At 1 ms: past due, nothing back. L = 4.998: remaining 10 - ceil(L), a unit waits L / 2.
      .kept = admitted(10, 5, 2499ms, 2499ms),
      // After 10 at 0 (L = 10): 2 more wait 10 / 2 = 5 s <= 5 s, L = 12; then 1 more waits
      // 12 / 2 = 6 s, 1 s past the bound.
      .wait = 5s,
      .edge = admitted(10, 0, 6s, 5s),
      .past = denied(10, 0, 1s, 6s),
  };
};

// --- FixedWindow --------------------------------------------------------------------------------
// N = 3 per window W = 1 s; window k = [k s, (k + 1) s), count c of the current window. Admit n
// iff c + n <= N. Reported: remaining N - c, retry_after and reset_after the time to the window's
// end (reset 0 while the current window has counted nothing: fresh).
template <>
struct Row<FixedWindowAlgo> {
  static constexpr Shape shape{3, ratelimit::Rate{3, 1s}};

  // Cost 3 at 7 s (window 7 ends at 8 s): c = 3.
  static constexpr Decision whole_at_7s = admitted(3, 0, 1s);

  // The i-th unit at 0: c = i, window 0 ends in 1 s.
  static constexpr Decision unit(std::int64_t i) { return admitted(3, 3 - i, 1s); }
  // The 4th: c + 1 > 3 until window 1, 1 s away.
  static constexpr Decision unit_denied = denied(3, 0, 1s, 1s);

  static constexpr DenialRow denial{
      .at = 400ms,
      .first_cost = 1,
      .first = admitted(3, 2, 600ms),  // c = 1, window 0 ends in 600 ms
      .partial_retry = 600ms,          // cost 3: 1 + 3 > 3 until window 1
      .rest = admitted(3, 0, 600ms),   // cost 2: c = 3
      .deny_at = 400ms,
      // c = 3: every cost waits for window 1, 600 ms away.
      .denials = {{{1, 600ms}, {2, 600ms}, {3, 600ms}}},
      .reset_after = 600ms,
      .later = 300ms,  // 700 ms: the window ends 300 ms sooner
      .pass_cost = 3,
      .remaining_1ms_before = 0,   // 0.999 s: still window 0, c = 3
      .pass = admitted(3, 0, 1s),  // at 1 s window 1 opens: c = 3, it ends at 2 s
  };

  static constexpr NeverRow never{
      .spend_at = 100ms,
      .cost = 1,
      .spent = admitted(3, 2, 900ms),  // c = 1, window 0 ends in 900 ms
      .ask_at = 100ms,
      .never = denied(3, 2, Decision::never, 900ms),
      .peek = admitted(3, 2, 900ms),
  };

  static constexpr PeekRow peek{
      .spend_at = 250ms,
      .cost = 2,
      .spent = admitted(3, 1, 750ms),  // c = 2, window 0 ends in 750 ms
      .peek_at = 250ms,
      .peek = admitted(3, 1, 750ms),
      .unit = admitted(3, 0, 750ms),  // c = 3
      .rest = std::nullopt,
      .spent_peek = denied(3, 0, 750ms, 750ms),  // until window 1
      .later_at = 1250ms,
      .later_peek = fresh(3),               // window 1 has counted nothing
      .later_unit = admitted(3, 2, 750ms),  // c = 1, window 1 ends at 2 s
  };

  static constexpr ResetRow reset{
      .at = 250ms,
      .k_cost = 3,
      .k_spent = admitted(3, 0, 750ms),
      .j_cost = 2,
      .j_spent = admitted(3, 1, 750ms),
      .reset_at = 250ms,
      .k_before = denied(3, 0, 750ms, 750ms),
      .k_again = admitted(3, 0, 750ms),
      .j_after = admitted(3, 1, 750ms),
  };

  static constexpr StepBackRow step_back{
      .at = 1500ms,
      .spent = admitted(3, 0, 500ms),  // window 1 full, ends at 2 s
      // 0.9 s is in window 0, where the key counted nothing; decided at 1.5 s, window 1 is full.
      .back_to = 900ms,
      .back = denied(3, 0, 500ms, 500ms),
      .after = admitted(3, 2, 1s),  // 2 s: window 2 opens, c = 1
      .back_again_to = 1200ms,
      .back_again_cost = 1,
      .back_again = admitted(3, 1, 1s),  // decided at 2 s: window 2, c = 2
      .other = admitted(3, 2, 800ms),    // its own time, 1.2 s: window 1, ends in 800 ms
  };

  // Refunds: min(n, c) off the count if the take's window is t's, else nothing. Penalties:
  // c <- min(c + n, 2N = 6).
  static constexpr AdjustRow adjust{
      .at = 200ms,
      .cost = 2,
      .taken = admitted(3, 1, 800ms),  // c = 2, window 0 ends in 800 ms
      .refund_at = 500ms,              // still window 0: c = 2 - 1 = 1
      .refund_cost = 1,
      .refunded = admitted(3, 2, 500ms),
      .late_cost = 2,
      .late_at = 1200ms,  // window 1: the take left with window 0, nothing to give back
      .late = fresh(3),
      .penalty_cost = 5,
      .penalized = denied(3, 0, 800ms, 800ms),  // c = 5 > 3 until window 1
      .pass = admitted(3, 2, 1s),               // at 1 s: window 1, c = 1
      .capped = denied(3, 0, 800ms, 800ms),     // c = 6
  };
};

// --- SlidingLog ---------------------------------------------------------------------------------
// N = 3 in any window (t - W, t] with W = 1 s; the log holds each admitted unit's time. Admit n
// iff |log| + n <= N. Reported: remaining N - |log|, retry_after e + W - t for the
// (|log| + n - N)-th oldest entry e, reset_after newest + W - t.
template <>
struct Row<SlidingLogAlgo> {
  static constexpr Shape shape{3, ratelimit::Rate{3, 1s}};

  // Cost 3 at 7 s: log {7, 7, 7} s, the newest leaves 1 s later.
  static constexpr Decision whole_at_7s = admitted(3, 0, 1s);

  // The i-th unit at 0: |log| = i, newest 0 + 1 s - 0.
  static constexpr Decision unit(std::int64_t i) { return admitted(3, 3 - i, 1s); }
  // The 4th: the 1st oldest (0) leaves at 0 + 1 s; reset likewise.
  static constexpr Decision unit_denied = denied(3, 0, 1s, 1s);

  static constexpr DenialRow denial{
      .at = 0ms,
      .first_cost = 1,
      .first = admitted(3, 2, 1s),  // log {0}
      .partial_retry = 1s,          // cost 3: the (1 + 3 - 3) = 1st oldest, 0, leaves at 1 s
      .rest = admitted(3, 0, 1s),   // cost 2: log {0, 0, 0}
      .deny_at = 600ms,
      // The 1st, 2nd and 3rd oldest are all stamped 0: 0 + 1000 - 600 ms for every cost.
      .denials = {{{1, 400ms}, {2, 400ms}, {3, 400ms}}},
      .reset_after = 400ms,
      .later = 300ms,  // 900 ms: 100 ms left for every cost
      .pass_cost = 3,
      .remaining_1ms_before = 0,   // 0.999 s: the three entries at 0 still count
      .pass = admitted(3, 0, 1s),  // at 1 s the entries at 0 = t - W no longer count
  };

  static constexpr NeverRow never{
      .spend_at = 0ms,
      .cost = 1,
      .spent = admitted(3, 2, 1s),  // log {0}
      .ask_at = 250ms,
      .never = denied(3, 2, Decision::never, 750ms),  // reset 0 + 1000 - 250
      .peek = admitted(3, 2, 750ms),
  };

  static constexpr PeekRow peek{
      .spend_at = 0ms,
      .cost = 2,
      .spent = admitted(3, 1, 1s),  // log {0, 0}
      .peek_at = 100ms,
      .peek = admitted(3, 1, 900ms),  // reset 0 + 1000 - 100
      .unit = admitted(3, 0, 1s),     // log {0, 0, 100}
      .rest = std::nullopt,
      .spent_peek = denied(3, 0, 900ms, 1s),  // the oldest, 0, leaves in 900 ms; newest 100
      .later_at = 1s,
      .later_peek = admitted(3, 2, 100ms),  // the entries at 0 left: log {100}, 100 + 1000 - 1000
      .later_unit = admitted(3, 1, 1s),     // log {100, 1000}
  };

  static constexpr ResetRow reset{
      .at = 0ms,
      .k_cost = 3,
      .k_spent = admitted(3, 0, 1s),
      .j_cost = 1,
      .j_spent = admitted(3, 2, 1s),
      .reset_at = 0ms,
      .k_before = denied(3, 0, 1s, 1s),
      .k_again = admitted(3, 0, 1s),
      .j_after = admitted(3, 2, 1s),
  };

  static constexpr StepBackRow step_back{
      .at = 10s,
      .spent = admitted(3, 0, 1s),  // log {10, 10, 10} s
      .back_to = 4s,                // decided at 10 s: the oldest leaves at 11 s
      .back = denied(3, 0, 1s, 1s),
      .after = admitted(3, 2, 1s),  // 11 s: the entries at 10 s = t - W leave; log {11}
      .back_again_to = 10200ms,
      .back_again_cost = 2,
      .back_again = admitted(3, 0, 1s),  // decided at 11 s: log {11, 11, 11}
      .other = admitted(3, 2, 1s),       // its own time, 10.2 s
  };

  // Refunds: min(n, its units) off the entry stamped t0 while it is in the window. Penalties:
  // min(n, 2N - live) units logged at t.
  static constexpr AdjustRow adjust{
      .at = 200ms,
      .cost = 2,
      .taken = admitted(3, 1, 1s),  // log {0.2, 0.2}
      .refund_at = 500ms,           // log {0.2}: reset 0.2 + 1 - 0.5
      .refund_cost = 1,
      .refunded = admitted(3, 2, 700ms),
      .late_cost = 2,
      .late_at = 1200ms,  // the entry at 0.2 = t - W has left: nothing to give back
      .late = fresh(3),
      .penalty_cost = 5,  // 5 units at 0.2: a unit waits for the 3rd oldest to leave, at 1.2 s
      .penalized = denied(3, 0, 1s, 1s),
      .pass = admitted(3, 2, 1s),      // at 1.2 s the five left: log {1.2}
      .capped = denied(3, 0, 1s, 1s),  // 2N = 6 units at 0.2
  };
};

// --- SlidingCounter -----------------------------------------------------------------------------
// N = 10 per window W = 1 s; window k = [k s, (k + 1) s), e = t - kW, c counts window k and p
// window k - 1. Estimate E = c + p (W - e) / W; admit n iff E + n <= N. Reported: remaining
// floor(N - E), retry_after the exact earliest instant, reset_after (k + 2) W - t if c > 0,
// (k + 1) W - t if only p > 0.
template <>
struct Row<SlidingCounterAlgo> {
  static constexpr Shape shape{10, ratelimit::Rate{10, 1s}};

  // Cost 10 at 7 s (k = 7): c = 10, p = 0; reset (7 + 2) s - 7 s.
  static constexpr Decision whole_at_7s = admitted(10, 0, 2s);

  // The i-th unit at 0: c = i, reset (0 + 2) s - 0.
  static constexpr Decision unit(std::int64_t i) { return admitted(10, 10 - i, 2s); }
  // The 11th: no room in window 0; in window 1 (c = 0, p = 10) 1 + 10 (W - e) / W <= 10 iff
  // e >= 100 ms: at 1.1 s. Reset 2 s.
  static constexpr Decision unit_denied = denied(10, 0, 1100ms, 2s);

  static constexpr DenialRow denial{
      .at = 0ms,
      .first_cost = 5,
      .first = admitted(10, 5, 2s),  // c = 5
      // Cost 6: 5 + 6 > 10 in window 0; in window 1 (p = 5) 6 + 5 (W - e) / W <= 10 iff
      // e >= W / 5 = 200 ms: at 1.2 s.
      .partial_retry = 1200ms,
      .rest = admitted(10, 0, 2s),  // cost 5: c = 10
      .deny_at = 500ms,
      // c = 10 in window 0; in window 1 (p = 10) n + 10 (W - e) / W <= 10 iff 10 e >= n W:
      // cost 1 at 1.1 s, cost 5 at 1.5 s, cost 10 at e = W, i.e. 2 s. Reset 2 s - 0.5 s.
      .denials = {{{1, 600ms}, {5, 1s}, {10, 1500ms}}},
      .reset_after = 1500ms,
      .later = 250ms,  // 750 ms, still window 0: the same instants, 250 ms closer
      .pass_cost = 1,
      .remaining_1ms_before = 0,  // 1.099 s: E = 10 x 901 / 1000 = 9.01, floor(0.99)
      // At 1.1 s: E = 10 x 900 / 1000 = 9, 9 + 1 <= 10; then c = 1, E = 10: reset 3 s - 1.1 s.
      .pass = admitted(10, 0, 1900ms),
  };

  static constexpr NeverRow never{
      .spend_at = 400ms,
      .cost = 3,
      .spent = admitted(10, 7, 1600ms),  // c = 3, reset 2 s - 0.4 s
      .ask_at = 400ms,
      .never = denied(10, 7, Decision::never, 1600ms),
      .peek = admitted(10, 7, 1600ms),
  };

  static constexpr PeekRow peek{
      .spend_at = 0ms,
      .cost = 9,
      .spent = admitted(10, 1, 2s),  // c = 9
      .peek_at = 0ms,
      .peek = admitted(10, 1, 2s),
      .unit = admitted(10, 0, 2s),  // c = 10
      .rest = std::nullopt,
      .spent_peek = denied(10, 0, 1100ms, 2s),  // as unit_denied
      .later_at = 1100ms,
      // k = 1, e = 100 ms, c = 0, p = 10: E = 9, remaining 1; only p: reset 2 s - 1.1 s.
      .later_peek = admitted(10, 1, 900ms),
      .later_unit = admitted(10, 0, 1900ms),  // c = 1: E = 10; reset 3 s - 1.1 s
  };

  static constexpr ResetRow reset{
      .at = 0ms,
      .k_cost = 10,
      .k_spent = admitted(10, 0, 2s),
      .j_cost = 4,
      .j_spent = admitted(10, 6, 2s),
      .reset_at = 1500ms,
      .k_before = admitted(10, 5, 500ms),  // k = 1, e = 500 ms, p = 10: E = 5; reset 2 s - 1.5 s
      .k_again = admitted(10, 0, 1500ms),  // fresh: c = 10, p = 0; reset 3 s - 1.5 s
      .j_after = admitted(10, 8, 500ms),   // p = 4: E = 2
  };

  static constexpr StepBackRow step_back{
      .at = 10s,
      .spent = admitted(10, 0, 2s),  // k = 10, c = 10
      // Decided at 10 s: a unit fits at 11.1 s (as unit_denied, a window later); reset 12 s.
      .back_to = 4s,
      .back = denied(10, 0, 1100ms, 2s),
      .after = admitted(10, 0, 1900ms),  // 11.1 s: E = 9 + 1; reset 13 s - 11.1 s
      .back_again_to = 5s,
      .back_again_cost = 1,
      // Decided at 11.1 s (c = 1, p = 10): 2 + 10 (W - e) / W <= 10 iff e >= 200 ms, at 11.2 s.
      .back_again = denied(10, 0, 100ms, 1900ms),
      .other = admitted(10, 9, 2s),  // its own time, 5 s: c = 1, reset 7 s - 5 s
  };

  // Refunds: min(n, c) off c if the take's window is k, min(n, p) off p if it is k - 1, else
  // nothing. Penalties: c <- min(c + n, 2N = 20).
  static constexpr AdjustRow adjust{
      .at = 200ms,
      .cost = 4,
      .taken = admitted(10, 6, 1800ms),  // c = 4, reset 2 s - 0.2 s
      // At 1.5 s (k = 1, e = 500 ms) the take is p = 4; refund 3: p = 1, E = 1 x 0.5 = 0.5
      // (2 without it): remaining floor(9.5); only p: reset 2 s - 1.5 s.
      .refund_at = 1500ms,
      .refund_cost = 3,
      .refunded = admitted(10, 9, 500ms),
      .late_cost = 4,
      .late_at = 2500ms,  // k = 2: window 0 no longer weighs, nothing to give back
      .late = fresh(10),
      // c = 15: a unit fits in window 1 once 1 + 15 (W - e) / W <= 10, e >= 0.4 s: at 1.4 s.
      .penalty_cost = 15,
      .penalized = denied(10, 0, 1200ms, 1800ms),
      .pass = admitted(10, 0, 1600ms),  // 1.4 s: E = 9 + 1; reset 3 s - 1.4 s
      // c = 20: 1 + 20 (W - e) / W <= 10 iff e >= 0.55 s: at 1.55 s.
      .capped = denied(10, 0, 1350ms, 1800ms),
  };
};

// --- AnchoredWindow (the test-only sixth algorithm) ---------------------------------------------
// N = 3 per window of W = 1 s that opens at the key's first admission at or after the previous
// window's end (support/anchored_window.hpp). Admit n iff c + n <= N. Reported: remaining N - c,
// retry_after and reset_after the window's end - t (reset_after 0 when nothing is counted).
template <>
struct Row<AnchoredWindowAlgo> {
  static constexpr Shape shape{3, ratelimit::Rate{3, 1s}};

  // Cost 3 at 7 s on a fresh key: the window opens at 7 s, ends at 8 s; c = 3.
  static constexpr Decision whole_at_7s = admitted(3, 0, 1s);

  // The i-th unit at 0: the window opened at 0 with the first, c = i, it ends in 1 s.
  static constexpr Decision unit(std::int64_t i) { return admitted(3, 3 - i, 1s); }
  // The 4th: c + 1 > 3 until the window ends, 1 s away.
  static constexpr Decision unit_denied = denied(3, 0, 1s, 1s);

  static constexpr DenialRow denial{
      .at = 400ms,
      .first_cost = 1,
      .first = admitted(3, 2, 1s),  // the window opens at 0.4 s: c = 1, it ends at 1.4 s
      .partial_retry = 1s,          // cost 3: 1 + 3 > 3 until 1.4 s
      .rest = admitted(3, 0, 1s),   // cost 2: c = 3
      .deny_at = 400ms,
      // c = 3: every cost waits for the window's end, 1 s away.
      .denials = {{{1, 1s}, {2, 1s}, {3, 1s}}},
      .reset_after = 1s,
      .later = 300ms,  // 0.7 s: the end is 300 ms sooner
      .pass_cost = 3,
      .remaining_1ms_before = 0,   // 1.399 s: still the window of 0.4 s, c = 3
      .pass = admitted(3, 0, 1s),  // at 1.4 s it has ended: a window opens at 1.4 s, c = 3
  };

  static constexpr NeverRow never{
      .spend_at = 100ms,
      .cost = 1,
      .spent = admitted(3, 2, 1s),  // the window opens at 0.1 s: c = 1, it ends at 1.1 s
      .ask_at = 100ms,
      .never = denied(3, 2, Decision::never, 1s),
      .peek = admitted(3, 2, 1s),
  };

  static constexpr PeekRow peek{
      .spend_at = 250ms,
      .cost = 2,
      .spent = admitted(3, 1, 1s),  // the window opens at 0.25 s: c = 2, it ends at 1.25 s
      .peek_at = 250ms,
      .peek = admitted(3, 1, 1s),
      .unit = admitted(3, 0, 1s),  // c = 3
      .rest = std::nullopt,
      .spent_peek = denied(3, 0, 1s, 1s),  // until 1.25 s
      .later_at = 1250ms,                  // the window has ended: nothing counted
      .later_peek = fresh(3),
      .later_unit = admitted(3, 2, 1s),  // a window opens at 1.25 s: c = 1, it ends at 2.25 s
  };

  static constexpr ResetRow reset{
      .at = 250ms,
      .k_cost = 3,
      .k_spent = admitted(3, 0, 1s),  // k's window: 0.25 s to 1.25 s, c = 3
      .j_cost = 2,
      .j_spent = admitted(3, 1, 1s),  // j's own window, c = 2
      .reset_at = 250ms,
      .k_before = denied(3, 0, 1s, 1s),
      .k_again = admitted(3, 0, 1s),  // fresh again: a window opens at 0.25 s
      .j_after = admitted(3, 1, 1s),
  };

  static constexpr StepBackRow step_back{
      .at = 1500ms,
      .spent = admitted(3, 0, 1s),  // the window opens at 1.5 s, full, ends at 2.5 s
      // 0.9 s is before the key's latest time: decided at 1.5 s, where the window is full.
      .back_to = 900ms,
      .back = denied(3, 0, 1s, 1s),
      .after = admitted(3, 2, 1s),  // 2.5 s: the window has ended, one opens at 2.5 s, c = 1
      .back_again_to = 1200ms,
      .back_again_cost = 1,
      .back_again = admitted(3, 1, 1s),  // decided at 2.5 s: c = 2, the window ends at 3.5 s
      .other = admitted(3, 2, 1s),       // its own time, 1.2 s: its window ends at 2.2 s
  };
};

}  // namespace rltest::conformance
