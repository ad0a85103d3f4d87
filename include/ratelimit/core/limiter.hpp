#pragma once
/// @file core/limiter.hpp
/// What every limiter does around its model: read the clock, validate the cost, and block in
/// `acquire`. The algorithms' public classes derive from this.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <future>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "bound_key.hpp"
#include "clock.hpp"
#include "completion.hpp"
#include "decision.hpp"
#include "detail/validate.hpp"
#include "listener.hpp"
#include "priority.hpp"
#include "reservation.hpp"
#include "storage.hpp"

namespace ratelimit {
/// The default storage policy of every limiter, defined in memory/in_memory_storage.hpp (the
/// top-level headers such as `ratelimit/ratelimit.hpp` include it). Declared here so that
/// the core and the algorithms never include a storage.
class InMemoryStorage;
}  // namespace ratelimit

namespace ratelimit::detail {

struct NoBinding {};

template <class S, class M, bool = StorageFor<S, M>>
struct binding_of {
  using type = NoBinding;
};
template <class S, class M>
struct binding_of<S, M, true> {
  using type = decltype(std::declval<S&>().template bind<M>(
      std::string_view{}, std::declval<const typename M::Params&>()));
};

/// A binding that can locate a key before deciding it (`locate`, then `apply(located, ...)`).
template <class B>
concept Locating = requires(const B& b, std::string_view k, std::chrono::nanoseconds t) {
  b.apply(b.locate(k), k, t, Operation{});
};

/// What `B::locate` returns, or std::monostate for a binding that does not locate.
template <class B>
struct located_of {
  using type = std::monostate;
};
template <Locating B>
struct located_of<B> {
  using type = decltype(std::declval<const B&>().locate(std::string_view{}));
};

/// How long the caller of `acquire` waits in all if admitted after `d` (a denial) is retried.
/// The leaky bucket overrides it: its total wait is the whole backlog, `reset_after`.
template <class M>
constexpr bool completes_within(const Decision& d, std::chrono::nanoseconds budget) noexcept {
  if constexpr (requires { M::completes_within(d, budget); })
    return M::completes_within(d, budget);
  else
    return d.retry_after <= budget;
}

template <Model M, Clock C, class S>
class Limiter {
  static_assert(StorageFor<S, M>,
                "ratelimit: this Storage cannot hold this algorithm's state: it needs "
                "`s.template bind<Model>(name, params)` returning a Binding (see storage.hpp)");

 public:
  Limiter(const typename M::Params& params, S storage, C clock, std::string name)
      : storage_(std::move(storage)),
        clock_(std::move(clock)),
        name_(std::move(name)),
        params_(params),
        binding_(storage_.template bind<M>(name_, params)) {}

  /// Keeps `r` of the limit back from the lower priorities (see `Reserves`): from now on the
  /// priority overloads decide priority p on this limiter's keys as if the limit were reduced
  /// by p's reserve. Calls without a priority are critical (the whole limit), as before.
  /// Throws `std::invalid_argument` naming the field and value for a fraction outside [0, 1] or
  /// sheddable < normal (and whatever the storage's `with_params` throws); the limiter is then
  /// unchanged. Needs a model whose parameters have a `limit` (all the library's do) and whose
  /// `apply` takes a state spent under a larger limit than its own (the library's models report
  /// `remaining` 0 then; a model of your own must too).
  /// Thread safety: not safe concurrently with decisions on this limiter; call it before the
  /// limiter is shared.
  void set_reserves(const Reserves& r) requires requires(typename M::Params p) { p.limit -= 1; }
  {
    const auto ppm = detail::check_reserves(r);
    std::array<std::optional<Binding>, 2> shed;
    for (std::size_t i = 0; i < shed.size(); ++i) {
      const auto p = detail::reserved_params(params_, ppm.of[i + 1]);
      if (p.limit >= 1) shed[i].emplace(binding_.with_params(p));
    }
    reserves_ = r;
    shed_ = std::move(shed);
  }

  /// The reserves set by `set_reserves` (all zero by default).
  const Reserves& reserves() const noexcept { return reserves_; }

  /// `try_acquire(key, cost)` for a request of priority `p`: admitted only if p's reserve is
  /// left after it. The Decision is p's: limit, remaining and retry_after are those of the
  /// limit reduced by p's reserve (retry_after is `never` when the cost exceeds that). Throws
  /// `std::invalid_argument` if cost < 1. Thread safety: safe from many threads.
  /// Listeners hear it and shadow mode applies, as for `try_acquire(key, cost)`.
  Decision try_acquire(std::string_view key, std::int64_t cost, Priority p) {
    check_cost(cost);
    return try_acquire_as(p, key, cost, clock_.now());
  }

  /// The same at `now`, a reading of this limiter's clock (clamped to [0, 2^62] ns).
  Decision try_acquire(std::string_view key, std::int64_t cost, Priority p,
                       std::chrono::nanoseconds now) {
    check_cost(cost);
    return try_acquire_as(p, key, cost, clock_range(now));
  }

  /// What a cost-1 request of priority `p` for `key` would get now; changes nothing.
  Decision peek(std::string_view key, Priority p) {
    return apply_as(p, key, clock_.now(), Operation{1, true, Decision::never});
  }

  /// Decides one request of `cost` units for `key` now; admits it and spends its cost, or
  /// denies it and changes nothing. Throws `std::invalid_argument` if cost < 1.
  /// Thread safety: safe from many threads.
  Decision try_acquire(std::string_view key = {}, std::int64_t cost = 1) {
    // Located before the clock read, which then overlaps the slot's fetch (in process).
    return decide_located(locate_key(key), key, cost, read_clock);
  }

  /// The same decision at `now`, a reading of this limiter's clock taken by the caller (the
  /// clock is not read): a service that reads the clock once per batch or event-loop turn pays
  /// for it once (as folly's `consume(n, now)`). A `now` earlier than the key's latest time is
  /// decided at that time, as always. A `now` outside the clock range [0, 2^62] ns is clamped
  /// to it, as a clock reading would be (the models' arithmetic relies on the range).
  /// Throws `std::invalid_argument` if cost < 1. Thread safety: safe from many threads.
  Decision try_acquire(std::string_view key, std::int64_t cost, std::chrono::nanoseconds now) {
    return decide_located(locate_key(key), key, cost, clock_range(now));
  }

  /// What the storage finds from a key alone (in process its hash; nothing elsewhere).
  using Located = typename located_of<typename binding_of<S, M>::type>::type;

  /// This limiter for one key fixed now (see `BoundKey`): its decisions skip the work that
  /// depends on the key alone (in process, hashing it). The handle refers to this limiter,
  /// which must outlive it. Thread safety: safe from many threads.
  BoundKey<Limiter> bind_key(std::string key) { return BoundKey<Limiter>(*this, std::move(key)); }

 private:
  friend class BoundKey<Limiter>;

  /// Whether the storage can locate a key before deciding it (in process: hash it and start
  /// fetching its slot).
  static constexpr bool locates = Locating<typename binding_of<S, M>::type>;

  Located locate_key(std::string_view key) const {
    if constexpr (locates)
      return binding_.locate(key);
    else
      return {};
  }

  /// Stands for "read the clock" in `decide_located` (no clock reading is negative).
  static constexpr std::chrono::nanoseconds read_clock{-1};

  /// A caller's time clamped to the clock range [0, 2^62] ns.
  static std::chrono::nanoseconds clock_range(std::chrono::nanoseconds now) noexcept {
    return std::clamp(now, std::chrono::nanoseconds{0}, max_clock_time);
  }

  /// Every `try_acquire` without a priority: the key already located, decided at `now` (in the
  /// clock range) or at the clock's reading if it is `read_clock`; listeners and shadow mode
  /// applied.
  Decision decide_located(const Located& at, std::string_view key, std::int64_t cost,
                          std::chrono::nanoseconds now) {
    check_cost(cost);
    if (const detail::ObserverSet* obs = observers_.current()) [[unlikely]]
      return observed(*obs, key, cost, [&] { return decide_at(at, key, cost, now); });
    return decide_at(at, key, cost, now);
  }

  /// `decide_located`'s decision, without listeners or shadow mode. A function rather than a
  /// lambda built there for every decision: GCC filled that closure on the stack, the located
  /// key copied through a 16-byte register (two words stored, one 16-byte load: a
  /// store-to-load forwarding stall).
  Decision decide_at(const Located& at, std::string_view key, std::int64_t cost,
                     std::chrono::nanoseconds now) {
    const Operation op{cost, false, Decision::never};
    const auto t = now == read_clock ? clock_.now() : now;
    if constexpr (locates)
      return binding_.apply(at, key, t, op);
    else
      return binding_.apply(key, t, op);
  }

 public:
  /// The same decision without blocking: returns at once and hands the Decision to
  /// `done(Decision)`, exactly once. On a Redis storage the request joins the storage's
  /// pipeline and `done` runs on its I/O thread (or here, before this returns, when Redis is
  /// not tried); in process it runs here. See core/completion.hpp for the thread rule.
  /// Throws `std::invalid_argument` (and never calls `done`) if cost < 1.
  /// Thread safety: safe from many threads.
  template <class F>
  requires std::invocable<F&, Decision>
  void try_acquire_async(std::string_view key, std::int64_t cost, F&& done) {
    check_cost(cost);
    auto completion = detail::make_completion<Decision>(std::forward<F>(done));
    if (const detail::ObserverSet* obs = observers_.current()) [[unlikely]] {
      // The completion may run after the limiter is gone: it holds the set (one reference
      // count, see detail::ObserverSet) and a copy of the name.
      completion = [set = obs->shared_from_this(), name = name_, k = std::string(key), cost,
                    inner = std::move(completion)](Decision d) {
        if (set->shadow && !d.allowed) shadow(d);
        detail::Observers::decision(*set, name, k, cost, d, std::chrono::nanoseconds{-1});
        inner(std::move(d));
      };
    }
    apply_async(key, clock_.now(), Operation{cost, false, Decision::never}, std::move(completion));
  }

  /// As above, through a future (its `get` blocks: not on the storage's I/O thread).
  std::future<Decision> try_acquire_async(std::string_view key = {}, std::int64_t cost = 1) {
    auto promise = std::make_shared<std::promise<Decision>>();
    auto future = promise->get_future();
    try_acquire_async(key, cost, [promise](Decision d) { promise->set_value(d); });
    return future;
  }

  /// What a cost-1 request for `key` would get now; changes nothing.
  /// Thread safety: safe from many threads.
  Decision peek(std::string_view key = {}) {
    return binding_.apply(key, clock_.now(), Operation{1, true, Decision::never});
  }

  /// Puts `key` back to its fresh state. Thread safety: safe from many threads.
  void reset(std::string_view key = {}) { binding_.reset(key); }

  /// Gives back up to `cost` units that a take of `key` decided at `taken_at` (a reading of
  /// this limiter's clock: the `now` it was decided at) removed, now: a request that failed or
  /// was cancelled (Bucket4j's `addTokens`, rate-limiter-flexible's `reward`). Never more than
  /// the take removed and never into another window (docs/algorithms.md "Refunds, penalties
  /// and lockouts" says what each algorithm gives back); it changes nothing when nothing of
  /// the take is left to give. Always applied; returns what a cost-1 `peek` reports right
  /// after it. Atomic on every storage (one script call on Redis). Shadow mode does not apply;
  /// listeners hear `Outcome::refunded`. Throws `std::invalid_argument` if cost < 1.
  /// Thread safety: safe from many threads.
  Decision refund(std::string_view key, std::int64_t cost,
                  std::chrono::nanoseconds taken_at) requires Adjustable<M> {
    refuse_far_storages();
    check_cost(cost);
    Operation op{cost, false, Decision::never, Operation::Kind::refund};
    op.taken_at = clock_range(taken_at);
    return adjust(key, op, Outcome::refunded);
  }

  /// Spends `cost` more units of `key` now whether or not they fit (a penalty for abuse:
  /// rate-limiter-flexible's `penalty`, Bucket4j's `consumeIgnoringRateLimits`): the key stays
  /// denied until the units are paid back by time, so `retry_after` grows by their worth (see
  /// docs/algorithms.md); at most twice the limit is ever spent. Always applied; returns what
  /// a cost-1 `peek` reports right after it. Atomic on every storage. Shadow mode does not
  /// apply; listeners hear `Outcome::penalized`. Throws `std::invalid_argument` if cost < 1.
  /// Thread safety: safe from many threads.
  Decision penalty(std::string_view key, std::int64_t cost) requires Adjustable<M> {
    refuse_far_storages();
    check_cost(cost);
    return adjust(key, Operation{cost, false, Decision::never, Operation::Kind::penalty},
                  Outcome::penalized);
  }

  /// Reserves `cost` units of `key` now (x/time/rate's `ReserveN`): takes them even beyond the
  /// limit, the bucket going into debt, and says when they are due (`Reservation::delay`): the
  /// token bucket's when the bucket would have held them, the leaky bucket's when the queue
  /// ahead of them has leaked (docs/algorithms.md "Reservations"). Refused, changing nothing
  /// (`ok()` false, with the key's state and `retry_after`), when the cost exceeds the limit,
  /// when they would be due later than `max_wait` (ns, >= 0; `Decision::never` for no bound),
  /// or when the key would owe more than its limit again (at most twice the limit is ever
  /// spent). The caller waits the delay and acts, or calls `cancel`. Only on the buckets
  /// (`Reservable`; the windows and the far storages refuse it at compile time, saying why): a
  /// window's units that fit are used at once and those that do not belong to a window its
  /// state cannot hold, so there `try_acquire` and `refund` say it all.
  /// Listeners hear it as a take (allowed, limited). Shadow mode: a refusal comes back `ok()`
  /// with `shadow_denied`, nothing taken and no delay. Atomic on every storage (one script
  /// call on Redis, which neither the pre-limit nor the over-limit cache answers). Throws
  /// `std::invalid_argument` if cost < 1 or max_wait < 0. Thread safety: safe from many threads.
  Reservation reserve(std::string_view key, std::int64_t cost,
                      std::chrono::nanoseconds max_wait = Decision::never) {
    return reserve_at(key, cost, max_wait, clock_.now());
  }

  /// The same at `now`, a reading of this limiter's clock taken by the caller (clamped to
  /// [0, 2^62] ns). Errors and thread safety: as above.
  Reservation reserve(std::string_view key, std::int64_t cost, std::chrono::nanoseconds max_wait,
                      std::chrono::nanoseconds now) {
    return reserve_at(key, cost, max_wait, clock_range(now));
  }

  /// Cancels `r`, a reservation of `key` by this limiter (x/time/rate's `Cancel`): while its
  /// units are not yet due (now <= `r.due_at()`) all of them go back, the bucket never fuller
  /// than full; once they are due, nothing (they count as used). Nothing either for a
  /// reservation that took nothing (not `ok()`, `shadow_denied`) or that a storage failure
  /// policy decided (`degraded`: the shared state may not hold it). Cancelling twice gives
  /// back twice: cancel once. Returns what a cost-1 `peek` reports right after it. Atomic on
  /// every storage (it is a refund of a take at `r.due_at()`, see `refund`); listeners hear
  /// `Outcome::refunded` when units go back; shadow mode does not apply. Throws
  /// `std::invalid_argument` if `r.cost` < 1 for a reservation that took units.
  /// Thread safety: safe from many threads.
  Decision cancel(std::string_view key, const Reservation& r) {
    return cancel_at(key, r, clock_.now());
  }

  /// The same at `now` (x/time/rate's `CancelAt`), a reading of this limiter's clock (clamped
  /// to [0, 2^62] ns). Errors and thread safety: as above.
  Decision cancel(std::string_view key, const Reservation& r, std::chrono::nanoseconds now) {
    return cancel_at(key, r, clock_range(now));
  }

 private:
  /// Reservations compile only for a bucket on a storage that keeps their bounds.
  static constexpr void refuse_unreservable() noexcept {
    static_assert(Reservable<M>,
                  "ratelimit: this algorithm cannot reserve: a window's state holds one window, "
                  "so units that do not fit now belong to a window it cannot hold, and units "
                  "that fit are used at once; use try_acquire and refund (docs/algorithms.md "
                  "\"Reservations\")");
    static_assert(AdjustingStorage<S>,
                  "ratelimit: this storage cannot reserve: the regional and leased storages "
                  "decide on shares of the limit or on exchanged counts, whose bounds "
                  "(docs/far.md) are proven for takes only; a debt or a cancel on one share "
                  "could be spent again by another");
  }

  Reservation reserve_at(std::string_view key, std::int64_t cost, std::chrono::nanoseconds max_wait,
                         std::chrono::nanoseconds now) {
    refuse_unreservable();
    check_cost(cost);
    if (max_wait.count() < 0) invalid("max_wait (ns)", max_wait.count(), "must be >= 0");
    const Operation op{cost, false, max_wait, Operation::Kind::reserve};
    Reservation r{{}, cost, now};
    if (const detail::ObserverSet* obs = observers_.current()) [[unlikely]]
      r.decision = observed(*obs, key, cost, [&] { return binding_.apply(key, now, op); });
    else
      r.decision = binding_.apply(key, now, op);
    return r;
  }

  Decision cancel_at(std::string_view key, const Reservation& r, std::chrono::nanoseconds now) {
    refuse_unreservable();
    const Decision& d = r.decision;
    if (!d.allowed || d.shadow_denied || d.degraded || now > r.due_at())
      return binding_.apply(key, now, Operation{1, true, Decision::never});
    check_cost(r.cost);
    // A refund of a take at the due time: before it, all `cost` units are owed back (the
    // model clamps the take's time to its own, so owed = cost x period / count).
    Operation op{r.cost, false, Decision::never, Operation::Kind::refund};
    op.taken_at = clock_range(r.due_at());
    const Decision after = binding_.apply(key, now, op);
    notify_listeners(key, r.cost, after, Outcome::refunded);
    return after;
  }

 public:
  /// Waits (through the clock's `sleep_for`) until `key` admits `cost` units, then returns the
  /// admitting decision (for the leaky bucket, after also waiting out its `delay`). Returns at
  /// once, denied, when that would take longer than what is left of `max_wait` or can never
  /// succeed. The time waited is the larger of what it asked `sleep_for` and what the clock
  /// shows since the call, so it never waits past `max_wait` (any value up to
  /// `nanoseconds::max()`), whatever the clock does: a clock that steps back while it waits
  /// only makes the key's own (later) time count. Throws `std::invalid_argument` if cost < 1 or
  /// max_wait < 0.
  /// Thread safety: safe from many threads; competing callers may make it wait again.
  Decision acquire(std::string_view key, std::int64_t cost, std::chrono::nanoseconds max_wait) {
    check_cost(cost);
    if (max_wait.count() < 0) invalid("max_wait (ns)", max_wait.count(), "must be >= 0");
    if (const detail::ObserverSet* obs = observers_.current()) [[unlikely]] {
      // Shadow mode never makes a caller wait: one decision, admitted whatever it says.
      if (obs->shadow)
        return observed(*obs, key, cost, [&] {
          return binding_.apply(key, clock_.now(), Operation{cost, false, Decision::never});
        });
      return observed(*obs, key, cost, [&] { return wait_for(key, cost, max_wait); });
    }
    return wait_for(key, cost, max_wait);
  }

  /// Attaches a listener: it hears of every decision this limiter makes (`try_acquire`,
  /// `try_acquire_async`, `acquire`; not `peek`), named by `name()`, with the key only if
  /// `options.with_keys`. What it throws is swallowed. Attaching and detaching are for
  /// configuration, not per request: each keeps about 40 B plus 24 B per listener until the
  /// limiter is destroyed (see detail::Observers). A copy of the limiter starts with the same
  /// listeners. Thread safety: safe from many threads, also while deciding.
  void attach_listener(std::shared_ptr<Listener> listener, ListenerOptions options = {}) {
    observers_.attach(std::move(listener), options);
  }

  /// Detaches every attachment of `listener`; returns whether it was attached. A decision
  /// already under way on another thread may still call it (it is kept alive meanwhile).
  /// Thread safety: safe from many threads, also while deciding.
  bool detach_listener(const Listener& listener) { return observers_.detach(&listener); }

  /// Tells this limiter's listeners of a decision made around it (a lockout's denial, see
  /// algorithms/lockout.hpp), with the outcome given. Nothing if none is attached.
  /// Thread safety: safe from many threads.
  void notify_listeners(std::string_view key, std::int64_t cost, const Decision& d,
                        Outcome outcome) const {
    if (const detail::ObserverSet* obs = observers_.current()) [[unlikely]]
      if (!obs->entries.empty())
        detail::Observers::decision(*obs, name_, key, cost, d, std::chrono::nanoseconds{-1},
                                    outcome);
  }

  /// Shadow mode (Envoy's `shadow_mode`, nginx's `limit_req_dry_run`): every request is decided
  /// and spends exactly as enforced, but none is denied: a decision the limit denies comes back
  /// with `allowed = true` and `shadow_denied = true`, its other fields the enforced
  /// decision's (a denial spends nothing, so nothing is spent). `acquire` then never waits (one
  /// decision) and a leaky bucket's `delay` is reported but not slept. Listeners hear
  /// `Outcome::shadow_limited`. Off by default. `try_acquire_all` (core/all_of.hpp) decides
  /// through the bindings: it neither applies shadow mode nor tells listeners.
  /// Thread safety: safe from many threads; a decision under way when it changes follows
  /// either setting.
  void set_shadow_mode(bool on) { observers_.set_shadow(on); }
  /// Whether shadow mode is on. Thread safety: safe from many threads.
  bool shadow_mode() const noexcept { return observers_.shadow(); }

 private:
  Decision wait_for(std::string_view key, std::int64_t cost, std::chrono::nanoseconds max_wait) {
    const auto start = clock_.now();
    std::chrono::nanoseconds slept{0};  // <= max_wait: only budgets that fit are slept
    auto budget = max_wait;
    for (;;) {
      const Decision d = binding_.apply(key, clock_.now(), Operation{cost, false, budget});
      if (d.allowed) {
        if (d.delay.count() > 0) clock_.sleep_for(d.delay);
        return d;
      }
      if (d.retry_after == Decision::never || !completes_within<M>(d, budget)) return d;
      clock_.sleep_for(d.retry_after);
      slept += d.retry_after;  // retry_after <= budget <= max_wait - slept: no overflow
      // Both readings are in [0, 2^62] ns, so the difference cannot overflow either.
      const auto elapsed = clock_.now() - start;
      const auto waited = elapsed > slept ? elapsed : slept;
      budget = waited >= max_wait ? std::chrono::nanoseconds{0} : max_wait - waited;
    }
  }

 public:
  /// The limiter's name: limiters of one algorithm share state on a storage iff names match.
  const std::string& name() const noexcept { return name_; }
  /// The clock (a copy of a ManualClock drives the same time).
  C& clock() noexcept { return clock_; }
  /// The storage handle.
  S& storage() noexcept { return storage_; }
  /// The storage's binding of this limiter (its model, name and parameters): for batches and
  /// all-or-nothing decisions (`binding().part(key, op)`, see core/storage.hpp).
  const auto& binding() const noexcept { return binding_; }

 private:
  /// Refunds and penalties compile only on a storage that keeps their bounds.
  static constexpr void refuse_far_storages() noexcept {
    static_assert(AdjustingStorage<S>,
                  "ratelimit: this storage cannot refund or penalize: the regional and leased "
                  "storages decide on shares of the limit or on exchanged counts, whose bounds "
                  "(docs/far.md) are proven for takes only; a unit given back to one share could "
                  "be spent again by another");
  }

  /// A refund or a penalty, the listeners told.
  Decision adjust(std::string_view key, const Operation& op, Outcome outcome) {
    Decision d;
    if constexpr (locates)  // as a take: located before the clock read, which overlaps it
      d = binding_.apply(binding_.locate(key), key, clock_.now(), op);
    else
      d = binding_.apply(key, clock_.now(), op);
    notify_listeners(key, op.cost, d, outcome);
    return d;
  }

  /// A denial admitted in shadow mode (see `set_shadow_mode`). Out of line and only for a
  /// denial: narrow stores into a decision just before it is copied out stall the copy's wide
  /// loads (store-to-load forwarding fails), about 20 ns a decision when done on every one.
  [[gnu::noinline, gnu::cold]] static void shadow(Decision& d) noexcept {
    d.allowed = true;
    d.shadow_denied = true;
  }

  /// `decide()` with shadow mode applied and the listeners told, its latency sampled.
  template <class Decide>
  Decision observed(const detail::ObserverSet& obs, std::string_view key, std::int64_t cost,
                    Decide&& decide) {
    const bool sample = !obs.entries.empty() && detail::sample_latency();
    std::chrono::steady_clock::time_point start{};
    if (sample) [[unlikely]]
      start = std::chrono::steady_clock::now();
    Decision d = decide();  // built in the caller's return slot
    if (obs.shadow && !d.allowed) [[unlikely]]
      shadow(d);
    if (!obs.entries.empty()) {
      const auto latency =
          sample ? std::chrono::steady_clock::now() - start : std::chrono::nanoseconds{-1};
      detail::Observers::decision(obs, name_, key, cost, d, latency);
    }
    return d;
  }

  void apply_async(std::string_view key, std::chrono::nanoseconds now, const Operation& op,
                   Completion<Decision> done) {
    if constexpr (requires { binding_.apply_async(key, now, op, std::move(done)); }) {
      binding_.apply_async(key, now, op, std::move(done));
    } else {  // a storage that decides in process: the decision is ready now
      Decision d = binding_.apply(key, now, op);
      detail::complete_safely(done, std::move(d));
    }
  }

  using Binding = typename binding_of<S, M>::type;

 protected:
  /// A priority's decision, observed like every other (listeners, shadow mode).
  Decision try_acquire_as(Priority p, std::string_view key, std::int64_t cost,
                          std::chrono::nanoseconds now) {
    const Operation op{cost, false, Decision::never};
    if (const detail::ObserverSet* obs = observers_.current()) [[unlikely]]
      return observed(*obs, key, cost, [&] { return apply_as(p, key, now, op); });
    return apply_as(p, key, now, op);
  }

  /// Decides `op` with priority `p`'s binding (the critical one when no reserve applies).
  Decision apply_as(Priority p, std::string_view key, std::chrono::nanoseconds now,
                    const Operation& op) {
    if (p == Priority::critical || !shed_configured()) return binding_.apply(key, now, op);
    const auto& b = shed_[static_cast<std::size_t>(p) - 1];
    if (b) return b->apply(key, now, op);
    // Nothing of the limit is left to this priority: the key's state as it is, denied forever.
    Decision d = binding_.apply(key, now, Operation{1, true, Decision::never});
    d.allowed = false;
    d.limit = 0;
    d.remaining = 0;
    d.retry_after = Decision::never;
    d.delay = std::chrono::nanoseconds{0};
    return d;
  }

  // --- Decisions that carry their key's parameters --------------------------------------------
 public:
  /// The model's parameters (capacity and refill, or limit and window, reduced): what a
  /// decision may carry instead of the limiter's own, for per-key limits at run time (a user's
  /// plan read from a database at request time). Build them once per plan with `params_of`,
  /// never by changing the fields of one: a bucket's also holds values derived from them.
  using Params = typename M::Params;

  /// The parameters of an algorithm's configuration, as the limiter's constructor builds them:
  /// `params_of(TokenBucketConfig{capacity, refill})` (and `LeakyBucketConfig`) through
  /// `M::make_params`; `params_of(rate)` for the windows (a `Rate`: limit rate.count per
  /// rate.period) through `M::from_rate`; the calendar quota's `params_of(limit, calendar)`.
  /// Throws `std::invalid_argument` naming the field and value out of range.
  /// Thread safety: a pure function.
  template <class... Config>
  static Params params_of(const Config&... config) requires(
      requires { M::make_params(config...); } || requires { M::from_rate(config...); }) {
    if constexpr (requires { M::make_params(config...); })
      return M::make_params(config...);
    else
      return M::from_rate(config...);
  }

  /// The limiter's own parameters: what calls without parameters decide with.
  /// Thread safety: safe from many threads (they never change).
  const Params& params() const noexcept { return params_; }

  /// `try_acquire(key, cost)` decided with `params` instead of the limiter's own (the key's
  /// plan). The key keeps one state whatever parameters decide it: a key whose parameters
  /// change is decided under the new ones as docs/algorithms.md "Semantics shared by all" says
  /// (windows keep their counts and times, buckets their full instant), on every storage.
  /// Reserves (`set_reserves`) do not apply: decided as critical. Listeners hear it and shadow
  /// mode applies, as for `try_acquire(key, cost)`. Throws `std::invalid_argument` for
  /// cost < 1, or naming the field and value of `params` out of the model's range (as the
  /// storage's `with_params`); nothing is decided or changed then. In process it costs what a
  /// take costs plus the parameters' range check; on Redis the script's arguments are
  /// formatted per call. Thread safety: safe from many threads.
  Decision try_acquire(std::string_view key, std::int64_t cost, const Params& params) {
    return decide_with(params, key, cost, read_clock);
  }

  /// The same at `now`, a reading of this limiter's clock (clamped to [0, 2^62] ns).
  /// Errors and thread safety as above.
  Decision try_acquire(std::string_view key, std::int64_t cost, const Params& params,
                       std::chrono::nanoseconds now) {
    return decide_with(params, key, cost, clock_range(now));
  }

  /// What a cost-1 request for `key` decided with `params` would get now; changes nothing.
  /// Throws as `try_acquire(key, cost, params)`. Thread safety: safe from many threads.
  Decision peek(std::string_view key, const Params& params) {
    return apply_with(params, key, read_clock, Operation{1, true, Decision::never});
  }

  /// `try_acquire(key, cost, params)` without blocking: returns at once and hands the Decision
  /// to `done(Decision)`, exactly once, as `try_acquire_async(key, cost, done)` does (on a
  /// Redis storage on its I/O thread; in process here). Throws `std::invalid_argument` (and
  /// never calls `done`) for cost < 1 or `params` out of range. Listeners and shadow mode as
  /// for `try_acquire`. Thread safety: safe from many threads.
  template <class F>
  requires std::invocable<F&, Decision>
  void try_acquire_async(std::string_view key, std::int64_t cost, const Params& params, F&& done) {
    check_cost(cost);
    const auto now = clock_.now();
    const Operation op{cost, false, Decision::never};
    if constexpr (locating_with) {
      // In process the decision is made here: the same path as the blocking call.
      Decision d = decide_with(params, key, cost, now);
      auto completion = detail::make_completion<Decision>(std::forward<F>(done));
      detail::complete_safely(completion, std::move(d));
    } else {
      const Binding b = binding_.with_params(params);  // throws before anything is sent
      auto completion = detail::make_completion<Decision>(std::forward<F>(done));
      if (const detail::ObserverSet* obs = observers_.current()) [[unlikely]] {
        // As in try_acquire_async(key, cost, done): the completion may outlive the limiter.
        completion = [set = obs->shared_from_this(), name = name_, k = std::string(key), cost,
                      inner = std::move(completion)](Decision d) {
          if (set->shadow && !d.allowed) shadow(d);
          detail::Observers::decision(*set, name, k, cost, d, std::chrono::nanoseconds{-1});
          inner(std::move(d));
        };
      }
      if constexpr (requires { b.apply_async(key, now, op, std::move(completion)); }) {
        b.apply_async(key, now, op, std::move(completion));  // the binding copies what it keeps
      } else {
        Decision d = b.apply(key, now, op);
        detail::complete_safely(completion, std::move(d));
      }
    }
  }

  /// As above, through a future (its `get` blocks: not on the storage's I/O thread).
  std::future<Decision> try_acquire_async(std::string_view key, std::int64_t cost,
                                          const Params& params) {
    auto promise = std::make_shared<std::promise<Decision>>();
    auto future = promise->get_future();
    try_acquire_async(key, cost, params, [promise](Decision d) { promise->set_value(d); });
    return future;
  }

  /// `refund(key, cost, taken_at)` decided with `params` (pass those the take was decided
  /// with). Throws `std::invalid_argument` for cost < 1 or `params` out of range; nothing
  /// changes then. Listeners hear `Outcome::refunded`. Thread safety: safe from many threads.
  Decision refund(std::string_view key, std::int64_t cost, std::chrono::nanoseconds taken_at,
                  const Params& params) requires Adjustable<M> {
    refuse_far_storages();
    check_cost(cost);
    Operation op{cost, false, Decision::never, Operation::Kind::refund};
    op.taken_at = clock_range(taken_at);
    const Decision d = apply_with(params, key, read_clock, op);
    notify_listeners(key, cost, d, Outcome::refunded);
    return d;
  }

  /// `penalty(key, cost)` decided with `params` (at most twice their limit is ever spent).
  /// Throws `std::invalid_argument` for cost < 1 or `params` out of range; nothing changes
  /// then. Listeners hear `Outcome::penalized`. Thread safety: safe from many threads.
  Decision penalty(std::string_view key, std::int64_t cost,
                   const Params& params) requires Adjustable<M> {
    refuse_far_storages();
    check_cost(cost);
    const Decision d = apply_with(
        params, key, read_clock, Operation{cost, false, Decision::never, Operation::Kind::penalty});
    notify_listeners(key, cost, d, Outcome::penalized);
    return d;
  }

 private:
  /// Whether the binding decides a located key with parameters given per call, without being
  /// copied (in process: `apply_with`, no reference count taken per decision).
  static constexpr bool locating_with =
      requires(const Binding& b, const Params& p, const Located& at, std::string_view k,
               std::chrono::nanoseconds t, const Operation& op) {
    { b.apply_with(p, at, k, t, op) } -> std::same_as<Decision>;
  };

  /// `try_acquire(key, cost, params)` at `now` (or the clock's reading if `read_clock`),
  /// listeners and shadow mode applied.
  Decision decide_with(const Params& params, std::string_view key, std::int64_t cost,
                       std::chrono::nanoseconds now) {
    check_cost(cost);
    const Operation op{cost, false, Decision::never};
    if (const detail::ObserverSet* obs = observers_.current()) [[unlikely]]
      return observed(*obs, key, cost, [&] { return apply_with(params, key, now, op); });
    return apply_with(params, key, now, op);
  }

  /// `op` on `key` decided with `params` (validated before anything changes) at `now`, or at
  /// the clock's reading if `now` is `read_clock`: in process without copying the binding,
  /// elsewhere through the storage's `with_params`.
  Decision apply_with(const Params& params, std::string_view key, std::chrono::nanoseconds now,
                      const Operation& op) {
    if constexpr (locating_with) {
      const Located at = binding_.locate(key);  // before the clock read, which overlaps it
      return binding_.apply_with(params, at, key, now == read_clock ? clock_.now() : now, op);
    } else {
      const Binding b = binding_.with_params(params);
      return b.apply(key, now == read_clock ? clock_.now() : now, op);
    }
  }
  // --- end of the decisions that carry their key's parameters ---------------------------------

 private:
  bool shed_configured() const noexcept { return reserves_.normal > 0 || reserves_.sheddable > 0; }

  S storage_;
  C clock_;
  std::string name_;
  typename M::Params params_;
  Binding binding_;
  Reserves reserves_;
  std::array<std::optional<Binding>, 2> shed_;  ///< normal, sheddable; empty: never admitted
  detail::Observers observers_;
};

}  // namespace ratelimit::detail

namespace ratelimit {

/// A limiter for any model `M` (the five algorithms' classes derive from it; an algorithm added
/// to a registry uses it directly): `try_acquire`, `peek`, `reset`, `acquire` as documented on
/// `detail::Limiter`, its storage binding under `name`. Errors and thread safety: as there.
template <Model M, Clock C = SteadyClock, class S = InMemoryStorage>
using BasicLimiter = detail::Limiter<M, C, S>;

}  // namespace ratelimit
