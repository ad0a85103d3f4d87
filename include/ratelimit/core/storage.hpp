#pragma once
/// @file core/storage.hpp
/// The seams between an algorithm and where its per-key state lives.
///
/// An algorithm is a *model*: a pure transition `state + now + operation -> decision + state`.
/// A storage applies a model's transition to one key atomically: in process under a lock, in
/// Redis as one Lua script that mirrors the model. Limiters (TokenBucket, ...) only glue a clock
/// and a storage to a model.

#include <chrono>
#include <concepts>
#include <cstdint>
#include <string_view>
#include <utility>

#include "decision.hpp"

namespace ratelimit {

/// What a limiter asks of one key.
/// Thread safety: a plain value.
struct Operation {
  /// Units (tokens or requests) the request costs, >= 1 (checked by the limiter).
  std::int64_t cost = 1;
  /// true: decide a request of `cost` but change nothing (a dry run). The limiters' `peek` sends
  /// cost 1; a rule set dry-runs every rule with the real cost before it commits any.
  bool peek = false;
  /// Leaky bucket only: deny unless the request would also be *served* (queue delay included)
  /// within this time. `Decision::never` (the default) means no bound.
  std::chrono::nanoseconds max_wait = Decision::never;
};

/// An algorithm model (see TokenBucketModel and the others).
///
/// Requirements: `M::name` names the algorithm (stable: storages use it in their keys);
/// `M::State{}` is the fresh state; `M::apply(params, state, now, op)` decides at `now` (ns, the
/// clock's reading) and updates `state` only when it admits a non-peek operation;
/// `M::is_fresh(params, state, now)` is true when `state` decides exactly like `State{}` from
/// `now` on, so a storage may drop it. Both are pure and must not throw.
template <class M>
concept Model = requires {
  typename M::Params;
  typename M::State;
  { M::name } -> std::convertible_to<std::string_view>;
}
&&requires(const typename M::Params& p, typename M::State& s, std::chrono::nanoseconds t,
           const Operation& op) {
  { M::apply(p, s, t, op) } -> std::same_as<Decision>;
  { M::is_fresh(p, std::as_const(s), t) } -> std::same_as<bool>;
};

/// What `s.bind<M>(name, params)` returns: the model bound to one limiter's policy.
///
/// Requirements: `apply(key, now, op)` runs the model's transition on `key`'s state atomically
/// (no other decision on the same key interleaves) and returns its decision; `reset(key)` puts
/// the key back to its fresh state. Both are safe to call from many threads.
template <class B>
concept Binding = requires(B& b, std::string_view key, std::chrono::nanoseconds now,
                           const Operation& op) {
  { b.apply(key, now, op) } -> std::same_as<Decision>;
  b.reset(key);
};

/// A storage policy that can hold model `M`'s state.
///
/// Requirements: copies are handles to the same state (one storage serves many limiters);
/// `s.template bind<M>(name, params)` returns a `Binding` whose keys never meet those of another
/// model or another `name` on the same storage. `bind` may throw `std::invalid_argument` when
/// the storage cannot represent `params` exactly.
template <class S, class M>
concept StorageFor = Model<M> && std::copy_constructible<S> &&
    requires(S& s, std::string_view name, const typename M::Params& p) {
  { s.template bind<M>(name, p) } -> Binding;
};

}  // namespace ratelimit
