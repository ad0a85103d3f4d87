#pragma once
/// @file rules/result.hpp
/// What deciding a request under rules gives: `RateLimitResponse` for Envoy's descriptor list
/// (one `DescriptorStatus` per descriptor), and `RuleSetDecision` for the flat request (one
/// `RuleOutcome` per matching limit), its thin mirror. Both give the response's headers.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../core/decision.hpp"
#include "../core/rate.hpp"
#include "../http/headers.hpp"
#include "match.hpp"
#include "request.hpp"
#include "rule.hpp"
#include "rules.hpp"

namespace ratelimit {

/// What one matching limit decided for a flat request (`RuleSet::decide(entries)`).
/// Thread safety: a plain value.
struct RuleOutcome {
  const Rule* rule = nullptr;
  /// The rule's counter key and client (see `RuleMatch`).
  std::string key;
  std::string client;
  /// When the request was denied (by this rule or another), the dry run's decision: this rule's
  /// state as it is, unchanged. When admitted, the committed decision. A shadow-mode limit that
  /// denied (would have denied) admits, with `Decision::shadow_denied`; a quota-mode limit
  /// that denied while another quota-mode limit admitted keeps its denial (the request went on
  /// without it).
  Decision decision{};
};

/// The decision on one flat request under every limit that matched it: the descriptor-list
/// decision (`RateLimitResponse`) of `Rules::descriptors_of(request)`, one outcome per limit.
/// Thread safety: a plain value.
struct RuleSetDecision {
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  /// true iff no enforced limit denied (also when none matched): shadow-mode limits never deny,
  /// quota-mode limits deny only all together (see `RateLimitResponse::allowed`). When false,
  /// no counter changed.
  bool allowed = true;
  /// One entry per matching limit that was decided, in file order (a limit another matching
  /// limit `replaces` is not decided, and has none).
  std::vector<RuleOutcome> outcomes;
  /// The outcome that speaks for the request among those not in shadow mode (a denial with the
  /// longest wait, else the fewest remaining requests; the choice of
  /// `RateLimitResponse::decision`), or `none` when there is none.
  std::size_t deciding = none;

  /// The deciding outcome's decision with `allowed` for the whole request and, when admitted,
  /// the longest `delay` of any limit not in shadow mode (a leaky bucket's queue). With no
  /// deciding outcome: `allowed`, every other field 0.
  Decision decision() const {
    Decision d{};
    d.allowed = allowed;
    if (deciding == none) return d;
    d = outcomes[deciding].decision;
    d.allowed = allowed;
    if (allowed)
      for (const RuleOutcome& o : outcomes)
        if (!o.rule->shadow_mode) d.delay = std::max(d.delay, o.decision.delay);
    return d;
  }

  /// Each outcome's policy and decision, for `rate_limit_headers`; shadow-mode limits are not
  /// advertised (as in `RateLimitResponse::policies`).
  std::vector<PolicyDecision> policies() const {
    std::vector<PolicyDecision> out;
    out.reserve(outcomes.size());
    for (const RuleOutcome& o : outcomes)
      if (!o.rule->shadow_mode) out.push_back({o.rule->policy(), o.decision});
    return out;
  }

  /// The response headers (see http.hpp); empty when no limit was advertised.
  HeaderList headers() const {
    const auto p = policies();
    return rate_limit_headers(std::span<const PolicyDecision>(p));
  }

  /// Same as `allowed`.
  explicit operator bool() const noexcept { return allowed; }
};

/// What one descriptor of a descriptor-list request came to (Envoy's `DescriptorStatus`).
/// Thread safety: a plain value; `rule` points into the rules of the response's `rules`.
struct DescriptorStatus {
  enum class Code { ok, over_limit };

  /// This descriptor's own verdict: `over_limit` when its limit denied (for a shadow-mode limit:
  /// would have denied). `ok` when no limit applied, and for a check without spending
  /// (`hits == 0`).
  Code code = Code::ok;
  /// The rules' limit where the descriptor landed (also when replaced), or null.
  const Rule* rule = nullptr;
  /// The descriptor's own limit (`RateLimitDescriptor::limit`), applied instead of the rules'.
  std::optional<Rate> override_rate;
  /// The descriptor landed on an unlimited limit: ok, nothing decided (Envoy reports the
  /// maximum remaining).
  bool unlimited = false;
  /// `rule` was named in the `replaces` of another limit of the request: not decided.
  bool replaced = false;
  /// `rule` is in shadow mode: its denials never deny the request.
  bool shadow = false;
  /// A limit was decided for this descriptor (`decision` is meaningful).
  bool evaluated = false;
  /// The counter was locked out (its rule's `block_duration`): denied without asking the
  /// limit, `decision` the lock's denial (`remaining` 0, `retry_after` the time left of the
  /// lock).
  bool locked = false;
  /// The counter within the limit (see `RuleMatch::key`; for an override, every entry).
  std::string key;
  /// The units it spent or would spend (its `hits_addend`, else the request's, else 1).
  std::int64_t hits = 1;
  /// The limit's decision: committed when the request was admitted and this limit spent;
  /// otherwise the dry run's (the counter as it is). Descriptors landing on one counter share
  /// one decision for their summed hits.
  Decision decision{};
};

/// The decision on a descriptor-list request (`RuleSet::decide(const RateLimitRequest&)`).
/// Thread safety: a plain value.
struct RateLimitResponse {
  /// true iff no enforced limit denied (shadow-mode limits never deny; quota-mode limits deny
  /// only all together). When false, no counter changed.
  bool allowed = true;
  /// One per descriptor of the request, in its order.
  std::vector<DescriptorStatus> statuses;
  /// The descriptors whose shadow-mode limit would have denied, in request order.
  std::vector<std::size_t> shadow_denials;
  /// The rules the statuses' `rule` pointers point into (kept alive by the response).
  std::shared_ptr<const Rules> rules;

  /// The decision that speaks for the request among the evaluated, non-shadow limits (a denial
  /// with the longest wait, else the fewest remaining), with `allowed` for the whole request;
  /// admitted with every other field 0 when none was evaluated.
  Decision decision() const {
    Decision d{};
    const DescriptorStatus* best = nullptr;
    for (const DescriptorStatus& s : statuses)
      if (s.evaluated && !s.shadow &&
          (best == nullptr || detail::more_restrictive(s.decision, best->decision)))
        best = &s;
    if (best != nullptr) d = best->decision;
    d.allowed = allowed;
    return d;
  }

  /// Each evaluated, non-shadow limit's policy and decision, for `rate_limit_headers`; an
  /// override's policy is named by its entries ("key=value|...").
  std::vector<PolicyDecision> policies() const {
    std::vector<PolicyDecision> out;
    for (const DescriptorStatus& s : statuses) {
      if (!s.evaluated || s.shadow) continue;
      if (s.rule != nullptr && !s.override_rate) {
        out.push_back({s.rule->policy(), s.decision});
      } else if (s.override_rate) {
        out.push_back(
            {QuotaPolicy{"override", s.override_rate->count, s.override_rate->period}, s.decision});
      }
    }
    return out;
  }

  /// The response headers (see http.hpp); empty when no limit was evaluated.
  HeaderList headers() const {
    const auto p = policies();
    return rate_limit_headers(std::span<const PolicyDecision>(p));
  }

  /// Same as `allowed`.
  explicit operator bool() const noexcept { return allowed; }
};

namespace detail {

/// The decision of a `requests_per_unit: 0` rule: nothing is ever admitted.
constexpr Decision blocked_decision() noexcept {
  Decision d{};
  d.allowed = false;
  d.retry_after = Decision::never;
  return d;
}

/// The descriptor-list response `r` to `list` (a flat request's, `Rules::descriptors_of`)
/// told as the flat decision: one outcome per decided limit, a shadow-mode denial as an
/// admission with `shadow_denied`, the deciding outcome chosen as `RateLimitResponse::decision`
/// chooses.
inline RuleSetDecision flat_decision(const RateLimitRequest& list, const RateLimitResponse& r) {
  RuleSetDecision out;
  out.allowed = r.allowed;
  for (std::size_t i = 0; i < r.statuses.size(); ++i) {
    const DescriptorStatus& st = r.statuses[i];
    if (!st.evaluated) continue;  // unlimited, or replaced
    RuleOutcome o{st.rule, st.key,
                  client_of(r.rules->client_keys(), *st.rule, list.descriptors[i].entries),
                  st.decision};
    if (st.shadow && !o.decision.allowed) {
      o.decision.allowed = true;
      o.decision.shadow_denied = true;
    }
    out.outcomes.push_back(std::move(o));
  }
  for (std::size_t k = 0; k < out.outcomes.size(); ++k)
    if (!out.outcomes[k].rule->shadow_mode &&
        (out.deciding == RuleSetDecision::none ||
         more_restrictive(out.outcomes[k].decision, out.outcomes[out.deciding].decision)))
      out.deciding = k;
  return out;
}

}  // namespace detail

}  // namespace ratelimit
