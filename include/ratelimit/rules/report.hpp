#pragma once
/// @file rules/report.hpp
/// What a rule set tells its listeners (core/listener.hpp) about a decided request: each
/// limit's decision under a metric name as Envoy's rate limit service names its stats.

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "../core/decision.hpp"
#include "../core/listener.hpp"
#include "match.hpp"
#include "request.hpp"
#include "result.hpp"
#include "rule.hpp"
#include "rules.hpp"

namespace ratelimit::detail {

/// The metric name of `rule` (see `RuleSet::metric_name`).
template <class ValueOf>
std::string rule_metric_name(const Rules& rules, const Rule& rule, ValueOf& value_of) {
  std::string out = rules.domain();
  for (const Rule::Step& step : rule.path) {
    out += '.';
    out += step.key;
    const bool from_request = rule.detailed_metric || (rule.value_to_metric && step.varies());
    const std::string* v = from_request ? value_of(step.key) : nullptr;
    if (v != nullptr) {
      out += '_';
      out += *v;
    } else if (step.has_value) {
      out += '_';
      out += step.value;
    }
  }
  return out;
}

/// Tells the listeners of `obs` what a descriptor-list request came to (see
/// `RuleSet::attach_listener`). A flat request is told the same way: as its descriptor list.
inline void report_response(const ObserverSet& obs, const Rules& rules,
                            const RateLimitRequest& request, const RateLimitResponse& r,
                            std::chrono::nanoseconds latency) noexcept {
  try {
    for (std::size_t i = 0; i < r.statuses.size(); ++i) {
      const DescriptorStatus& st = r.statuses[i];
      if (!st.evaluated || st.hits == 0) continue;
      const bool over = st.code == DescriptorStatus::Code::over_limit;
      Decision d = st.decision;
      if (!d.degraded && !over && !r.allowed) continue;  // a dry run
      if (st.shadow && over) {
        d.allowed = true;
        d.shadow_denied = true;
      }
      const auto& entries = request.descriptors[i].entries;
      std::string name, client;
      if (st.rule != nullptr && !st.override_rate) {
        // Entry j of the descriptor landed on step j of the rule's path.
        auto value_of = [&](std::string_view k) -> const std::string* {
          for (std::size_t j = 0; j < entries.size() && j < st.rule->path.size(); ++j)
            if (st.rule->path[j].key == k) return &entries[j].value;
          return nullptr;
        };
        name = rule_metric_name(rules, *st.rule, value_of);
        client = client_of(rules.client_keys(), *st.rule, entries);
      } else {
        name = rules.domain() + ".override";
      }
      if (st.locked)
        Observers::decision(obs, name, client, st.hits, d, latency, Outcome::locked_out);
      else
        Observers::decision(obs, name, client, st.hits, d, latency);
    }
  } catch (...) {  // out of memory building a name: the decision stands
  }
}

}  // namespace ratelimit::detail
