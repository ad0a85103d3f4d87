#pragma once
/// @file rules/request.hpp
/// What a request carries to be matched against rules: descriptor entries (key, value), and
/// Envoy's descriptor-list request (`RateLimitRequest`: a domain and several descriptors, each
/// an ordered list of entries with an optional limit override and hits addend), as Envoy's
/// `envoy.service.ratelimit.v3.RateLimitRequest` and `RateLimitDescriptor` define them.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ratelimit {

/// One entry of a request's descriptors: a key and its value for this request.
/// Thread safety: a plain value.
struct DescriptorEntry {
  std::string key;
  std::string value;
};

/// The unit of a limit override (Envoy's `RateLimitUnit`, the units of a rules file).
enum class RateUnit { second, minute, hour, day };

/// The length of `unit`. Thread safety: pure.
constexpr std::chrono::nanoseconds period_of(RateUnit unit) noexcept {
  switch (unit) {
    case RateUnit::second:
      return std::chrono::seconds{1};
    case RateUnit::minute:
      return std::chrono::minutes{1};
    case RateUnit::hour:
      return std::chrono::hours{1};
    case RateUnit::day:
      return std::chrono::hours{24};
  }
  return std::chrono::seconds{1};
}

/// A descriptor's own limit, which replaces whatever the rules say for it (Envoy's
/// `RateLimitDescriptor.RateLimitOverride`). Thread safety: a plain value.
struct RateLimitOverride {
  /// 0 to 10^9; 0 denies every request (as `requests_per_unit: 0` in a file).
  std::int64_t requests_per_unit = 0;
  RateUnit unit = RateUnit::second;
};

/// One descriptor of a descriptor-list request: an ordered list of entries, matched one level
/// of the rules per entry (see `Rules::lookup`). Thread safety: a plain value.
struct RateLimitDescriptor {
  std::vector<DescriptorEntry> entries;
  /// When set, this limit applies instead of the rules' (its counter is the entries' values
  /// under the domain and unit; never shadow, never replaced, never replacing).
  std::optional<RateLimitOverride> limit = std::nullopt;
  /// Units this descriptor spends, >= 0, overriding the request's `hits_addend`; 0 checks
  /// without spending (as in Envoy).
  std::optional<std::int64_t> hits_addend = std::nullopt;
};

/// A descriptor-list request (Envoy's `RateLimitRequest`): the domain, its descriptors, and the
/// units each spends, >= 0 (0, the default, means 1, as in Envoy). Thread safety: a plain value.
struct RateLimitRequest {
  std::string domain;
  std::vector<RateLimitDescriptor> descriptors;
  std::int64_t hits_addend = 0;
};

}  // namespace ratelimit
