#pragma once
/// @file algorithms/sliding_log.hpp
/// Sliding log: the exact count of admitted requests in the last window.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/clock.hpp"
#include "../core/decision.hpp"
#include "../core/limiter.hpp"
#include "../core/rate.hpp"
#include "../core/storage.hpp"
#include "../core/wire.hpp"
#include "../lua/sliding_log.hpp"
#include "../memory/in_memory_storage.hpp"
#include "detail/window.hpp"
#include "detail/window_wire.hpp"

namespace ratelimit {

namespace detail {

/// The log's entries, oldest first, in a ring buffer: expiring the oldest is O(1) and the ring
/// never holds more entries than are live, so a key holds at most N entries. It also keeps the
/// sum of the entries' counts, so a decision reads only the entries that expire.
template <class Entry>
class EntryRing {
 public:
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::size_t capacity() const noexcept { return slots_.size(); }
  /// Sum of every held entry's count (units).
  std::int64_t units() const noexcept { return units_; }
  /// The i-th oldest entry, i < size().
  const Entry& operator[](std::size_t i) const noexcept { return slots_[slot(i)]; }
  const Entry& front() const noexcept { return (*this)[0]; }
  const Entry& back() const noexcept { return (*this)[size_ - 1]; }
  void pop_front() noexcept {
    units_ -= slots_[head_].count;
    if (++head_ == slots_.size()) head_ = 0;
    --size_;
  }
  /// Adds `n` units to the newest entry (same timestamp).
  void add_to_back(std::int64_t n) noexcept {
    slots_[slot(size_ - 1)].count += n;
    units_ += n;
  }
  /// Takes `n` <= its count off the i-th oldest entry. An entry left empty goes, unless it is
  /// the newest, which stays (with no units) as the key's latest time until a newer one
  /// replaces it (`push_back`): the same as the Redis log's header keeps.
  void take_from(std::size_t i, std::int64_t n) noexcept {
    slots_[slot(i)].count -= n;
    units_ -= n;
    if (slots_[slot(i)].count != 0 || i + 1 == size_) return;
    for (std::size_t j = i; j + 1 < size_; ++j) slots_[slot(j)] = slots_[slot(j + 1)];
    --size_;
  }
  /// Appends `e`, growing to at most `max_slots` slots (the caller keeps size() below it). An
  /// empty newest entry (see `take_from`) is replaced.
  void push_back(const Entry& e, std::size_t max_slots = SIZE_MAX) {
    if (size_ != 0 && back().count == 0) [[unlikely]] {
      slots_[slot(size_ - 1)] = e;
      units_ += e.count;
      return;
    }
    if (size_ == slots_.size()) grow(max_slots);
    slots_[slot(size_)] = e;
    ++size_;
    units_ += e.count;
  }

 private:
  // head_ + i < 2 * capacity, so one comparison wraps it (a % would divide on every access).
  std::size_t slot(std::size_t i) const noexcept {
    const std::size_t at = head_ + i;
    return at >= slots_.size() ? at - slots_.size() : at;
  }

  void grow(std::size_t max_slots) {
    std::size_t n = slots_.empty() ? 1 : slots_.size() * 2;
    if (n > max_slots) n = max_slots;
    if (n <= size_) n = size_ + 1;
    std::vector<Entry> grown(n);
    for (std::size_t i = 0; i < size_; ++i) grown[i] = (*this)[i];
    slots_ = std::move(grown);
    head_ = 0;
  }

  std::vector<Entry> slots_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
  std::int64_t units_ = 0;
};

}  // namespace detail

/// The sliding window log as a pure transition (see `ratelimit::Model`).
///
/// The log holds the time of every admitted unit; at t the window is (t - W, t]. Admit iff
/// |log| + n <= N, then log n entries at t; denied requests are not logged. Exact, at the cost
/// of memory per admitted request (the "sliding window log" of the design doc's case study).
/// State: 56 bytes plus 16 bytes per slot; equal times share one entry with a count, expired
/// entries leave on the next admission, and a key never holds more than N entries.
struct SlidingLogModel {
  static constexpr std::string_view name = "sliding_log";
  using Params = detail::WindowParams;
  struct Entry {
    std::int64_t time;   ///< ns
    std::int64_t count;  ///< units admitted at `time`
  };
  struct State {
    std::int64_t last = 0;             ///< ns: latest time seen
    detail::EntryRing<Entry> entries;  ///< oldest first (some may have expired since)
  };

  /// This algorithm's id inside a composed Redis script (see core/wire.hpp).
  static constexpr int wire_id = 4;
  /// Its Redis twin: lua/sliding_log.lua, one sorted set per client key (entries and header).
  struct Wire : detail::WindowWireBase {
    static constexpr std::string_view lua = lua::sliding_log;
    static constexpr std::string_view key_tag = "sl";
    struct BoundArgs {
      std::string reach_us;  ///< floor((W - 1) / 1000)
      std::string limit;
      std::string ttl_ms;  ///< ceil(W / 1 ms) + 1: a new entry's TTL
    };
    static BoundArgs bound_args(const Params& p) {
      detail::check_window_params(p);
      return {std::to_string((p.window - 1) / 1000), std::to_string(p.limit),
              std::to_string((p.window + 999'999) / 1'000'000 + 1)};
    }
    static void args(const BoundArgs& f, const Params& p, std::string now_us, const Operation& op,
                     const std::string& margin_ms, std::vector<std::string>& out) {
      out.push_back(std::move(now_us));
      out.push_back(f.reach_us);
      // Any cost above N is denied alike; N + 1 keeps the script's numbers small. A refund or
      // a penalty counts at most 2N (the most units the log holds).
      const bool take = op.kind == Operation::Kind::spend;
      out.push_back(std::to_string(std::min(op.cost, take ? p.limit + 1 : 2 * p.limit)));
      out.push_back(f.limit);
      if (take) [[likely]]
        out.push_back(op.peek ? "1" : "0");
      else
        out.push_back(adjust_mode(op));
      out.push_back(margin_ms);
      out.push_back(f.ttl_ms);
    }
    /// Reply: {admitted, t_us, live, newest_us, target_us, oldest_us}. The state is the smallest
    /// log that decides `op`'s cost alike: the unit a denial waits for, then the newest entry.
    /// Exact for that cost only, and only until the oldest live entry leaves the window (the
    /// log's count is constant until then; see WireState).
    static std::optional<WireState<State>> state(const Params& p, std::span<const detail::i128> r,
                                                 const Operation& op) {
      const auto t = detail::wire_reply_time_ns(r, 1);
      // Live units may exceed this N (spent under a higher one, or a penalty's), never twice
      // the largest N.
      if (!t || r.size() < 5 || r[2] < 0 || r[2] > 2 * detail::max_count) return std::nullopt;
      const detail::i128 newest = r[3], target = r[4];
      WireState<State> w{State{}, std::chrono::nanoseconds{*t}, false,
                         std::chrono::nanoseconds{*t}};
      State& s = w.state;
      s.last = *t;
      const auto units = static_cast<std::int64_t>(r[2]);
      if (units > 0) {
        if (newest < 0 || newest * 1000 > *t) return std::nullopt;
        const auto newest_ns = static_cast<std::int64_t>(newest * 1000);
        const std::int64_t n = op.cost;
        const std::int64_t to_drop = units + n - p.limit;
        if (n <= p.limit && to_drop > 0) {
          if (target < 0 || target > newest) return std::nullopt;
          s.entries.push_back({static_cast<std::int64_t>(target * 1000), to_drop});
          if (units > to_drop) s.entries.push_back({newest_ns, units - to_drop});
          // An entry at e is live at t iff e + W > t (in ns: e * 1000 + W).
          if (r.size() >= 6 && r[5] >= 0 && r[5] <= target)
            w.until = std::chrono::nanoseconds{static_cast<std::int64_t>(r[5] * 1000) + p.window};
        } else {
          s.entries.push_back({newest_ns, units});
        }
      }
      return w;
    }

    /// The model evaluated on that state. A refund's or a penalty's reply describes the log
    /// after it, as a cost-1 peek's would (the script rewrites it: the log before it is not in
    /// the reply), and is decoded as that peek.
    static std::optional<Decision> decode(const Params& p, std::span<const detail::i128> r,
                                          const Operation& op) {
      if (op.kind != Operation::Kind::spend) [[unlikely]]
        return decode(p, r, Operation{1, true});
      const auto admitted = detail::wire_reply_admitted(r, 0);
      auto w = state(p, r, op);
      if (!admitted || !w) return std::nullopt;
      const Decision d = SlidingLogModel::apply(p, w->state, w->time, op);
      if (d.allowed != *admitted) return std::nullopt;
      return d;
    }
  };

  /// The parameters of a rules-file limit of `r`: r.count per window of r.period.
  static Params from_rate(const Rate& r) { return detail::make_window_params(r); }
  /// Checks parameters given directly to a storage (`bind`, `with_params`); throws
  /// `std::invalid_argument` naming the field (see detail::check_window_params).
  static void check_params(const Params& p) { detail::check_window_params(p); }

  /// Takes `Operation::Kind::refund` and `penalty` (see `adjust`).
  static constexpr bool adjustable = true;

  static Decision apply(const Params& p, State& s, std::chrono::nanoseconds now,
                        const Operation& op) {
    if (op.kind != Operation::Kind::spend) [[unlikely]]
      return adjust(p, s, now, op);
    const std::int64_t t = now.count() > s.last ? now.count() : s.last;
    std::size_t first = 0;  // entries before it have left the window
    std::int64_t live = s.entries.units();
    while (first < s.entries.size() && s.entries[first].time <= t - p.window)
      live -= s.entries[first++].count;
    const std::int64_t n = op.cost;
    Decision d{};
    d.limit = p.limit;
    d.remaining = live < p.limit ? p.limit - live : 0;  // live > N: spent under a higher N
    d.reset_after = live > 0 ? std::chrono::nanoseconds{s.entries.back().time + p.window - t}
                             : std::chrono::nanoseconds{0};
    if (n > p.limit) {
      d.retry_after = Decision::never;
      return d;
    }
    if (live + n > p.limit) {
      // Wait for the (live + n - N)-th oldest unit to leave the window.
      std::int64_t to_drop = live + n - p.limit;
      std::size_t i = first;
      while (s.entries[i].count < to_drop) to_drop -= s.entries[i++].count;
      d.retry_after = std::chrono::nanoseconds{s.entries[i].time + p.window - t};
      return d;
    }
    d.allowed = true;
    if (op.peek) return d;
    // Expired entries leave only now: a peek or denial must not move the key's time.
    for (std::size_t i = 0; i < first; ++i) s.entries.pop_front();
    if (!s.entries.empty() && s.entries.back().time == t)
      s.entries.add_to_back(n);
    else
      s.entries.push_back(Entry{t, n}, static_cast<std::size_t>(p.limit));
    s.last = t;
    d.remaining = p.limit - live - n;
    d.reset_after = std::chrono::nanoseconds{p.window};
    return d;
  }

  /// A refund or a penalty at t = max(now, last), then what a cost-1 peek reports
  /// (docs/algorithms.md "Refunds, penalties and lockouts"): a refund of n taken at t0 takes
  /// min(n, its units) off the entry stamped t0 if that entry is still in the window (an entry
  /// that left took the take's units with it); a penalty logs min(n, 2N - live) units at t, as
  /// a take would (so the log holds at most 2N units). Nothing changes when nothing would.
  [[gnu::noinline]] static Decision adjust(const Params& p, State& s, std::chrono::nanoseconds now,
                                           const Operation& op) {
    const std::int64_t t = now.count() > s.last ? now.count() : s.last;
    std::size_t first = 0;
    std::int64_t live = s.entries.units();
    while (first < s.entries.size() && s.entries[first].time <= t - p.window)
      live -= s.entries[first++].count;
    if (op.kind == Operation::Kind::refund) {
      const std::int64_t t0 = std::clamp<std::int64_t>(op.taken_at.count(), 0, t);
      // The entries' times strictly increase (a take at t >= the newest time is added to the
      // newest entry if stamped t, else logged behind it), so at most one is stamped t0: found
      // by bisection, not by a scan of up to 2N entries (the scan of 99 live entries made a
      // refund cost 3x a take at N = 100).
      std::size_t lo = first, hi = s.entries.size();
      while (lo < hi) {
        const std::size_t mid = lo + (hi - lo) / 2;
        if (s.entries[mid].time < t0)
          lo = mid + 1;
        else
          hi = mid;
      }
      if (lo < s.entries.size() && s.entries[lo].time == t0 && s.entries[lo].count > 0)
        s.entries.take_from(lo, std::min(op.cost, s.entries[lo].count));
    } else if (op.kind == Operation::Kind::penalty && live < 2 * p.limit) {
      const std::int64_t n = std::min(op.cost, 2 * p.limit - live);
      for (std::size_t i = 0; i < first; ++i) s.entries.pop_front();
      if (!s.entries.empty() && s.entries.back().time == t)
        s.entries.add_to_back(n);
      else
        s.entries.push_back(Entry{t, n}, static_cast<std::size_t>(2 * p.limit));
      s.last = t;
    }
    return apply(p, s, std::chrono::nanoseconds{t}, Operation{1, true});
  }

  /// When the newest entry leaves the window (at its time + W), and not before last.
  static std::chrono::nanoseconds fresh_at(const Params& p, const State& s) noexcept {
    if (s.entries.empty()) return std::chrono::nanoseconds{s.last};
    return std::chrono::nanoseconds{std::max(s.last, s.entries.back().time + p.window)};
  }
};

/// A sliding log limiter per key: exactly at most `rate.count` requests in any window of
/// `rate.period` (the window (t - W, t]). Memory grows with the limit: prefer it for low limits.
/// Decision fields: limit = N; remaining = max(0, N - |log|); retry_after = e + W - t for the
/// (|log| + n - N)-th oldest entry e; reset_after = newest + W - t.
///
/// Errors: the constructor throws `std::invalid_argument` naming the out-of-range field; the
/// calls throw it for cost < 1. Thread safety: every member is safe from many threads.
template <Clock C = SteadyClock, class Storage = InMemoryStorage>
class SlidingLog : public detail::Limiter<SlidingLogModel, C, Storage> {
 public:
  /// `rate.count` requests per `rate.period`; count in [1, 10^9], period in [1 ms, 366 days].
  explicit SlidingLog(Rate rate, Storage storage = {}, C clock = {}, std::string name = {})
      : detail::Limiter<SlidingLogModel, C, Storage>(detail::make_window_params(rate),
                                                     std::move(storage), std::move(clock),
                                                     std::move(name)),
        rate_(rate) {}

  /// The rate it was built with.
  const Rate& rate() const noexcept { return rate_; }

 private:
  Rate rate_;
};

}  // namespace ratelimit
