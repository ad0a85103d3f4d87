#pragma once
/// @file http/headers.hpp
/// Response headers that tell an HTTP client where it stands: framework-neutral name/value pairs
/// built from a `Decision`.
///
/// Fields written (names as listed; HTTP field names are case-insensitive):
/// - `RateLimit-Policy` and `RateLimit`, as in the IETF httpapi draft "RateLimit header fields
///   for HTTP" (draft-ietf-httpapi-ratelimit-headers-10 and -11, sections 3 and 4): Structured
///   Field lists of `"name";q=QUOTA;w=WINDOW` and `"name";r=REMAINING;t=SECONDS`.
/// - `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`: the widespread pre-draft
///   convention (GitHub, Twitter and others); Reset is a delay in seconds, not a timestamp, so
///   it does not depend on the client's clock.
/// - `Retry-After` (RFC 9110, section 10.2.3), delay-seconds, only on a denial that waiting can
///   cure.
///
/// Every time is whole seconds rounded **up**, so a client that waits what it was told is never
/// early.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/decision.hpp"

namespace ratelimit {

/// Response header fields, in the order they should be sent.
using HeaderList = std::vector<std::pair<std::string, std::string>>;

/// What a client is told about one quota policy (the draft's "RateLimit-Policy" item).
/// Thread safety: a plain value.
struct QuotaPolicy {
  /// The policy's identifier, sent as a Structured Field String. Bytes outside printable ASCII
  /// (0x20..0x7E) are sent as '?', which a String cannot carry; '"' and '\' are escaped.
  std::string name;
  /// `q`: the requests the policy allows per window (>= 0).
  std::int64_t quota = 0;
  /// `w`: the policy's window (for a bucket, the time to refill it completely); sent in whole
  /// seconds rounded up, and at least 1 s (the draft requires a non-zero integer).
  std::chrono::nanoseconds window{0};
};

/// One policy and the decision it produced for this request.
/// Thread safety: a plain value.
struct PolicyDecision {
  QuotaPolicy policy;
  Decision decision;
};

namespace detail {

/// ceil(d / 1 s) for d >= 0; negative durations count as 0.
constexpr std::int64_t ceil_seconds(std::chrono::nanoseconds d) noexcept {
  constexpr std::int64_t second = 1'000'000'000;
  return d.count() <= 0 ? 0 : (d.count() - 1) / second + 1;
}

/// `s` as a Structured Field String (RFC 8941, section 3.3.3).
inline std::string sf_string(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c < 0x20 || c > 0x7E) {  // char may be signed: bytes >= 0x80 are negative
      out.push_back('?');
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

/// A Structured Field Integer has at most 15 digits; larger values are clamped so the field
/// stays valid (no realistic limit or time comes near: 10^15 s is 31 million years).
constexpr std::int64_t sf_integer(std::int64_t v) noexcept {
  constexpr std::int64_t max = 999'999'999'999'999;
  return v < 0 ? 0 : (v > max ? max : v);
}

/// Whether waiting can cure this decision.
constexpr bool retryable_denial(const Decision& d) noexcept {
  return !d.allowed && d.retry_after != Decision::never;
}

/// The draft's effective window `t` for one decision: when admitted, the time until the key is
/// fresh again; when denied, the time the client must wait (r = 0 or too few units within it),
/// which keeps `Retry-After` no earlier than the end of the effective window (draft section 6).
constexpr std::int64_t effective_window(const Decision& d) noexcept {
  return retryable_denial(d) ? ceil_seconds(d.retry_after) : ceil_seconds(d.reset_after);
}

inline std::string policy_item(const QuotaPolicy& p) {
  const std::int64_t w = ceil_seconds(p.window);
  return sf_string(p.name) + ";q=" + std::to_string(sf_integer(p.quota)) +
         ";w=" + std::to_string(sf_integer(w < 1 ? 1 : w));
}

inline std::string limit_item(const QuotaPolicy& p, const Decision& d) {
  return sf_string(p.name) + ";r=" + std::to_string(sf_integer(d.remaining)) +
         ";t=" + std::to_string(sf_integer(effective_window(d)));
}

/// Whether `a` says more about the request's fate than `b`: a denial beats an admission; among
/// denials, the longer wait (`never` beats any wait); among admissions, the fewer remaining
/// requests (ties: the later reset), i.e. the policy the client will hit first.
constexpr bool more_restrictive(const Decision& a, const Decision& b) noexcept {
  if (a.allowed != b.allowed) return !a.allowed;
  if (!a.allowed) return a.retry_after > b.retry_after;
  return a.remaining < b.remaining || (a.remaining == b.remaining && a.reset_after > b.reset_after);
}

/// The index of the decision that speaks for the whole request (see `more_restrictive`); the
/// first such one on ties. `all` must not be empty.
inline std::size_t most_restrictive(std::span<const PolicyDecision> all) noexcept {
  std::size_t best = 0;
  for (std::size_t i = 1; i < all.size(); ++i)
    if (more_restrictive(all[i].decision, all[best].decision)) best = i;
  return best;
}

}  // namespace detail

/// The response headers for a request decided by several policies (every policy that matched
/// it): `RateLimit-Policy` and `RateLimit` list each policy in the given order; the
/// `X-RateLimit-*` fields and `Retry-After` describe the most restrictive decision (see
/// `detail::more_restrictive`), since those legacy fields can only carry one.
///
/// - `RateLimit: "name";r=REMAINING;t=T`: T is the time until the key is fresh again when the
///   request was admitted, and the wait (`retry_after`) when it was denied, so that `Retry-After`
///   never points earlier than the end of the effective window (draft section 6).
/// - `X-RateLimit-Limit` = limit, `X-RateLimit-Remaining` = remaining, `X-RateLimit-Reset` =
///   `reset_after` in seconds rounded up.
/// - `Retry-After` = `retry_after` in seconds rounded up, only when the request was denied and
///   waiting can cure it. A decision with `retry_after == Decision::never` (the cost exceeds the
///   limit, or the rule blocks everything) gets **no** `Retry-After`: no wait makes the same
///   request succeed, and any number (say, the window) would invite a client that honours it
///   to retry a doomed request forever. Its `t` is then `reset_after`, and the 429's body should
///   say why (see the gateway example).
///
/// An empty list gives an empty result (no policy applied to the request).
/// Thread safety: pure.
inline HeaderList rate_limit_headers(std::span<const PolicyDecision> all) {
  HeaderList h;
  if (all.empty()) return h;
  std::string policies, limits;
  for (const PolicyDecision& pd : all) {
    if (!policies.empty()) {
      policies += ", ";
      limits += ", ";
    }
    policies += detail::policy_item(pd.policy);
    limits += detail::limit_item(pd.policy, pd.decision);
  }
  const Decision& d = all[detail::most_restrictive(all)].decision;
  h.reserve(6);
  h.emplace_back("RateLimit-Policy", std::move(policies));
  h.emplace_back("RateLimit", std::move(limits));
  h.emplace_back("X-RateLimit-Limit", std::to_string(detail::sf_integer(d.limit)));
  h.emplace_back("X-RateLimit-Remaining", std::to_string(detail::sf_integer(d.remaining)));
  h.emplace_back("X-RateLimit-Reset", std::to_string(detail::ceil_seconds(d.reset_after)));
  if (detail::retryable_denial(d))
    h.emplace_back("Retry-After", std::to_string(detail::ceil_seconds(d.retry_after)));
  return h;
}

/// The response headers for a request decided by one policy; see the overload above.
/// Example: policy {"default", 100, 60 s}, an admitted decision with remaining 42 and
/// reset_after 29.2 s gives `RateLimit-Policy: "default";q=100;w=60`,
/// `RateLimit: "default";r=42;t=30`, `X-RateLimit-Limit: 100`, `X-RateLimit-Remaining: 42`,
/// `X-RateLimit-Reset: 30`.
/// Thread safety: pure.
inline HeaderList rate_limit_headers(const Decision& d, const QuotaPolicy& policy) {
  const PolicyDecision one{policy, d};
  return rate_limit_headers(std::span<const PolicyDecision>(&one, 1));
}

}  // namespace ratelimit
