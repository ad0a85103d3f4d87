#pragma once
/// @file algorithms.hpp
/// The five algorithms behind one shape, for the tests that run the same scenario through each
/// (conformance, concurrency, randomized differential, memory): how to build the limiter on a
/// given storage with a ManualClock, and the matching naive reference model.
///
/// `Algorithms` is THE list of algorithms the tests know, derived from the registry
/// (`rltest::TestAlgorithms`: the library's `Algorithms` plus the test-only sixth): the
/// conformance suite (its product with `Backends`) and `for_each_algorithm` both read it, so an
/// algorithm joins them by its registry line (plus its Algo struct here and its row in
/// tests/conformance/table.hpp).

#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <ratelimit/core/limiter.hpp>
#include <ratelimit/ratelimit.hpp>

#include "anchored_window.hpp"
#include "reference.hpp"

namespace rltest {

/// A limit and a rate. Buckets: capacity (or queue size) `limit` refilled (drained) at `rate`.
/// Windows: `limit` must equal `rate.count`.
struct Shape {
  std::int64_t limit;
  ratelimit::Rate rate;
};

inline const ratelimit::Rate& window_rate(const Shape& s) {
  if (s.limit != s.rate.count) throw std::logic_error("a window shape needs limit == rate.count");
  return s.rate;
}

struct TokenBucketAlgo {
  static constexpr const char* name = "token bucket";
  template <class S>
  using Limiter = ratelimit::TokenBucket<ratelimit::ManualClock, S>;
  using Reference = ref::TokenBucket;
  using Model = ratelimit::TokenBucketModel;
  template <class S>
  static Limiter<S> make(const Shape& s, S storage, ratelimit::ManualClock clock,
                         std::string name = {}) {
    return Limiter<S>(ratelimit::TokenBucketConfig{s.limit, s.rate}, std::move(storage),
                      std::move(clock), std::move(name));
  }
  static Reference reference(const Shape& s) { return Reference(s.limit, s.rate); }
};

struct LeakyBucketAlgo {
  static constexpr const char* name = "leaky bucket";
  template <class S>
  using Limiter = ratelimit::LeakyBucket<ratelimit::ManualClock, S>;
  using Reference = ref::LeakyBucket;
  using Model = ratelimit::LeakyBucketModel;
  template <class S>
  static Limiter<S> make(const Shape& s, S storage, ratelimit::ManualClock clock,
                         std::string name = {}) {
    return Limiter<S>(ratelimit::LeakyBucketConfig{s.limit, s.rate}, std::move(storage),
                      std::move(clock), std::move(name));
  }
  static Reference reference(const Shape& s) { return Reference(s.limit, s.rate); }
};

struct FixedWindowAlgo {
  static constexpr const char* name = "fixed window";
  template <class S>
  using Limiter = ratelimit::FixedWindow<ratelimit::ManualClock, S>;
  using Reference = ref::FixedWindow;
  using Model = ratelimit::FixedWindowModel;
  template <class S>
  static Limiter<S> make(const Shape& s, S storage, ratelimit::ManualClock clock,
                         std::string name = {}) {
    return Limiter<S>(window_rate(s), std::move(storage), std::move(clock), std::move(name));
  }
  static Reference reference(const Shape& s) { return Reference(window_rate(s)); }
};

struct SlidingLogAlgo {
  static constexpr const char* name = "sliding log";
  template <class S>
  using Limiter = ratelimit::SlidingLog<ratelimit::ManualClock, S>;
  using Reference = ref::SlidingLog;
  using Model = ratelimit::SlidingLogModel;
  template <class S>
  static Limiter<S> make(const Shape& s, S storage, ratelimit::ManualClock clock,
                         std::string name = {}) {
    return Limiter<S>(window_rate(s), std::move(storage), std::move(clock), std::move(name));
  }
  static Reference reference(const Shape& s) { return Reference(window_rate(s)); }
};

struct SlidingCounterAlgo {
  static constexpr const char* name = "sliding counter";
  template <class S>
  using Limiter = ratelimit::SlidingCounter<ratelimit::ManualClock, S>;
  using Reference = ref::SlidingCounter;
  using Model = ratelimit::SlidingCounterModel;
  template <class S>
  static Limiter<S> make(const Shape& s, S storage, ratelimit::ManualClock clock,
                         std::string name = {}) {
    return Limiter<S>(window_rate(s), std::move(storage), std::move(clock), std::move(name));
  }
  static Reference reference(const Shape& s) { return Reference(window_rate(s)); }
};

struct AnchoredWindowAlgo {
  static constexpr const char* name = "anchored window";
  template <class S>
  using Limiter = ratelimit::BasicLimiter<AnchoredWindowModel, ratelimit::ManualClock, S>;
  using Reference = ref::AnchoredWindow;
  using Model = AnchoredWindowModel;
  template <class S>
  static Limiter<S> make(const Shape& s, S storage, ratelimit::ManualClock clock,
                         std::string name = {}) {
    return Limiter<S>(AnchoredWindowModel::from_rate(window_rate(s)), std::move(storage),
                      std::move(clock), std::move(name));
  }
  static Reference reference(const Shape& s) { return Reference(window_rate(s)); }
};

namespace detail {
/// The Algo struct of each model: the Algo structs above, found by their `Model`.
template <class M, class... Algos>
struct AlgoOf;
template <class M, class A, class... Rest>
struct AlgoOf<M, A, Rest...> {
  using type = std::conditional_t<std::is_same_v<M, typename A::Model>, A,
                                  typename AlgoOf<M, Rest...>::type>;
};
template <class M>
struct AlgoOf<M> {
  using type = void;  // a registry model without an Algo struct: the suite fails to compile
};
template <class M>
using Algo = typename AlgoOf<M, TokenBucketAlgo, LeakyBucketAlgo, FixedWindowAlgo, SlidingLogAlgo,
                             SlidingCounterAlgo, AnchoredWindowAlgo>::type;
template <class... Ms>
std::tuple<Algo<Ms>...> algos_of(ratelimit::AlgorithmList<Ms...>*);
}  // namespace detail

/// Every algorithm the tests run, in the registry's order: the library's registry plus the
/// test-only sixth algorithm, `TestAlgorithms` (anchored_window.hpp). Adding an algorithm to
/// the registry adds it here; its Algo struct must exist above.
using Algorithms = decltype(detail::algos_of(static_cast<TestAlgorithms*>(nullptr)));

namespace detail {
template <class F, class... Algos>
void for_each_in(std::tuple<Algos...>*, F& f) {
  (f.template operator()<Algos>(), ...);
}
}  // namespace detail

/// Calls `f.template operator()<Algo>()` for each algorithm of `Algorithms`, in its order.
template <class F>
void for_each_algorithm(F&& f) {
  detail::for_each_in(static_cast<Algorithms*>(nullptr), f);
}

}  // namespace rltest
