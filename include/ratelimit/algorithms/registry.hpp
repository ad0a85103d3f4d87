#pragma once
/// @file algorithms/registry.hpp
/// The one list of the algorithms. Every place that dispatches on "which algorithm" reads it:
/// rules files (the `algorithm` field, by name), rule sets (binding each rule's model), the
/// static checks that a storage holds every algorithm, and the tests' conformance suite. Each
/// entry is a model, which brings everything else about its algorithm: its stable `name`, its
/// `wire_id`, its parameters (`Params`, and `from_rate` for a rules-file limit), its pure
/// transition, its Lua twin and reply codec (`Wire`, see core/wire.hpp).
///
/// Adding an algorithm: its model header (algorithms/<name>.hpp), its script (lua/<name>.lua,
/// embedded by cmake/embed_lua.cmake like every other), and one line below; docs/layout.md has
/// the whole checklist (entry header, tests, docs, benchmarks). A program (or a
/// test) may also extend the list for itself, `Algorithms::with<MyModel>`, and pass that to
/// whatever takes a registry (`Rules::from_string<R>`, `RuleSet<Storage, Clock, R>`).

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

#include "../core/rate.hpp"
#include "../core/storage.hpp"
#include "../core/wire.hpp"
#include "fixed_window.hpp"
#include "leaky_bucket.hpp"
#include "sliding_counter.hpp"
#include "sliding_log.hpp"
#include "token_bucket.hpp"

namespace ratelimit {

/// A model that can be listed in a registry: a `WireModel` (so shared storages can hold it)
/// whose parameters can be built from a rules file's "count per period" (`from_rate`).
template <class M>
concept RegisteredModel = WireModel<M> && requires(const Rate& r) {
  { M::from_rate(r) } -> std::same_as<typename M::Params>;
};

/// Everything a rules file says about one limit, for a model whose parameters need more than
/// its rate (the calendar quota's time zone). The views point into the rules' own strings.
/// Thread safety: a plain value.
struct LimitSpec {
  /// `requests_per_unit` per `unit` (a week is 7 days; a month is given its longest, 31 days;
  /// a year is 365 days).
  Rate rate;
  /// `rate_limit.unit`, lower case: second, minute, hour, day, week, month or year.
  std::string_view unit;
  /// `rate_limit.time_zone` (an extension), an IANA name; empty when absent.
  std::string_view time_zone;
  /// `rate_limit.first_day` (an extension), "monday" .. "sunday"; empty when absent.
  std::string_view first_day;
};

/// Whether model `M` reads a whole `LimitSpec` (`M::from_limit(spec)`, optional) rather than
/// only its rate; such a model also takes week and month units and the calendar fields.
template <class M>
concept LimitSpecModel = requires(const LimitSpec& spec) {
  { M::from_limit(spec) } -> std::same_as<typename M::Params>;
};

/// The parameters of a rules-file limit for model `M`: `M::from_limit(spec)` if it has one,
/// else `M::from_rate(spec.rate)`. Throws what they throw (`std::invalid_argument`).
template <RegisteredModel M>
typename M::Params params_from_limit(const LimitSpec& spec) {
  if constexpr (LimitSpecModel<M>)
    return M::from_limit(spec);
  else
    return M::from_rate(spec.rate);
}

/// A list of algorithms (see the file comment). Names and wire ids must be unique.
/// Thread safety: compile-time only; the functions are pure.
template <RegisteredModel... Ms>
struct AlgorithmList {
  /// This list with `M` appended.
  template <RegisteredModel M>
  using with = AlgorithmList<Ms..., M>;

  /// How many algorithms.
  static constexpr std::size_t size = sizeof...(Ms);

  /// Whether `M` is listed.
  template <class M>
  static constexpr bool contains = (std::is_same_v<M, Ms> || ...);

  /// Calls `f.template operator()<M>()` for each model, in list order.
  template <class F>
  static constexpr void for_each(F&& f) {
    (f.template operator()<Ms>(), ...);
  }

  /// Calls `f.template operator()<M>()` for the model named `name`; false if none is.
  template <class F>
  static bool visit(std::string_view name, F&& f) {
    return ((Ms::name == name ? (f.template operator()<Ms>(), true) : false) || ...);
  }

  /// The names, comma-separated in list order (for error messages).
  static std::string names() {
    std::string out;
    ((out += (out.empty() ? "" : ", "), out += Ms::name), ...);
    return out;
  }

 private:
  static constexpr bool unique() {
    constexpr std::string_view names[] = {Ms::name...};
    constexpr int ids[] = {Ms::wire_id...};
    for (std::size_t i = 0; i < sizeof...(Ms); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (names[i] == names[j] || ids[i] == ids[j]) return false;
    for (const int id : ids)
      if (id < 1 || id > 255) return false;
    return true;
  }
  static_assert(sizeof...(Ms) > 0 && unique(),
                "ratelimit::AlgorithmList: names and wire ids (1..255) must be unique");
};

/// The library's algorithms: the registry every default reads.
using Algorithms = AlgorithmList<TokenBucketModel, LeakyBucketModel, FixedWindowModel,
                                 SlidingLogModel, SlidingCounterModel>;

}  // namespace ratelimit
