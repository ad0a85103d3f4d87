#pragma once
/// @file reference.hpp
/// Deliberately naive reference models of the five algorithms, written straight from the
/// README's definitions and sharing no code with the library. One object is one key's state;
/// `decide` answers a try_acquire (peek = false) or a peek (peek = true) at `now`. Reset = assign a
/// new object.
///
/// Conventions taken from the issue:
/// - a Decision describes the state after the decision; a denied request or a peek changes
///   nothing, so the state (and the key's latest time) changes only when a request is admitted;
/// - a request stamped before the key's latest recorded time is decided at that latest time;
/// - every duration is rounded up to 1 ns;
/// - a peek reports allowed/retry_after/delay of a cost-1 request and remaining/reset_after of
///   the state as it is.
///
/// Buckets keep exact rationals by scaling quantities by the period (so r * elapsed is an
/// integer); windows keep the list of admissions and count them; the log keeps one timestamp
/// per admitted unit; the sliding counter finds retry_after by searching the earliest
/// admissible instant instead of solving for it.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include <ratelimit/ratelimit.hpp>

namespace rltest::ref {

__extension__ using wide = __int128;  // products such as count x elapsed, exactly
using ratelimit::Decision;
using std::chrono::nanoseconds;

inline wide ceil_div(wide a, wide b) { return a <= 0 ? -((-a) / b) : (a + b - 1) / b; }
inline wide floor_div(wide a, wide b) { return a >= 0 ? a / b : -ceil_div(-a, b); }
inline nanoseconds to_ns(wide v) { return nanoseconds{static_cast<std::int64_t>(v)}; }

/// TokenBucket {capacity B, refill r = count/period}. T * period is kept as an integer: it
/// grows by count per ns, tops out at B * period, and a request of n costs n * period.
class TokenBucket {
 public:
  TokenBucket(std::int64_t capacity, ratelimit::Rate refill)
      : b_(capacity),
        count_(refill.count),
        period_(refill.period.count()),
        tokens_(wide{capacity} * period_) {}

  Decision decide(nanoseconds now, std::int64_t cost, bool peek) {
    const wide t = std::max<wide>(now.count(), last_);
    const wide full = wide{b_} * period_;
    const wide tokens = std::min(full, tokens_ + wide{count_} * (t - last_));
    const std::int64_t n = peek ? 1 : cost;
    Decision d{};
    d.limit = b_;
    wide after = tokens;
    if (n > b_) {
      d.retry_after = Decision::never;
    } else if (tokens >= wide{n} * period_) {
      d.allowed = true;
      if (!peek) {
        after = tokens - wide{n} * period_;
        tokens_ = after;
        last_ = t;
      }
    } else {
      d.retry_after = to_ns(ceil_div(wide{n} * period_ - tokens, count_));  // (n - T) / r
    }
    d.remaining = static_cast<std::int64_t>(floor_div(after, period_));  // floor(T)
    d.reset_after = to_ns(ceil_div(full - after, count_));               // (B - T) / r
    return d;
  }

 private:
  std::int64_t b_, count_, period_;
  wide tokens_;    // T * period at last_
  wide last_ = 0;  // ns: time of the latest admission
};

/// LeakyBucket {queue_size Q, leak r}: level L * period kept as an integer, draining by count
/// per ns, never below 0.
class LeakyBucket {
 public:
  LeakyBucket(std::int64_t queue_size, ratelimit::Rate leak)
      : q_(queue_size), count_(leak.count), period_(leak.period.count()) {}

  Decision decide(nanoseconds now, std::int64_t cost, bool peek) {
    const wide t = std::max<wide>(now.count(), last_);
    const wide level = std::max<wide>(0, level_ - wide{count_} * (t - last_));
    const wide full = wide{q_} * period_;
    const std::int64_t n = peek ? 1 : cost;
    Decision d{};
    d.limit = q_;
    wide after = level;
    if (n > q_) {
      d.retry_after = Decision::never;
    } else if (level + wide{n} * period_ <= full) {
      d.allowed = true;
      d.delay = to_ns(ceil_div(level, count_));  // L / r: behind the queued work
      if (!peek) {
        after = level + wide{n} * period_;
        level_ = after;
        last_ = t;
      }
    } else {
      d.retry_after = to_ns(ceil_div(level + wide{n} * period_ - full, count_));  // (L+n-Q)/r
    }
    d.remaining = static_cast<std::int64_t>(floor_div(full - after, period_));  // floor(Q - L)
    d.reset_after = to_ns(ceil_div(after, count_));                             // L / r
    return d;
  }

 private:
  std::int64_t q_, count_, period_;
  wide level_ = 0;  // L * period at last_
  wide last_ = 0;
};

/// An admission: n units at time `at` (ns).
struct Admission {
  std::int64_t at, n;
};

/// FixedWindow {N per W}: counts the admissions whose window floor(at / W) is the current one.
class FixedWindow {
 public:
  explicit FixedWindow(ratelimit::Rate r) : n_(r.count), w_(r.period.count()) {}

  Decision decide(nanoseconds now, std::int64_t cost, bool peek) {
    const std::int64_t t = std::max(now.count(), last_);
    const std::int64_t k = t / w_;
    std::int64_t c = 0;
    for (const auto& a : log_)
      if (a.at / w_ == k) c += a.n;
    const std::int64_t n = peek ? 1 : cost;
    Decision d{};
    d.limit = n_;
    if (n > n_) {
      d.retry_after = Decision::never;
    } else if (c + n <= n_) {
      d.allowed = true;
      if (!peek) {
        log_.push_back({t, n});
        last_ = t;
        c += n;
      }
    } else {
      d.retry_after = nanoseconds{(k + 1) * w_ - t};
    }
    d.remaining = n_ - c;
    d.reset_after = nanoseconds{c > 0 ? (k + 1) * w_ - t : 0};
    return d;
  }

 private:
  std::int64_t n_, w_;
  std::vector<Admission> log_;
  std::int64_t last_ = 0;
};

/// SlidingLog {N per W}: one timestamp per admitted unit; at t an entry counts iff it lies in
/// (t - W, t].
class SlidingLog {
 public:
  explicit SlidingLog(ratelimit::Rate r) : n_(r.count), w_(r.period.count()) {}

  Decision decide(nanoseconds now, std::int64_t cost, bool peek) {
    const std::int64_t t = std::max(now.count(), last_);
    std::vector<std::int64_t> live;
    for (const auto e : log_)
      if (e > t - w_ && e <= t) live.push_back(e);
    std::sort(live.begin(), live.end());
    const std::int64_t size = static_cast<std::int64_t>(live.size());
    const std::int64_t n = peek ? 1 : cost;
    Decision d{};
    d.limit = n_;
    if (n > n_) {
      d.retry_after = Decision::never;
    } else if (size + n <= n_) {
      d.allowed = true;
      if (!peek) {
        for (std::int64_t i = 0; i < n; ++i) {
          log_.push_back(t);
          live.push_back(t);
        }
        last_ = t;
      }
    } else {
      // The (|log| + n - N)-th oldest entry must leave: e + W - t.
      const auto e = live[static_cast<std::size_t>(size + n - n_ - 1)];
      d.retry_after = nanoseconds{e + w_ - t};
    }
    d.remaining = n_ - static_cast<std::int64_t>(live.size());
    d.reset_after = nanoseconds{live.empty() ? 0 : live.back() + w_ - t};
    return d;
  }

 private:
  std::int64_t n_, w_;
  std::vector<std::int64_t> log_;
  std::int64_t last_ = 0;
};

/// SlidingCounter {N per W}: c and p counted from the admissions in windows k and k - 1;
/// admit iff c + n + p (W - e) / W <= N, compared exactly after multiplying by W.
class SlidingCounter {
 public:
  explicit SlidingCounter(ratelimit::Rate r) : n_(r.count), w_(r.period.count()) {}

  Decision decide(nanoseconds now, std::int64_t cost, bool peek) {
    const std::int64_t t = std::max(now.count(), last_);
    const std::int64_t n = peek ? 1 : cost;
    Decision d{};
    d.limit = n_;
    if (n > n_) {
      d.retry_after = Decision::never;
    } else if (admits(t, n)) {
      d.allowed = true;
      if (!peek) {
        log_.push_back({t, n});
        last_ = t;
      }
    } else {
      // Nothing else happening, the estimate only falls with time (within a window it loses
      // the previous count's share, at a boundary c becomes p unchanged in value), and at
      // (k + 2) W both counts are 0: search the earliest admissible instant in (t, (k + 2) W].
      std::int64_t lo = t, hi = (t / w_ + 2) * w_;
      while (hi - lo > 1) {
        const std::int64_t mid = lo + (hi - lo) / 2;
        (admits(mid, n) ? hi : lo) = mid;
      }
      d.retry_after = nanoseconds{hi - t};
    }
    const std::int64_t k = t / w_;
    const std::int64_t e = t - k * w_;
    const wide free = wide{n_} * w_ - wide{count(k)} * w_ - wide{count(k - 1)} * (w_ - e);
    d.remaining = static_cast<std::int64_t>(std::max<wide>(0, floor_div(free, w_)));
    // Fresh again once neither the current nor the previous window holds an admission, i.e.
    // two windows after the window of the newest admission.
    std::int64_t newest_window = -1;
    for (const auto& a : log_) newest_window = std::max(newest_window, a.at / w_);
    const std::int64_t fresh_at = (newest_window + 2) * w_;
    d.reset_after = nanoseconds{newest_window >= 0 && fresh_at > t ? fresh_at - t : 0};
    return d;
  }

 private:
  std::int64_t count(std::int64_t window) const {
    std::int64_t c = 0;
    for (const auto& a : log_)
      if (a.at / w_ == window) c += a.n;
    return c;
  }

  bool admits(std::int64_t t, std::int64_t n) const {
    const std::int64_t k = t / w_;
    const std::int64_t e = t - k * w_;
    return wide{count(k) + n} * w_ + wide{count(k - 1)} * (w_ - e) <= wide{n_} * w_;
  }

  std::int64_t n_, w_;
  std::vector<Admission> log_;
  std::int64_t last_ = 0;
};

/// AnchoredWindow {N per W} (the test-only sixth algorithm): every admission logged; a window
/// opens at the first admission at or after the previous window's end and lasts W. Recomputed
/// from the whole log at every decision.
class AnchoredWindow {
 public:
  explicit AnchoredWindow(ratelimit::Rate r) : n_(r.count), w_(r.period.count()) {}

  Decision decide(nanoseconds now, std::int64_t cost, bool peek) {
    const std::int64_t t = std::max(now.count(), last_);
    // Replay the log: the window that holds the latest admission, and what it counted.
    std::int64_t start = 0, c = 0;
    bool open = false;
    for (const auto& a : log_) {
      if (!open || a.at >= start + w_) {
        start = a.at;
        c = 0;
        open = true;
      }
      c += a.n;
    }
    if (open && t >= start + w_) c = 0;  // that window has ended by t
    const std::int64_t n = peek ? 1 : cost;
    Decision d{};
    d.limit = n_;
    if (n > n_) {
      d.retry_after = Decision::never;
    } else if (c + n <= n_) {
      d.allowed = true;
      if (!peek) {
        if (c == 0) start = t;
        log_.push_back({t, n});
        last_ = t;
        c += n;
      }
    } else {
      d.retry_after = nanoseconds{start + w_ - t};
    }
    d.remaining = n_ - c;
    d.reset_after = nanoseconds{c > 0 ? start + w_ - t : 0};
    return d;
  }

 private:
  std::int64_t n_, w_;
  std::vector<Admission> log_;
  std::int64_t last_ = 0;
};

}  // namespace rltest::ref
