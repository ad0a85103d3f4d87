#pragma once
/// @file redis/regional/part.hpp
/// What a regional storage holds (RegionalModel) and one part of its `decide_all`.

#include <chrono>
#include <string_view>
#include <type_traits>

#include "../../algorithms/fixed_window.hpp"
#include "../../algorithms/leaky_bucket.hpp"
#include "../../algorithms/sliding_counter.hpp"
#include "../../algorithms/token_bucket.hpp"
#include "../../core/completion.hpp"
#include "../../core/decision.hpp"
#include "../../core/storage.hpp"

namespace ratelimit {

/// The windows a regional storage holds: counts that merge by addition.
template <class M>
concept RegionalWindowModel =
    std::is_same_v<M, FixedWindowModel> || std::is_same_v<M, SlidingCounterModel>;

/// The buckets a regional storage holds: GCRA, whose admission only grows stricter with more
/// backlog, so every region debits the others' admissions late and stays within the bound
/// (redis/regional/bucket.hpp).
template <class M>
concept RegionalBucketModel =
    std::is_same_v<M, TokenBucketModel> || std::is_same_v<M, LeakyBucketModel>;

/// The algorithms a regional storage holds.
template <class M>
concept RegionalModel = RegionalWindowModel<M> || RegionalBucketModel<M>;

/// One part of a `RegionalStorage::decide_all` (one key: see there). Thread safety: a value.
struct RegionalPart {
  std::string_view key;
  Operation op;
  /// Decides the part: its binding's apply.
  Decision (*apply)(const void* binding, std::string_view key, std::chrono::nanoseconds now,
                    const Operation& op);
  const void* binding;
  /// Decides the part without blocking: its binding's apply_async (which copies the binding
  /// and the key before it returns).
  void (*apply_async)(const void* binding, std::string_view key, std::chrono::nanoseconds now,
                      const Operation& op, Completion<Decision> done);
};

}  // namespace ratelimit
