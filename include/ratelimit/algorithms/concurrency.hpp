#pragma once
/// @file algorithms/concurrency.hpp
/// Concurrency limit: at most N requests in flight per key, each holding a slot that it gives
/// back when its work ends (an RAII `ConcurrencySlot`) or that frees itself when its lease ends,
/// so a holder that crashes never leaks a slot. Overload is often concurrency rather than rate
/// (Netflix's concurrency-limits; Envoy's max-requests circuit breaker); this is its fixed-limit
/// form, with the same priorities as every limit (core/priority.hpp).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/clock.hpp"
#include "../core/decision.hpp"
#include "../core/detail/arith.hpp"
#include "../core/detail/validate.hpp"
#include "../core/limiter.hpp"
#include "../core/priority.hpp"
#include "../core/storage.hpp"
#include "../core/wire.hpp"
#include "../lua/concurrency.hpp"
#include "../memory/in_memory_storage.hpp"

namespace ratelimit {

/// A concurrency limit's shape. Ranges: limit in [1, 10^6] slots per key; lease in
/// [1 ms, 366 days].
/// Thread safety: a plain value.
struct ConcurrencyConfig {
  std::int64_t limit;              ///< N: the most requests in flight per key
  std::chrono::nanoseconds lease;  ///< how long an unreleased slot stays held
};

/// The concurrency limit as a pure transition (see `ratelimit::Model`).
///
/// State: the ends of the leases held on the key, sorted. A lease ending at e is held at t iff
/// e > t. A `spend` of n at t (the limiter sends n = 1) is admitted iff held + n <= N; it then
/// adds n leases ending at `op.lease_end`. A `release` drops one lease ending exactly at
/// `op.lease_end` if it is still held (leases with equal ends are interchangeable, so the
/// count stays exact whichever goes) and is always admitted. Ended leases leave on a write.
/// Decision fields: limit = N; remaining = slots free after the decision; retry_after = until
/// the lease a denial waits for ends (a release may come sooner); reset_after = until the
/// latest lease ends. At most N leases per key (16 bytes + 8 per lease).
struct ConcurrencyModel {
  static constexpr std::string_view name = "concurrency";
  /// N and the lease, ns.
  struct Params {
    std::int64_t limit;
    std::int64_t lease;
    friend constexpr bool operator==(const Params&, const Params&) = default;
  };
  struct State {
    std::vector<std::int64_t> ends;  ///< ns, ascending; some may have ended since
  };
  /// This model's id inside a composed Redis script (see core/wire.hpp).
  static constexpr int wire_id = 8;

  /// Validates `c` (throws `std::invalid_argument` naming the field and value).
  static Params make_params(const ConcurrencyConfig& c) {
    if (c.limit < 1 || c.limit > 1'000'000)
      detail::invalid("limit", c.limit, "must be in [1, 1000000] slots");
    if (c.lease < detail::min_period || c.lease > detail::max_period)
      detail::invalid("lease (ns)", c.lease.count(),
                      "must be in [1 ms, 366 days] = [1000000, 31622400000000000] ns");
    return {c.limit, c.lease.count()};
  }

  /// The Decision from what both storages know after a decision at t (ns): whether it was
  /// admitted, the leases held after it, the end the denial waits for and the latest end (-1:
  /// none). Shared by the model and the Redis decoder, so both report alike.
  static Decision describe(const Params& p, bool allowed, std::int64_t cost, std::int64_t held,
                           std::int64_t target, std::int64_t last, std::int64_t t) noexcept {
    Decision d{};
    d.allowed = allowed;
    d.limit = p.limit;
    d.remaining = held < p.limit ? p.limit - held : 0;
    if (!allowed)
      d.retry_after = cost > p.limit ? Decision::never : std::chrono::nanoseconds{target - t};
    d.reset_after =
        held > 0 && last > t ? std::chrono::nanoseconds{last - t} : std::chrono::nanoseconds{0};
    return d;
  }

  static Decision apply(const Params& p, State& s, std::chrono::nanoseconds now,
                        const Operation& op) {
    const std::int64_t t = now.count();
    auto& e = s.ends;
    const auto first = std::upper_bound(e.begin(), e.end(), t);  // the first held lease
    const auto held = static_cast<std::int64_t>(e.end() - first);
    const std::int64_t last = held > 0 ? e.back() : -1;
    const std::int64_t n = op.cost;
    const std::int64_t end = op.lease_end.count();
    if (op.kind == Operation::Kind::spend && held + n > p.limit) {
      const std::int64_t target = n <= p.limit ? *(first + (held + n - p.limit - 1)) : -1;
      return describe(p, false, n, held, target, last, t);
    }
    if (op.peek) return describe(p, true, n, held, -1, last, t);
    e.erase(e.begin(), first);
    if (op.kind == Operation::Kind::spend) {
      if (end > t)
        e.insert(std::upper_bound(e.begin(), e.end(), end), static_cast<std::size_t>(n), end);
    } else if (const auto it = std::lower_bound(e.begin(), e.end(), end);
               it != e.end() && *it == end) {
      e.erase(it);
    }
    const auto after = static_cast<std::int64_t>(e.size());
    return describe(p, true, n, after, -1, after > 0 ? e.back() : -1, t);
  }

  /// When the last lease held ends (0 if none is held).
  static std::chrono::nanoseconds fresh_at(const Params&, const State& s) noexcept {
    return std::chrono::nanoseconds{s.ends.empty() ? 0 : s.ends.back()};
  }

  /// Its Redis twin: lua/concurrency.lua, one sorted set of lease ends per client key.
  struct Wire {
    static constexpr std::string_view lua = lua::concurrency;
    static constexpr std::string_view key_tag = "cc";
    /// The lease ends are the client's times: a storage on Redis's clock refuses the model.
    static constexpr bool needs_client_time = true;

    struct BoundArgs {
      std::string limit;
    };
    static BoundArgs bound_args(const Params& p) {
      (void)make_params({p.limit, std::chrono::nanoseconds{p.lease}});
      return {std::to_string(p.limit)};
    }
    /// A lease end in whole us, rounded up (the same for its acquire and its release).
    static std::int64_t end_us(std::chrono::nanoseconds end) noexcept {
      const std::int64_t ns = end.count() < 0 ? 0 : end.count();
      return static_cast<std::int64_t>(detail::ceil_div(detail::i128{ns}, 1000));
    }
    static void args(const BoundArgs& b, const Params& p, std::string now_us, const Operation& op,
                     const std::string& margin_ms, std::vector<std::string>& out) {
      out.push_back(std::move(now_us));
      out.push_back(std::to_string(end_us(op.lease_end)));
      out.emplace_back(op.kind == Operation::Kind::spend ? "s" : "r");
      out.push_back(std::to_string(std::min(op.cost, p.limit + 1)));
      out.push_back(b.limit);
      out.push_back(op.peek ? "1" : "0");
      out.push_back(margin_ms);
    }
    /// Reply: {admitted, t_us, held after, target_us, last_us} (see the script's header).
    static std::optional<Decision> decode(const Params& p, std::span<const detail::i128> r,
                                          const Operation& op) {
      const auto admitted = detail::wire_reply_admitted(r, 0);
      const auto t = detail::wire_reply_time_ns(r, 1);
      if (!admitted || !t || r.size() < 5 || r[2] < 0 || r[2] > 1'000'000) return std::nullopt;
      const auto time_ns = [&](std::size_t i) -> std::optional<std::int64_t> {
        if (r[i] == -1) return -1;
        if (r[i] < 0 || r[i] > (detail::max_wire_time_ns + detail::max_period.count()) / 1000)
          return std::nullopt;
        return static_cast<std::int64_t>(r[i] * 1000);
      };
      const auto target = time_ns(3), last = time_ns(4);
      if (!target || !last) return std::nullopt;
      const bool waits = !*admitted && op.cost <= p.limit;
      if (waits && *target <= *t) return std::nullopt;
      return describe(p, *admitted, op.cost, static_cast<std::int64_t>(r[2]), *target, *last, *t);
    }
    /// limit / divisor (at least 1) slots, the same lease.
    static Params fallback(const Params& p, std::int64_t divisor) noexcept {
      return {std::max<std::int64_t>(1, p.limit / divisor), p.lease};
    }
  };
};

/// A held slot of a `ConcurrencyLimiter` (or the denial that gave none): releases the slot
/// when destroyed or when `release` is called, once. Movable, not copyable.
/// Thread safety: one slot is used by one thread at a time; slots of one key may be released
/// from many threads at once.
template <class Binding, Clock C>
class ConcurrencySlot {
 public:
  /// An empty slot: holds nothing.
  ConcurrencySlot() = default;
  ConcurrencySlot(const ConcurrencySlot&) = delete;
  ConcurrencySlot& operator=(const ConcurrencySlot&) = delete;
  ConcurrencySlot(ConcurrencySlot&& o) noexcept
      : held_(std::move(o.held_)), decision_(o.decision_) {
    o.held_.reset();
  }
  /// Releases what this slot holds, then takes `o`'s.
  ConcurrencySlot& operator=(ConcurrencySlot&& o) noexcept {
    if (this != &o) {
      release_quietly();
      held_ = std::move(o.held_);
      o.held_.reset();
      decision_ = o.decision_;
    }
    return *this;
  }
  ~ConcurrencySlot() { release_quietly(); }

  /// True while the slot is held (admitted and not yet released).
  explicit operator bool() const noexcept { return held_.has_value(); }
  /// The acquiring decision (`retry_after` says when to try again after a denial).
  const Decision& decision() const noexcept { return decision_; }
  /// When the lease ends (ns on the limiter's clock) if not released before; 0 if not held.
  std::chrono::nanoseconds lease_end() const noexcept {
    return held_ ? held_->end : std::chrono::nanoseconds{0};
  }

  /// Gives the slot back now (nothing if it is not held, or released already) and returns the
  /// key's state after it (nullopt if nothing was held). Errors: what the storage's decisions
  /// throw (a Redis storage only when asked to); the slot is released on this side either way,
  /// and its lease frees it on the storage's.
  std::optional<Decision> release() {
    if (!held_) return std::nullopt;
    Held h = std::move(*held_);
    held_.reset();
    Operation op{1, false, Decision::never, Operation::Kind::release};
    op.lease_end = h.end;
    return h.binding.apply(h.key, h.clock.now(), op);
  }

 private:
  template <Clock, class>
  friend class ConcurrencyLimiter;
  struct Held {
    Binding binding;
    C clock;
    std::string key;
    std::chrono::nanoseconds end;
  };
  ConcurrencySlot(Held h, const Decision& d) : held_(std::move(h)), decision_(d) {}
  ConcurrencySlot(const Decision& d) : decision_(d) {}

  void release_quietly() noexcept {
    try {
      (void)release();
    } catch (...) {
      // A destructor cannot report it; the lease frees the slot on the storage.
    }
  }

  std::optional<Held> held_;
  Decision decision_{};
};

/// At most `limit` requests in flight per key; see ConcurrencyModel. `try_acquire` returns a
/// `Slot` (held, or the denial) that releases itself when it goes out of scope; a slot never
/// released frees itself after `lease`. Priorities apply (`set_reserves`): a request of
/// priority p is admitted only if p's reserve of slots stays free after it.
///
/// Errors: the constructor throws `std::invalid_argument` naming the out-of-range field; a
/// Redis storage refuses it under `TimeSource::redis` (the lease ends are the client's times).
/// Thread safety: every member is safe from many threads, except `set_reserves` (before
/// sharing).
template <Clock C = SteadyClock, class Storage = InMemoryStorage>
class ConcurrencyLimiter : private detail::Limiter<ConcurrencyModel, C, Storage> {
  using Base = detail::Limiter<ConcurrencyModel, C, Storage>;
  using Binding = std::remove_cvref_t<decltype(std::declval<const Base&>().binding())>;

 public:
  /// The RAII handle `try_acquire` returns.
  using Slot = ConcurrencySlot<Binding, C>;

  /// A limit of `config`, keeping state in `storage_policy`, reading time from `clock_policy`.
  /// Limiters on one storage share keys only when `limiter_name` matches. (The parameters are
  /// not named `storage`, `clock` and `name`: those are members, and -Wshadow would say so in
  /// users' builds.)
  explicit ConcurrencyLimiter(ConcurrencyConfig config, Storage storage_policy = {},
                              C clock_policy = {}, std::string limiter_name = {})
      : Base(ConcurrencyModel::make_params(config), std::move(storage_policy),
             std::move(clock_policy), std::move(limiter_name)),
        config_(config) {}

  /// Takes a slot of `key` for a request of priority `p` now, if one is free to p: a held
  /// `Slot`, or an empty one whose `decision()` says when to retry.
  Slot try_acquire(std::string_view key = {}, Priority p = Priority::critical) {
    const auto now = this->clock().now();
    Operation op{1, false, Decision::never};
    op.lease_end = now + config_.lease;
    const Decision d = this->apply_as(p, key, now, op);
    if (!d.allowed) return Slot(d);
    return Slot(typename Slot::Held{this->binding(), this->clock(), std::string(key), op.lease_end},
                d);
  }

  using Base::clock;
  using Base::name;
  using Base::peek;
  using Base::reserves;
  using Base::reset;
  using Base::set_reserves;
  using Base::storage;

  /// The configuration it was built with.
  const ConcurrencyConfig& config() const noexcept { return config_; }

 private:
  ConcurrencyConfig config_;
};

}  // namespace ratelimit
