#pragma once
/// @file check/actions.hpp
/// Descriptors from an HTTP request as Envoy's route `rate_limits` build them, for gateways that
/// are not Envoy (the forward-auth check). An actions file lists, per domain, `rate_limits`
/// entries in the vocabulary of envoy.config.route.v3.RateLimit (field names as there):
///
/// ```yaml
/// domains:
///   - domain: edge
///     rate_limits:
///       - actions:
///           - remote_address: {}
///       - actions:
///           - generic_key: {descriptor_value: api}
///           - request_headers: {header_name: x-api-key, descriptor_key: key, skip_if_absent: true}
/// ```
///
/// Actions: `request_headers` {header_name, descriptor_key, skip_if_absent}, `remote_address`
/// {}, `masked_remote_address` {v4_prefix_mask_len, v6_prefix_mask_len}, `generic_key`
/// {descriptor_value, descriptor_key}, `header_value_match` {descriptor_value, descriptor_key,
/// expect_match, headers}, `query_parameters` {query_parameter_name, descriptor_key,
/// skip_if_absent}, `query_parameter_value_match` {descriptor_value, descriptor_key,
/// expect_match, query_parameters}. The request's path (with its query), method and authority
/// are the headers `:path`, `:method`, `:authority` (and `:scheme`).
///
/// Semantics, as Envoy's source/common/router/router_ratelimit.cc: each `rate_limits` entry
/// yields one descriptor or none; an action that cannot produce its entry (header or parameter
/// absent without `skip_if_absent`, a match that is not the expected one, an address that is
/// not IP) drops that entry's whole descriptor; `skip_if_absent` leaves the entry out and
/// keeps the rest. Default keys: `remote_address`, `masked_remote_address`, `generic_key`,
/// `header_match`, `query_match`. `request_headers` takes a header's first value;
/// `header_value_match` all of its values joined with ','. Entries with a `stage` other than
/// 0 never apply (Envoy's rate limit filter runs stage 0 by default). Actions that need
/// Envoy's own state (`source_cluster`, `destination_cluster`, `metadata`, `dynamic_metadata`,
/// `extension`) and an entry's `limit` override or `disable_key` are refused by name.

#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ratelimit::server::check {

/// The attributes of the request a gateway asks about. Thread safety: a plain value.
struct OriginalRequest {
  std::string method;     ///< `:method`
  std::string path;       ///< `:path`: the path with its query string, as sent
  std::string authority;  ///< `:authority` (the Host)
  std::string scheme;     ///< `:scheme`
  /// Every other header, in arrival order; names compared case-insensitively.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string client_address;  ///< an IPv4 or IPv6 literal; anything else is "not IP"
};

/// One descriptor: its entries (key, value) in order.
using DescriptorEntries = std::vector<std::pair<std::string, std::string>>;

/// One `rate_limits` entry: its actions (defined in actions.cpp).
struct RateLimitEntry;

/// One domain's `rate_limits`. Thread safety: immutable after loading; `descriptors` from
/// any thread.
class DomainActions {
 public:
  DomainActions();
  ~DomainActions();
  DomainActions(DomainActions&&) noexcept;
  DomainActions& operator=(DomainActions&&) noexcept;

  /// The descriptors `request` yields, one per entry that produces one, in order.
  std::vector<DescriptorEntries> descriptors(const OriginalRequest& request) const;

  /// The domain's entries of stage 0, in file order (at most `ActionsConfig::max_entries`).
  std::vector<std::unique_ptr<RateLimitEntry>> entries;
};

/// The actions of every domain. Thread safety: immutable after loading.
class ActionsConfig {
 public:
  /// Parses `text`, named `file` in errors. Throws `std::invalid_argument`
  /// "FILE:LINE: FIELD: reason" for any field that is unknown, of the wrong type, out of range,
  /// or a regex that RE2 refuses; and for more than `max_entries` entries in a domain, more than
  /// `max_actions` actions in an entry, or more than `max_matchers` header or parameter matchers
  /// in an action (bounds on what one request can cost).
  static ActionsConfig parse(std::string_view text, const std::string& file);
  /// `parse` of the file's content; throws `std::invalid_argument` "FILE: cannot read" too.
  static ActionsConfig load(const std::filesystem::path& file);

  /// The domain's actions, or nullptr when the file has none for it.
  const DomainActions* domain(std::string_view name) const;

  static constexpr std::size_t max_entries = 256;  ///< `rate_limits` entries per domain
  static constexpr std::size_t max_actions = 32;   ///< actions per entry
  static constexpr std::size_t max_matchers = 32;  ///< header or parameter matchers per action

 private:
  std::map<std::string, DomainActions, std::less<>> domains_;
};

}  // namespace ratelimit::server::check
