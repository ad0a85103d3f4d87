#pragma once
/// @file core/storage.hpp
/// The seams between an algorithm and where its per-key state lives.
///
/// An algorithm is a *model*: a pure transition `state + now + operation -> decision + state`.
/// A storage applies a model's transition to one key atomically (in process under the key's
/// shard lock, in Redis as one Lua script that mirrors the model), and to several keys at once,
/// all or nothing (`decide_all`). Limiters (TokenBucket, ...) only glue a clock and a storage to
/// a model; rule sets glue a storage to several models.

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>

#include "decision.hpp"

namespace ratelimit {

/// What a limiter asks of one key.
/// Thread safety: a plain value.
struct Operation {
  /// What the operation does to the key: `spend` (every model), or `release`, which gives back
  /// a held concurrency slot (ConcurrencyModel only; see `lease_end`), or, for models with
  /// `Adjustable` (the five algorithms; docs/algorithms.md "Refunds, penalties and lockouts"):
  /// `refund`, which gives back up to `cost` units that a take at `taken_at` removed, and
  /// `penalty`, which spends `cost` units whether or not they fit. Both always apply (never
  /// denied) and return what a cost-1 peek would report right after them. Storages pass the
  /// kind through to the model without looking at it; the Redis bindings skip the pre-limit
  /// and the over-limit cache for them. `reserve` (models with `Reservable`, the two buckets)
  /// takes `cost` units now even beyond the limit, the key going into debt, unless they would
  /// be due later than `max_wait` (docs/algorithms.md "Reservations"); the Redis bindings send
  /// it straight to Redis too.
  enum class Kind : std::uint8_t { spend, release, refund, penalty, reserve };

  /// Units (tokens or requests) the request costs, >= 1 (checked by the limiter).
  std::int64_t cost = 1;
  /// true: decide a request of `cost` but change nothing (a dry run). The limiters' `peek` sends
  /// cost 1; `decide_all` dry-runs every part with the real cost before it commits any.
  bool peek = false;
  /// Leaky bucket only: deny unless the request would also be *served* (queue delay included)
  /// within this time. For a `reserve` (both buckets), the most its units may be due after it.
  /// `Decision::never` (the default) means no bound.
  std::chrono::nanoseconds max_wait = Decision::never;
  /// See `Kind`.
  Kind kind = Kind::spend;
  /// ConcurrencyModel only (ns on the limiter's clock): the end of the lease a `spend` takes, or
  /// of the lease a `release` gives back. Other models ignore it.
  std::chrono::nanoseconds lease_end{0};
  /// `refund` only (ns on the limiter's clock): when the take being given back was decided
  /// (clamped to the refund's own time). Other kinds ignore it.
  std::chrono::nanoseconds taken_at{0};
};

/// A model that takes `Operation::Kind::refund` and `penalty` (`M::adjustable` is true): the
/// limiters' `refund` and `penalty` need it. Its `apply` must then change the state only as
/// docs/algorithms.md defines (a refund never gives back more than the take removed, nor
/// crosses into another window; a penalty never leaves more than twice the limit spent).
template <class M>
concept Adjustable = requires {
  requires M::adjustable;
};

/// A model that takes `Operation::Kind::reserve` (`M::reservable` is true: the token and the
/// leaky bucket): the limiters' `reserve` needs it. Its `apply` must then admit a reservation
/// only when its delay is at most `op.max_wait` and it leaves at most twice the limit spent,
/// and report the delay in `Decision::delay` (docs/algorithms.md "Reservations"). The windows
/// do not declare it: their state holds one window, so units that do not fit now would belong
/// to a window the state cannot hold, and units that fit are used at once.
template <class M>
concept Reservable = Adjustable<M> && requires {
  requires M::reservable;
};

/// A storage whose bindings pass refunds and penalties to the model unchanged and keep the
/// model's bounds for them (`S::adjusts` is true: in process, Redis, Redis Cluster). The far
/// storages do not declare it: they decide on shares of a limit or on exchanged counts, whose
/// bounds (docs/far.md) are proven for takes only.
template <class S>
concept AdjustingStorage = requires {
  requires S::adjusts;
};

/// An algorithm model (see TokenBucketModel and the others).
///
/// Requirements: `M::name` names the algorithm (stable: storages use it in their keys and rules
/// files in their `algorithm` field); `M::State{}` is the fresh state; `M::apply(params, state,
/// now, op)` decides at `now` (ns, the clock's reading) and updates `state` only when it admits
/// a non-peek operation; `M::fresh_at(params, state)` is the earliest time (ns) from which
/// `state` decides exactly like `State{}`, never before the latest time the state keeps: a
/// storage may drop a key fresh at its current time, and then decides it no earlier than that
/// key's own `fresh_at` (never another key's time). Both are pure and must not throw.
/// Optional: `M::check_params(params)` throws `std::invalid_argument` naming the field for
/// parameters the model cannot decide exactly (its state's representation relies on their
/// ranges); storages call it on parameters given directly (`bind`, `with_params`).
template <class M>
concept Model = requires {
  typename M::Params;
  typename M::State;
  { M::name } -> std::convertible_to<std::string_view>;
}
&&requires(const typename M::Params& p, typename M::State& s, std::chrono::nanoseconds t,
           const Operation& op) {
  { M::apply(p, s, t, op) } -> std::same_as<Decision>;
  { M::fresh_at(p, std::as_const(s)) } -> std::same_as<std::chrono::nanoseconds>;
};

/// What `s.bind<M>(name, params)` returns: the model bound to one limiter's policy.
///
/// Requirements:
/// - `apply(key, now, op)` runs the model's transition on `key`'s state atomically (no other
///   decision on the same key interleaves, whether single-key or `decide_all`) and returns its
///   decision; `reset(key)` puts the key back to its fresh state. Both are safe from many
///   threads.
/// - `part(key, op, tag)` names one (model, key, operation) of an all-or-nothing decision (see
///   `MultiKeyStorage`); `tag` is a co-location hint: parts with equal non-empty tags are stored
///   together (on Redis Cluster, one slot); empty means the key itself. The part refers to the
///   binding and the key: both must outlive the `decide_all` call.
/// - `with_params(p)` is the same binding (same keys, same state) deciding with other parameters
///   of the same model: per-call limits (a limit that differs per key or changes at run time).
///   Decisions made with different parameters on one key are each exact for their parameters.
template <class B>
concept Binding = requires(B& b, std::string_view key, std::chrono::nanoseconds now,
                           const Operation& op) {
  typename B::Model;
  { b.apply(key, now, op) } -> std::same_as<Decision>;
  b.reset(key);
  b.part(key, op, key);
  { b.with_params(std::declval<const typename B::Model::Params&>()) } -> std::same_as<B>;
};

/// A storage that decides several keys at once, all or nothing.
///
/// Requirements: `S::Part` is what a binding's `part(...)` returns; `s.decide_all(parts, now,
/// out)` decides every part at `now`: either every part admits and every non-peek part is spent,
/// or nothing changes anywhere. `out[i]` receives part i's decision (when nothing was spent, the
/// dry run's: the key's state as it is). Returns true iff every part admitted. Parts must name
/// distinct keys (a (binding, key) pair at most once; `std::invalid_argument` otherwise).
/// Thread safety: safe from many threads; atomic with respect to every single-key decision on
/// the same keys.
template <class S>
concept MultiKeyStorage = requires(S& s, std::span<const typename S::Part> parts,
                                   std::chrono::nanoseconds now, std::span<Decision> out) {
  { s.decide_all(parts, now, out) } -> std::same_as<bool>;
};

/// A storage policy that can hold model `M`'s state.
///
/// Requirements: copies are handles to the same state (one storage serves many limiters);
/// `s.template bind<M>(name, params)` returns a `Binding` whose keys never meet those of another
/// model or another `name` on the same storage; and the storage decides several keys at once
/// (`MultiKeyStorage`). `bind` may throw `std::invalid_argument` when the storage cannot
/// represent `params` exactly.
template <class S, class M>
concept StorageFor = Model<M> && std::copy_constructible<S> && MultiKeyStorage<S> &&
    requires(S& s, std::string_view name, const typename M::Params& p) {
  { s.template bind<M>(name, p) } -> Binding;
};

}  // namespace ratelimit
