#pragma once
/// @file core/all_of.hpp
/// Several limiters on one key decided as one: a request admitted only if every limiter admits
/// it, spending from each; denied by one, it spends nothing from any (e.g. a rate beside a
/// calendar quota). The limiters' common storage is the unit of atomicity (`decide_all`, see
/// core/storage.hpp): in process under the keys' shard locks, on Redis as one script.

#include <algorithm>
#include <array>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "clock.hpp"
#include "completion.hpp"
#include "decision.hpp"
#include "detail/validate.hpp"
#include "storage.hpp"

namespace ratelimit {

/// What `try_acquire_all` decided: `allowed` for the request, and each limiter's decision in
/// the order the limiters were given (when denied, each is its dry run: the key as it is).
/// Thread safety: a plain value.
template <std::size_t N>
struct AllOfDecision {
  bool allowed = false;                 ///< every limiter admitted, and each spent the cost
  std::array<Decision, N> decisions{};  ///< one per limiter, in argument order

  /// The decision that speaks for the request, with `allowed` the request's: a denial with the
  /// longest `retry_after` (`never` first), else the admission with the fewest remaining (ties:
  /// the later `reset_after`), i.e. the limit the client meets first.
  Decision decision() const noexcept {
    std::size_t best = 0;
    for (std::size_t i = 1; i < N; ++i)
      if (more_restrictive(decisions[i], decisions[best])) best = i;
    Decision d = decisions[best];
    d.allowed = allowed;
    return d;
  }

  /// Same as `allowed`.
  explicit operator bool() const noexcept { return allowed; }

 private:
  /// Whether `a` says more about the request's fate than `b` (the rule of `decision()`; the
  /// same as the HTTP headers' choice, http/headers.hpp, which this layer cannot include).
  static constexpr bool more_restrictive(const Decision& a, const Decision& b) noexcept {
    if (a.allowed != b.allowed) return !a.allowed;
    if (!a.allowed) return a.retry_after > b.retry_after;
    return a.remaining < b.remaining ||
           (a.remaining == b.remaining && a.reset_after > b.reset_after);
  }
};

/// Decides one request of `cost` units for `key` under every limiter at `now` (a reading of the
/// limiters' clock), all or nothing, in one `decide_all` of their storage. The limiters must
/// share one storage (one `InMemoryStorage`, or one `RedisStorage` whose copies they hold; a
/// Redis decision across two storages degrades by the failure policy) and differ in algorithm
/// or name (a key decided twice throws `std::invalid_argument`). On Redis Cluster the parts
/// share the key's hash tag, so one slot. A `now` outside [0, 2^62] ns is clamped.
/// Throws `std::invalid_argument` if cost < 1; a storage may throw per its failure policy.
/// Thread safety: safe from many threads, atomic with every other decision on these keys.
template <class First, class... Rest>
AllOfDecision<1 + sizeof...(Rest)> try_acquire_all(std::string_view key, std::int64_t cost,
                                                   std::chrono::nanoseconds now, First& first,
                                                   Rest&... rest) {
  using S = std::remove_cvref_t<decltype(first.storage())>;
  static_assert((std::is_same_v<S, std::remove_cvref_t<decltype(rest.storage())>> && ...),
                "ratelimit::try_acquire_all: the limiters must have the same Storage type");
  static_assert(MultiKeyStorage<S>,
                "ratelimit::try_acquire_all: the Storage must decide several keys at once");
  detail::check_cost(cost);
  now = std::clamp(now, std::chrono::nanoseconds{0}, max_clock_time);
  const Operation op{cost, false, Decision::never};
  const std::array<typename S::Part, 1 + sizeof...(Rest)> parts{
      first.binding().part(key, op, key), rest.binding().part(key, op, key)...};
  AllOfDecision<1 + sizeof...(Rest)> out;
  out.allowed = first.storage().decide_all(std::span<const typename S::Part>(parts), now,
                                           std::span<Decision>(out.decisions));
  return out;
}

/// As above at the first limiter's clock reading (`first.clock().now()`): give limiters that
/// share a clock (copies of one `ManualClock`, or `SystemClock`).
template <class First, class... Rest>
AllOfDecision<1 + sizeof...(Rest)> try_acquire_all(std::string_view key, std::int64_t cost,
                                                   First& first, Rest&... rest) {
  return try_acquire_all(key, cost, first.clock().now(), first, rest...);
}

/// `try_acquire_all` without blocking, at the first limiter's clock reading: returns at once
/// and hands the `AllOfDecision` to `done` exactly once, on a Redis storage's I/O thread (one
/// composed script, pipelined with the other threads' decisions) or here before this returns
/// (in process, or when Redis is not tried); see core/completion.hpp for the thread rule. The
/// limiters' bindings are copied for the call, so the limiters need not outlive it. Throws
/// `std::invalid_argument` (and never calls `done`) as `try_acquire_all` does.
/// Thread safety: safe from many threads.
template <class F, class First, class... Rest>
requires std::invocable<F&, AllOfDecision<1 + sizeof...(Rest)>>
void try_acquire_all_async(std::string_view key, std::int64_t cost, F&& done, First& first,
                           Rest&... rest) {
  constexpr std::size_t n = 1 + sizeof...(Rest);
  using S = std::remove_cvref_t<decltype(first.storage())>;
  using Part = typename S::Part;
  auto complete = detail::make_completion<AllOfDecision<n>>(std::forward<F>(done));
  const auto now = std::clamp(first.clock().now(), std::chrono::nanoseconds{0}, max_clock_time);
  if constexpr (requires(const S& s, std::function<void(std::vector<Decision>&&, bool)> f) {
                  s.decide_all_async(std::span<const Part>{}, now, f);
                }) {
    static_assert((std::is_same_v<S, std::remove_cvref_t<decltype(rest.storage())>> && ...),
                  "ratelimit::try_acquire_all_async: the limiters must have the same Storage type");
    detail::check_cost(cost);
    // The parts refer to their bindings until `done`: copies that ride along with the call.
    auto bindings = std::make_shared<std::tuple<std::remove_cvref_t<decltype(first.binding())>,
                                                std::remove_cvref_t<decltype(rest.binding())>...>>(
        first.binding(), rest.binding()...);
    const Operation op{cost, false, Decision::never};
    const auto parts = std::apply(
        [&](const auto&... b) { return std::array<Part, n>{b.part(key, op, key)...}; }, *bindings);
    first.storage().decide_all_async(std::span<const Part>(parts), now,
                                     [bindings, complete](std::vector<Decision>&& ds, bool all) {
                                       AllOfDecision<n> out;
                                       out.allowed = all;
                                       for (std::size_t i = 0; i < n && i < ds.size(); ++i)
                                         out.decisions[i] = ds[i];
                                       detail::complete_safely(complete, std::move(out));
                                     });
  } else {  // a storage that decides in process: the decision is ready now
    AllOfDecision<n> out = try_acquire_all(key, cost, now, first, rest...);
    detail::complete_safely(complete, std::move(out));
  }
}

}  // namespace ratelimit
