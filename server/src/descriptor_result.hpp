#pragma once
/// @file descriptor_result.hpp
/// What one descriptor of a ShouldRateLimit call came to, in one struct, handed to a
/// `DescriptorObserver` (e.g. the reference's per-limit stats) from one place: the response
/// step (response.cpp, `build_response`), once per descriptor that a limit applies to, after
/// the call is decided and before it is answered.

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>

#include <ratelimit/rules.hpp>

namespace ratelimit::server {

/// Where a descriptor's count stands against its limit, as the reference's base limiter
/// (src/limiter/base_limiter.go, GetResponseDescriptorStatus) sorts it: over when the count
/// after the hits exceeds the limit (or the over-limit cache knows it over), near when it
/// exceeds floor(limit * NEAR_LIMIT_RATIO), else within.
enum class LimitStanding { within, near, over };

/// One descriptor's result. Every view points into the call and is valid only during the
/// observer's call. Thread safety: a plain value.
struct DescriptorResult {
  std::string_view domain;
  /// The request's entries of this descriptor.
  std::span<const DescriptorEntry> entries;
  /// The rules' limit, or null for the request's own limit (a RateLimitOverride).
  const Rule* rule = nullptr;
  /// The metric name, as the reference names a limit's stats ("<domain>.<key>_<value>...", see
  /// `RuleSet::metric_name`; "<domain>.override" for an override).
  std::string_view metric;
  std::int64_t limit = 0;     ///< requests per unit
  std::int64_t window_s = 1;  ///< the unit, in seconds (the reference's UnitToDivider)
  std::int64_t hits = 0;      ///< the descriptor's hits (0: a read)
  /// The counter before and after this call's hits, when known: the Go window's count is
  /// always known but from the over-limit cache or in all or nothing (after: the count every
  /// storage returns beside the decision, `HitResult::count`, over the limit too; before =
  /// after - hits); otherwise only when admitted (after = limit - remaining).
  std::optional<std::int64_t> count_before, count_after;
  LimitStanding standing = LimitStanding::within;
  bool shadow = false;             ///< the limit is in shadow mode
  bool quota = false;              ///< quota mode (the rule's or QUOTA_MODE)
  bool from_local_cache = false;   ///< over, known from the over-limit cache, storage not asked
  bool counted = true;             ///< the hits were spent (false: an all-or-nothing dry run)
  bool library_algorithm = false;  ///< decided by a library algorithm, not the Go window
};

/// Called once per decided descriptor of every call (see the file comment), on the thread that
/// completes the call (a gRPC or storage I/O thread): keep it short, never block. What it
/// throws is swallowed. Must be safe from many threads.
using DescriptorObserver = std::function<void(const DescriptorResult&)>;

}  // namespace ratelimit::server
