#pragma once
/// @file conformance.hpp
/// The conformance suite's parameterization: every shared rule of the semantics (README,
/// "Semantics shared by all") is written once, as a `TEMPLATE_LIST_TEST_CASE(..., Cases)`, and
/// runs once per `Case<Algo, Backend>` of the product `rltest::Algorithms` x `Backends`:
/// every algorithm on every storage the executable is built with (support/backends.hpp). The
/// expected values come from the algorithm's row of the table (table.hpp).

#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <ratelimit/ratelimit.hpp>

#include "support/algorithms.hpp"
#include "support/backends.hpp"
#include "support/expect.hpp"
#include "table.hpp"

namespace rltest::conformance {

template <class Algo, class = void>
inline constexpr bool has_row = false;
template <class Algo>
inline constexpr bool has_row<Algo, std::void_t<decltype(sizeof(Row<Algo>))>> = true;

/// One algorithm on one storage backend.
template <class A, class B>
struct Case {
  static_assert(has_row<A>,
                "every algorithm of rltest::Algorithms needs its row of expected values in "
                "tests/conformance/table.hpp");
  using Algo = A;
  using Backend = B;
  using Row = conformance::Row<A>;
  static constexpr std::int64_t limit = Row::shape.limit;
  static_assert(limit >= 2, "the scenarios spend a key in two steps: a row's limit must be >= 2");

  /// A limiter of the row's shape on a fresh storage of the backend (no other case shares it).
  static auto make(ratelimit::ManualClock clock) {
    return A::make(Row::shape, B::make(), std::move(clock));
  }

  /// "algorithm on storage", for INFO.
  static std::string label() { return std::string(A::name) + " on " + B::name; }
};

namespace detail {
template <class A, class... Bs>
using CasesOf = std::tuple<Case<A, Bs>...>;

template <class Algos, class Backs>
struct Product;
template <class... As, class... Bs>
struct Product<std::tuple<As...>, std::tuple<Bs...>> {
  using type = decltype(std::tuple_cat(std::declval<CasesOf<As, Bs...>>()...));
};
}  // namespace detail

/// Algorithms x Backends, algorithm-major.
using Cases = typename detail::Product<rltest::Algorithms, Backends>::type;

}  // namespace rltest::conformance
