#include "plan.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "dynamic_metadata.hpp"
#include "go_window.hpp"

namespace ratelimit::server {
namespace {

namespace pb = envoy::service::ratelimit::v3;

/// The units by wire number (Envoy's rls.proto: WEEK, added last, is 7) and rules-file name.
constexpr struct {
  int number;
  pb::RateLimitResponse::RateLimit::Unit unit;
  std::string_view name;
} units[] = {{1, pb::RateLimitResponse::RateLimit::SECOND, "second"},
             {2, pb::RateLimitResponse::RateLimit::MINUTE, "minute"},
             {3, pb::RateLimitResponse::RateLimit::HOUR, "hour"},
             {4, pb::RateLimitResponse::RateLimit::DAY, "day"},
             {7, pb::RateLimitResponse::RateLimit::WEEK, "week"},
             {5, pb::RateLimitResponse::RateLimit::MONTH, "month"},
             {6, pb::RateLimitResponse::RateLimit::YEAR, "year"}};

/// The unit of a limit override: its number as the reference reads it (a cast to the response's
/// enum, src/config/config_impl.go GetLimit), so 7 is a week though Envoy's RateLimitUnit lacks it.
std::optional<WireUnit> unit_of_enum(int value) {
  for (const auto& u : units)
    if (u.number == value) return WireUnit{u.unit, GoWindowModel::divider(u.name)};
  return std::nullopt;
}

/// The unit of a rules file's limit (the loader gives it in lower case).
std::optional<WireUnit> unit_of_rule(const Rule& r) {
  for (const auto& u : units)
    if (r.unit == u.name) return WireUnit{u.unit, GoWindowModel::divider(u.name)};
  return std::nullopt;
}

void append_field(std::string& out, std::string_view s) {
  out += std::to_string(s.size());
  out += ':';
  out += s;
}

/// The reference's counter key of a descriptor without its prefix and window start
/// (src/limiter/cache_key.go): domain '_', then each entry's key '_' value '_'; an entry
/// matched by a `share_threshold` wildcard of `rule` gives the wildcard's pattern as value.
std::string go_key_of(const std::string& domain,
                      const envoy::extensions::common::ratelimit::v3::RateLimitDescriptor& d,
                      const Rule* rule) {
  std::string key = domain;
  key += '_';
  for (int i = 0; i < d.entries_size(); ++i) {
    const auto& e = d.entries(i);
    key += e.key();
    key += '_';
    const auto step = static_cast<std::size_t>(i);
    if (rule != nullptr && step < rule->path.size() && rule->path[step].wildcard &&
        rule->path[step].shared)
      key += rule->path[step].value;
    else
      key += e.value();
    key += '_';
  }
  return key;
}

}  // namespace

grpc::Status plan_call(const pb::RateLimitRequest& request, const ServiceSettings& settings,
                       Call& call) {
  // src/service/ratelimit.go, shouldRateLimitWorker and constructLimitsToCheck: checks that
  // panic with a serviceError, returned to grpc-go, which answers UNKNOWN with its text.
  if (request.domain().empty())
    return {grpc::StatusCode::UNKNOWN, "rate limit domain must not be empty"};
  if (request.descriptors_size() == 0)
    return {grpc::StatusCode::UNKNOWN, "rate limit descriptor list must not be empty"};
  if (!call.served) return {grpc::StatusCode::UNKNOWN, "no rate limit configuration loaded"};
  call.domain = request.domain();
  const Rules* rules = call.served->rules.find(request.domain());
  if (settings.response_dynamic_metadata) call.metadata = request_metadata(request);

  const std::size_t n = static_cast<std::size_t>(request.descriptors_size());
  // The reference counts max(1, hits_addend); a descriptor's own hits_addend, when set,
  // replaces it and may be 0 (a read).
  const std::int64_t request_hits = std::max<std::int64_t>(1, request.hits_addend());
  std::vector<PlannedDescriptor>& plan = call.plan;
  plan.resize(n);
  std::vector<Hit>& hits = call.hits;
  std::unordered_set<std::string> replacing;
  std::vector<DescriptorEntry> entries;
  const bool observed = static_cast<bool>(settings.observer);
  const bool named = settings.listener != nullptr || observed;  // the metric name is wanted
  for (std::size_t i = 0; i < n; ++i) {
    const auto& d = request.descriptors(static_cast<int>(i));
    PlannedDescriptor& p = plan[i];
    p.hits = d.has_hits_addend() ? static_cast<std::int64_t>(std::min<std::uint64_t>(
                                       d.hits_addend().value(), std::uint64_t{1} << 62))
                                 : request_hits;
    if (observed)
      for (const auto& e : d.entries()) p.entries.push_back({e.key(), e.value()});
    if (rules == nullptr) {  // unknown domain: no limit (config_impl.go GetLimit)
      if (settings.stats) settings.stats->on_domain_not_found(request.domain());
      continue;
    }
    if (d.has_limit()) {
      // The caller's own limit: never shadow, never replaced (config_impl.go GetLimit).
      const auto unit = unit_of_enum(d.limit().unit());
      if (!unit)
        return {grpc::StatusCode::INVALID_ARGUMENT,
                "RateLimitOverride.unit = " + std::to_string(d.limit().unit()) +
                    ": not a known unit (SECOND = 1, MINUTE = 2, HOUR = 3, DAY = 4, MONTH = 5, "
                    "YEAR = 6 or WEEK = 7)"};
      p.limited = true;
      p.unit = *unit;
      p.limit = d.limit().requests_per_unit();
      if (named) p.metric = request.domain() + ".override";
      Hit hit{"override:", "", p.limit, unit->window_s, p.hits, {}, true, {}, false};
      append_field(hit.limit_id, request.domain());
      hit.limit_id += std::to_string(unit->window_s);
      for (const auto& e : d.entries()) {
        append_field(hit.key, e.key());
        append_field(hit.key, e.value());
      }
      hit.go_key = go_key_of(request.domain(), d, nullptr);
      p.hit = hits.size();
      hits.push_back(std::move(hit));
      continue;
    }
    entries.clear();
    for (const auto& e : d.entries()) entries.push_back({e.key(), e.value()});
    DescriptorMatch m = rules->lookup(std::span<const DescriptorEntry>(entries));
    replacing.insert(m.replaces.begin(), m.replaces.end());
    if (m.unlimited) {
      p.unlimited = true;
      continue;
    }
    if (m.rule == nullptr) continue;
    const auto unit = unit_of_rule(*m.rule);
    if (!unit) continue;  // none: the loader reads no other unit
    p.rule = m.rule;
    p.limited = true;
    p.shadow = m.rule->shadow_mode;
    p.quota = m.rule->quota_mode;
    p.unit = *unit;
    p.limit = m.rule->rate.count;
    p.library = m.rule->algorithm.name != GoWindowModel::name;
    p.name = m.rule->given_name;
    if (named)
      p.metric =
          RuleSet<>::metric_name(*rules, *m.rule, [&](std::string_view k) -> const std::string* {
            for (const DescriptorEntry& e : entries)
              if (e.key == k) return &e.value;
            return nullptr;
          });
    if (p.library && m.rule->blocks()) {
      p.blocked = true;  // from_rate refuses a limit of 0: nothing to count
      continue;
    }
    p.hit = hits.size();
    // A library algorithm's rate is the loader's (its units are second to day, whose periods
    // are the Go dividers).
    hits.push_back(Hit{m.rule->id,
                       std::move(m.key),
                       p.limit,
                       unit->window_s,
                       p.hits,
                       p.library ? m.rule->algorithm.name : std::string_view{},
                       true,
                       {},
                       false});
    if (!p.library) hits.back().go_key = go_key_of(request.domain(), d, m.rule);
  }
  // A limit named in the `replaces` of another applying limit is not applied (ratelimit.go).
  std::vector<bool> dropped(hits.size(), false);
  for (PlannedDescriptor& p : plan)
    if (p.rule != nullptr && !p.rule->given_name.empty() &&
        replacing.count(p.rule->given_name) != 0) {
      if (p.hit) dropped[*p.hit] = true;  // a blocked limit has no hit
      p.hit.reset();
      p.rule = nullptr;
      p.limited = false;
      p.blocked = false;
      p.shadow = p.quota = false;
    }
  std::vector<std::size_t> index(hits.size());
  std::vector<Hit> kept;
  for (std::size_t k = 0; k < hits.size(); ++k) {
    index[k] = kept.size();
    if (!dropped[k]) kept.push_back(std::move(hits[k]));
  }
  hits = std::move(kept);
  for (PlannedDescriptor& p : plan)
    if (p.hit) p.hit = index[*p.hit];
  return grpc::Status::OK;
}

}  // namespace ratelimit::server
