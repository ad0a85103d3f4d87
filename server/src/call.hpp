#pragma once
/// @file call.hpp
/// One ShouldRateLimit call on its way through the service: planned (plan.hpp), counted by a
/// strategy (counting.hpp) and answered (response.hpp). Internal to the server.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <google/protobuf/struct.pb.h>

#include <ratelimit/core/decision.hpp>
#include <ratelimit/rules.hpp>

#include "counters.hpp"
#include "rls.pb.h"

namespace ratelimit::server {

/// The configuration a call is decided under: the rules, and each rule's `metadata` as the
/// google.protobuf.Struct the reference builds of it (src/config/config_impl.go,
/// parseMetadata). Thread safety: immutable once served.
struct Served {
  RulesConfig rules;
  std::unordered_map<const Rule*, google::protobuf::Struct> metadata;
};

/// A limit as the wire reports it: the unit enum and the window in seconds (the reference's
/// UnitToDivider, src/utils/utilities.go: a week is 7 days, a month 30, a year 365).
struct WireUnit {
  envoy::service::ratelimit::v3::RateLimitResponse::RateLimit::Unit unit{};
  std::int64_t window_s = 1;
};

/// What one descriptor of a call came to before counting.
struct PlannedDescriptor {
  const Rule* rule = nullptr;  ///< the rules' limit (null for none, an override, unlimited)
  /// A limit applies (a rule or the request's override): the reference's `limitsToCheck[i] !=
  /// nil` (src/service/ratelimit.go).
  bool limited = false;
  bool unlimited = false;
  bool shadow = false;
  bool quota = false;  ///< the rule's quota_mode (the global QUOTA_MODE is applied in response)
  /// Decided by a library algorithm (the rule's `algorithm`), not the Go window.
  bool library = false;
  /// A library algorithm's `requests_per_unit: 0`: denied without asking the storage.
  bool blocked = false;
  /// The rule's lockout (`Rule::block_duration`): the counter was found locked out before
  /// counting, so it is decided as `lock_denial` and not counted (`hit` empty).
  bool locked = false;
  Decision lock_denial{};
  /// The lock's time left when found locked, or the wait of the lock this call's denial took
  /// (or found taken by a racing call); 0 when no lock is involved.
  std::chrono::nanoseconds lock_wait{0};
  std::optional<std::size_t> hit;  ///< its entry in the call's hits, when counted
  WireUnit unit{};
  std::int64_t limit = 0;
  std::int64_t hits = 0;  ///< its hits (hits_addend rules)
  std::string name;
  std::string metric;  ///< its metric name (only with a listener or an observer)
  /// The request's entries (only when a `DescriptorObserver` is set).
  std::vector<DescriptorEntry> entries;
};

/// One call between its steps. Thread safety: owned by one step at a time.
struct Call {
  std::shared_ptr<const Served> served;  ///< keeps the plan's `Rule` pointers valid
  std::string domain;
  std::vector<PlannedDescriptor> plan;  ///< one per request descriptor, in order
  std::vector<Hit> hits;                ///< what goes to the storage
  std::chrono::nanoseconds now{0};
  envoy::service::ratelimit::v3::RateLimitResponse* response = nullptr;
  /// Per hit: its decision, once counted.
  std::vector<Decision> decisions;
  /// Per hit: known over its limit from the over-limit cache (not sent to the storage).
  std::vector<bool> cached;
  /// Per hit: the counter's count after this call's hits when the storage told it (the Go
  /// window: the count its hits brought the counter to, admitted or not; a read: the count
  /// read); nullopt when unknown (the over-limit cache, a library algorithm, all or nothing).
  std::vector<std::optional<std::int64_t>> counts;
  /// When this call's decision latency is sampled (`ratelimit::detail::sample_latency`): when
  /// its counting started, on the steady clock.
  std::optional<std::chrono::steady_clock::time_point> latency_from;
  /// false when nothing was counted (all or nothing, denied): admissions are dry runs.
  bool counted = true;
  /// RESPONSE_DYNAMIC_METADATA: the request's part of the response's dynamic metadata
  /// (domain, descriptors, hitsAddend), built while the request is at hand.
  std::optional<google::protobuf::Struct> metadata;
};

/// Whole seconds since the epoch of `now` (0 before it).
inline std::int64_t seconds_of(std::chrono::nanoseconds now) {
  return now.count() < 0 ? 0 : now.count() / 1'000'000'000;
}

}  // namespace ratelimit::server
