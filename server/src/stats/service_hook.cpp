#include "stats/service_hook.hpp"

#include <algorithm>

namespace ratelimit::server::stats {

std::string stat_key(const DescriptorResult& r) {
  std::string out(r.domain);
  if (r.rule == nullptr) {
    for (std::size_t i = 0; i < r.entries.size(); ++i) {
      out += '.';
      out += r.entries[i].key;
      if (!r.entries[i].value.empty()) out += "_" + r.entries[i].value;
    }
    return out;
  }
  for (std::size_t i = 0; i < r.rule->path.size(); ++i) {
    const Rule::Step& step = r.rule->path[i];
    out += '.';
    out += step.key;
    // Entry i of the descriptor landed on step i of the rule's path.
    const bool from_request = r.rule->detailed_metric || (r.rule->value_to_metric && step.varies());
    if (from_request && i < r.entries.size()) {
      out += '_';
      out += r.entries[i].value;
    } else if (step.has_value) {
      out += '_';
      out += step.value;
    }
  }
  return out;
}

DescriptorReport report_of(const DescriptorResult& r, const std::string& key) {
  DescriptorReport out;
  out.domain = r.domain;
  out.key = key;
  out.limit = r.limit;
  out.hits = r.hits;
  out.shadow = r.shadow;
  out.over_limit_with_local_cache = r.from_local_cache;
  if (r.count_after) {
    out.after = *r.count_after;
    out.before = r.count_before.value_or(std::max<std::int64_t>(0, out.after - r.hits));
  } else {
    out.before = r.limit;
    out.after = r.limit + std::max<std::int64_t>(1, r.hits);
  }
  return out;
}

DescriptorObserver descriptor_observer(std::shared_ptr<StatsObserver> stats) {
  return [stats = std::move(stats)](const DescriptorResult& r) {
    if (!r.counted && r.standing != LimitStanding::over) return;  // a dry run
    const std::string key = stat_key(r);
    stats->on_descriptor(report_of(r, key));
  };
}

}  // namespace ratelimit::server::stats
