#pragma once
/// @file rules/rule.hpp
/// What a rules file is made of once loaded (`Rule`, one limit), what a request's matching
/// yields (`RuleMatch` for the flat request, `DescriptorMatch` for one descriptor of Envoy's
/// descriptor list), and where rules come from (`RulesSource`).
///
/// ## Per client and shared rules
/// A rule is *per client* when its path has a catch-all (no `value`, or a wildcard without
/// `share_threshold`) descriptor whose key is one of `client_keys` (default `api_key` and
/// `remote_address`): its counters are per client, and its `RuleMatch::client` names the client
/// ("api_key=K"). Other rules are *shared*: one counter for every client that matches (e.g. `path:
/// /login` with its own limit).

#include <chrono>
#include <string>
#include <vector>

#include "../algorithms/registry.hpp"
#include "../core/rate.hpp"
#include "../http/headers.hpp"
#include "algorithm.hpp"

namespace ratelimit {

/// One limit of a rules file: a descriptor with a `rate_limit`, identified by its path.
/// Thread safety: immutable once loaded.
struct Rule {
  /// One level of the path: a key, and the value it requires (`has_value`), a wildcard pattern
  /// (`wildcard`) or any value.
  struct Step {
    std::string key;
    /// The exact value, or the wildcard pattern (each `*` any run of characters).
    std::string value;
    bool has_value = false;
    /// `value` holds a `*`.
    bool wildcard = false;
    /// `share_threshold: true` (only with a wildcard): every matching value shares the counter.
    bool shared = false;
    /// Whether the request's value at this step is part of the counter key: no value, or a
    /// wildcard without `share_threshold` (each matching value has its own counter).
    bool varies() const noexcept { return !has_value || (wildcard && !shared); }
  };

  /// `rate_limit.name`, else the path written as `key` or `key=value` joined by '|'
  /// (e.g. "path=/login|api_key"). Unique within a domain.
  std::string name;
  /// `rate_limit.name` as written, "" if none: only a limit named in the file can be named by
  /// another's `replaces`.
  std::string given_name;
  /// `rate_limit.replaces[].name`: the limits this one replaces when both apply to a request
  /// (both forms of `RuleSet::decide`).
  std::vector<std::string> replaces;
  /// The descriptors from the top level down to this one.
  std::vector<Step> path;
  /// requests_per_unit per unit; count 0 blocks every request.
  Rate rate;
  /// `rate_limit.unit` as read, lower case ("second" .. "day", "year"; "week" and "month" for
  /// calendar algorithms only, an extension).
  std::string unit;
  /// Extension for calendar algorithms: `rate_limit.time_zone` (IANA name), or empty.
  std::string time_zone;
  /// Extension for calendar algorithms: `rate_limit.first_day` of a week, or empty.
  std::string first_day;
  Algorithm algorithm = Algorithm::sliding_counter;
  /// Extension: `rate_limit.block_duration`, the lockout of a counter whose limit denies a
  /// request (`Lockout`'s, algorithms/lockout.hpp): from that denial the counter is denied for
  /// this long without asking the limit. Whole seconds in [1 s, 366 days]; 0 (the default, the
  /// reference's meaning): no lockout.
  std::chrono::nanoseconds block_duration{0};
  /// Whether the counters are per client (see the file comment).
  bool per_client = false;
  /// `shadow_mode: true`: decided and spent as if enforced, but its denial never denies the
  /// request (both forms of `RuleSet::decide`).
  bool shadow_mode = false;
  /// `quota_mode: true`: its denial denies the request only when every quota-mode limit of the
  /// request denies (both forms of `RuleSet::decide`).
  bool quota_mode = false;
  /// `detailed_metric` and `value_to_metric`: kept for the caller's metrics; the library
  /// keeps no metrics and decides the same either way.
  bool detailed_metric = false;
  bool value_to_metric = false;
  /// `metadata`, as YAML flow text ("" if none): kept for the caller, never interpreted.
  std::string metadata;
  /// The rules source (file name) and line of the descriptor (1-based).
  std::string source;
  int line = 0;
  /// Stable identity used as the storage's limiter name: the domain, the path and the unit,
  /// each part length-prefixed (two different paths or units never share counters; the same
  /// file loaded by several processes, or reloaded with this limit unchanged, shares them).
  std::string id;

  /// The policy as advertised in `RateLimit-Policy`: name, quota = requests_per_unit, window =
  /// the unit (for a bucket, the time to refill or drain it completely).
  QuotaPolicy policy() const { return QuotaPolicy{name, rate.count, rate.period}; }
  /// true for `requests_per_unit: 0`.
  bool blocks() const noexcept { return rate.count == 0; }
  /// Whether a denial locks the counter out (`block_duration` given).
  bool locks_out() const noexcept { return block_duration.count() > 0; }
  /// What the file says about this limit, for the algorithm's parameters
  /// (`params_from_limit`, algorithms/registry.hpp). Points into this rule.
  LimitSpec limit_spec() const noexcept { return LimitSpec{rate, unit, time_zone, first_day}; }
  /// Whether the limit uses the calendar extension (a week or month unit, a time zone or a
  /// first day), which only an algorithm with `from_limit` takes. A year is not: every
  /// algorithm takes it (365 days; a calendar year for calendar algorithms).
  bool uses_calendar() const noexcept {
    return unit == "week" || unit == "month" || !time_zone.empty() || !first_day.empty();
  }
};

/// A rule that applies to one request, and which counter of it.
/// Thread safety: a plain value. `rule` points into the `Rules` object that matched (a copy of a
/// `Rules` has its own rules), valid while that object lives.
struct RuleMatch {
  const Rule* rule = nullptr;
  /// The counter within the rule: the request's values for the rule's varying descriptors (no
  /// value, or a wildcard without `share_threshold`), each length-prefixed ("" for a rule
  /// whose descriptors all name a value or a shared wildcard).
  std::string key;
  /// "key=value" of the client for a per-client rule, "" for a shared one.
  std::string client;
  /// Where the storage keeps the counter (`Binding::part`'s tag): for a per-client rule the
  /// client's value as it appears in `key` (length-prefixed), so that all of a client's
  /// counters share one Redis Cluster slot; "" (the counter key itself) for a shared rule.
  /// A rule whose only catch-all is the client has `tag == key`: a limiter named `rule.id`
  /// deciding `key` then decides the very same counter, on every storage.
  std::string tag;
};

/// Where one descriptor of a descriptor-list request lands (`Rules::lookup`).
/// Thread safety: a plain value; `rule` points into the `Rules` that looked it up.
struct DescriptorMatch {
  /// The limit that applies: the one of the descriptor where the last entry lands; null when
  /// the entries leave the tree, land on a descriptor without a limit, or on an unlimited one.
  const Rule* rule = nullptr;
  /// The last entry landed on `rate_limit: {unlimited: true}`.
  bool unlimited = false;
  /// The landing descriptor's `rate_limit.name` and `replaces` (also for an unlimited one,
  /// whose `replaces` count as in the reference).
  std::string name;
  std::vector<std::string> replaces;
  /// The counter within `rule` (see `RuleMatch::key`).
  std::string key;
  /// The storage's co-location tag for the counter (see `RuleMatch::tag`): the first client
  /// value among the varying entries when the rule is per client, else "".
  std::string tag;
};

/// One rules source: a name for error messages (e.g. the file name) and its YAML text.
/// Thread safety: a plain value.
struct RulesSource {
  std::string name;
  std::string text;
};

}  // namespace ratelimit
