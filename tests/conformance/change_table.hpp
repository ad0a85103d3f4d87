#pragma once
/// @file change_table.hpp
/// The conformance suite's expected values for "a key spent under other parameters"
/// (params_test.cpp), one `Change<Algo>` per algorithm of `rltest::Algorithms`, each derived in
/// a comment from the algorithm's definition like the rows of table.hpp (whose `shape` is the
/// parameters the key is first spent under). Apart from table.hpp only to keep each header short.

#include <chrono>
#include <cstdint>

#include <ratelimit/ratelimit.hpp>

#include "support/algorithms.hpp"
#include "support/expect.hpp"
#include "table.hpp"

namespace rltest::conformance {

/// One direction of ChangeRow: the spent key decided under other parameters.
struct ChangeTo {
  Shape shape;        ///< the parameters it is now decided under (same algorithm and name)
  nanoseconds at;     ///< when (>= the spend)
  Decision peek;      ///< a peek then: what a cost-1 request would get
  std::int64_t cost;  ///< then this cost is asked,
  Decision decision;  ///< and gets this
};

/// "A key spent under other parameters is decided under the new ones, never degraded, never
/// with more than a fresh key" (params_test.cpp): two keys are spent alike under the row's
/// shape, then one is decided under a larger limit and rate, the other under a smaller one.
struct ChangeRow {
  nanoseconds spend_at;  ///< when each key spends `spend_cost` under the row's shape
  std::int64_t spend_cost;
  Decision spent;
  ChangeTo larger;   ///< key "up": every parameter larger
  ChangeTo smaller;  ///< key "down": every parameter smaller
};

/// The primary template has none: params_test.cpp names the algorithm that lacks one.
template <class Algo>
struct Change;

template <>
struct Change<TokenBucketAlgo> {
  // The bucket keeps its instant `at` (when it is full again); the new rate prices its backlog.
  // Cost 6 at 0: T = 4, at = 6 / 2 = 3 s, reset 3 s.
  static constexpr ChangeRow row{
      .spend_at = 0ms,
      .spend_cost = 6,
      .spent = admitted(10, 4, 3s),
      // B = 20 at 4/s (250 ms a token, 5 s a whole refill), at 1 s: backlog 3 - 1 = 2 s, worth
      // 2 x 4 = 8 tokens: T = 12, reset 2 s. Cost 12: 2 s + 12 x 250 ms = 5 s <= 5 s, T = 0,
      // reset 5 s. (A fresh key would give 20.)
      .larger = {{20, ratelimit::per_second(4)}, 1s, admitted(20, 12, 2s), 12, admitted(20, 0, 5s)},
      // B = 2 at 1/s (a whole refill 2 s), at 500 ms: backlog 2.5 s > 2 s, T = -0.5 (remaining
      // 0). Cost 1 waits until 2.5 + 1 - 2 = 1.5 s, cost 2 until 2.5 s; reset 2.5 s.
      .smaller = {{2, ratelimit::per_second(1)},
                  500ms,
                  denied(2, 0, 1500ms, 2500ms),
                  2,
                  denied(2, 0, 2500ms, 2500ms)},
  };
};

template <>
struct Change<LeakyBucketAlgo> {
  // The queue keeps its instant `at` (when it is empty again); the new rate prices its level.
  // Cost 6 at 0: no wait, L = 6, at = 6 / 2 = 3 s, reset 3 s.
  static constexpr ChangeRow row{
      .spend_at = 0ms,
      .spend_cost = 6,
      .spent = admitted(10, 4, 3s, 0ms),
      // Q = 20 at 4/s, at 1 s: the queue empties in 2 s, L = 2 x 4 = 8: a unit would wait 2 s,
      // remaining 12, reset 2 s. Cost 12: 8 + 12 <= 20, waits 2 s, then L = 20, reset 5 s.
      .larger = {{20, ratelimit::per_second(4)},
                 1s,
                 admitted(20, 12, 2s, 2s),
                 12,
                 admitted(20, 0, 5s, 2s)},
      // Q = 2 at 1/s, at 500 ms: the queue empties in 2.5 s, L = 2.5 > 2 (remaining 0). Cost 1
      // waits until 2.5 + 1 - 2 = 1.5 s, cost 2 until 2.5 s; reset 2.5 s.
      .smaller = {{2, ratelimit::per_second(1)},
                  500ms,
                  denied(2, 0, 1500ms, 2500ms),
                  2,
                  denied(2, 0, 2500ms, 2500ms)},
  };
};

template <>
struct Change<FixedWindowAlgo> {
  // The count belongs to the key's latest time: under a new W it counts the new window that
  // holds that time. Cost 2 at 400 ms: c = 2, window 0 ends in 600 ms.
  static constexpr ChangeRow row{
      .spend_at = 400ms,
      .spend_cost = 2,
      .spent = admitted(3, 1, 600ms),
      // N = 6 per W = 2 s, at 500 ms: 0.4 s and 0.5 s are both in [0, 2 s), c = 2: remaining 4,
      // 1.5 s to the end. Cost 4: c = 6.
      .larger =
          {{6, ratelimit::Rate{6, 2s}}, 500ms, admitted(6, 4, 1500ms), 4, admitted(6, 0, 1500ms)},
      // N = 1 per W = 500 ms, at 450 ms: 0.4 s is in [0, 500 ms), c = 2 > 1 (remaining 0):
      // every cost waits for the window's end, 50 ms away.
      .smaller = {{1, ratelimit::Rate{1, 500ms}},
                  450ms,
                  denied(1, 0, 50ms, 50ms),
                  1,
                  denied(1, 0, 50ms, 50ms)},
  };
};

template <>
struct Change<SlidingLogAlgo> {
  // The log keeps its entries' times; the new W says which are live. Cost 2 at 400 ms: log
  // {0.4, 0.4} s, the newest leaves in 1 s.
  static constexpr ChangeRow row{
      .spend_at = 400ms,
      .spend_cost = 2,
      .spent = admitted(3, 1, 1s),
      // N = 6 in W = 2 s, at 500 ms: both live in (-1.5 s, 0.5 s]: remaining 4, reset
      // 0.4 + 2 - 0.5 = 1.9 s. Cost 4: |log| = 6, reset W = 2 s.
      .larger = {{6, ratelimit::Rate{6, 2s}}, 500ms, admitted(6, 4, 1900ms), 4, admitted(6, 0, 2s)},
      // N = 1 in W = 500 ms, at 450 ms: both live in (-50 ms, 450 ms], 2 > 1 (remaining 0).
      // Cost 1 waits for the (2 + 1 - 1) = 2nd oldest, 0.4 s: 0.4 + 0.5 - 0.45 = 450 ms; reset
      // likewise.
      .smaller = {{1, ratelimit::Rate{1, 500ms}},
                  450ms,
                  denied(1, 0, 450ms, 450ms),
                  1,
                  denied(1, 0, 450ms, 450ms)},
  };
};

template <>
struct Change<SlidingCounterAlgo> {
  // The counts belong to the key's latest time: under a new W, c counts the new window that
  // holds it (p the one before). Cost 5 at 400 ms: c = 5, reset 2 s - 0.4 s.
  static constexpr ChangeRow row{
      .spend_at = 400ms,
      .spend_cost = 5,
      .spent = admitted(10, 5, 1600ms),
      // N = 20 per W = 2 s, at 500 ms: k = 0 holds 0.4 s, c = 5, p = 0: E = 5, remaining 15,
      // reset (0 + 2) x 2 s - 0.5 s = 3.5 s. Cost 15: 5 + 15 <= 20.
      .larger = {{20, ratelimit::Rate{20, 2s}},
                 500ms,
                 admitted(20, 15, 3500ms),
                 15,
                 admitted(20, 0, 3500ms)},
      // N = 2 per W = 500 ms, at 450 ms: k = 0 holds 0.4 s, c = 5 > 2 (remaining 0), reset
      // 1 s - 0.45 s = 550 ms. In window 1 (p = 5) n + 5 (W - e) / W <= 2: cost 1 iff
      // e >= 0.8 W = 400 ms, at 0.9 s (450 ms away); cost 2 never in window 1, so at 1 s,
      // window 2 (550 ms away).
      .smaller = {{2, ratelimit::Rate{2, 500ms}},
                  450ms,
                  denied(2, 0, 450ms, 550ms),
                  2,
                  denied(2, 0, 550ms, 550ms)},
  };
};

template <>
struct Change<AnchoredWindowAlgo> {
  // The window keeps its start; the new W says where it ends. Cost 2 at 400 ms: the window
  // opens at 0.4 s, c = 2, it ends at 1.4 s.
  static constexpr ChangeRow row{
      .spend_at = 400ms,
      .spend_cost = 2,
      .spent = admitted(3, 1, 1s),
      // N = 6 per W = 2 s, at 500 ms: the window ends at 0.4 + 2 = 2.4 s, c = 2: remaining 4,
      // reset 1.9 s. Cost 4: c = 6.
      .larger =
          {{6, ratelimit::Rate{6, 2s}}, 500ms, admitted(6, 4, 1900ms), 4, admitted(6, 0, 1900ms)},
      // N = 1 per W = 500 ms, at 450 ms: the window ends at 0.9 s, c = 2 > 1 (remaining 0):
      // every cost waits 450 ms.
      .smaller = {{1, ratelimit::Rate{1, 500ms}},
                  450ms,
                  denied(1, 0, 450ms, 450ms),
                  1,
                  denied(1, 0, 450ms, 450ms)},
  };
};

}  // namespace rltest::conformance
