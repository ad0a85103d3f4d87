#include "stats/go_stats.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <mutex>

namespace ratelimit::server::stats {

namespace {

/// The reference's ipv4Regex: `\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`, leftmost first, not
/// overlapping. Returns the length of a match at `i`, or 0.
std::size_t ipv4_at(std::string_view s, std::size_t i) {
  std::size_t j = i;
  for (int part = 0; part < 4; ++part) {
    std::size_t digits = 0;
    while (j < s.size() && digits < 3 && std::isdigit(static_cast<unsigned char>(s[j]))) {
      ++j;
      ++digits;
    }
    if (digits == 0) return 0;
    if (part < 3) {
      if (j >= s.size() || s[j] != '.') return 0;
      ++j;
    }
  }
  return j - i;
}

}  // namespace

std::string sanitize_stat_name(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c == ':' || c == '|') c = '_';
  for (std::size_t i = 0; i < out.size();) {
    const std::size_t n = ipv4_at(out, i);
    if (n == 0) {
      ++i;
      continue;
    }
    for (std::size_t k = i; k < i + n; ++k)
      if (out[k] == '.') out[k] = '_';
    i += n;
  }
  return out;
}

std::string serialize_tags(const std::map<std::string, std::string>& tags) {
  std::string out;
  for (const auto& [key, value] : tags) {
    if (key.empty() || value.empty()) continue;
    out += ".__";
    out += key;
    out += '=';
    for (char c : value) out += (c == '.' || c == ':' || c == '|') ? '_' : c;
  }
  return out;
}

DescriptorCounts count_descriptor(const DescriptorReport& r, float near_limit_ratio) noexcept {
  DescriptorCounts c;
  const auto hits = static_cast<std::uint64_t>(std::max<std::int64_t>(0, r.hits));
  c.total_hits = hits;
  if (r.over_limit_with_local_cache) {
    c.over_limit = c.over_limit_with_local_cache = hits;
    if (r.shadow) c.shadow_mode = hits;
    return c;
  }
  const auto limit = static_cast<std::uint64_t>(std::max<std::int64_t>(0, r.limit));
  const auto before = static_cast<std::uint64_t>(std::max<std::int64_t>(0, r.before));
  const auto after = static_cast<std::uint64_t>(std::max<std::int64_t>(0, r.after));
  // float32(limit) * float32(ratio), floored in float64, as the reference computes it.
  const float scaled = static_cast<float>(limit) * near_limit_ratio;
  const auto near = static_cast<std::uint64_t>(std::floor(static_cast<double>(scaled)));
  if (after > limit) {
    if (before >= limit) {
      c.over_limit = hits;
    } else {
      c.over_limit = after - limit;
      c.near_limit = limit - std::max(near, before);
    }
    if (r.shadow) c.shadow_mode = before >= limit ? hits : after - limit;
  } else {
    if (after > near) c.near_limit = before >= near ? hits : after - near;
    c.within_limit = hits;
  }
  return c;
}

GoStats::GoStats(std::shared_ptr<Store> store, std::map<std::string, std::string> extra_tags,
                 float near_limit_ratio)
    : store_(std::move(store)), tags_(serialize_tags(extra_tags)), ratio_(near_limit_ratio) {
  redis_error_ = named("ratelimit.service.call.should_rate_limit.redis_error");
  service_error_ = named("ratelimit.service.call.should_rate_limit.service_error");
  config_load_success_ = named("ratelimit.service.config_load_success");
  config_load_error_ = named("ratelimit.service.config_load_error");
  global_shadow_mode_ = named("ratelimit.service.global_shadow_mode");
}

GoStats::Counter GoStats::named(std::string_view name) {
  std::string full(name);
  full += tags_;
  return store_->counter(full);
}

GoStats::LimitCounters GoStats::limit_counters(std::string_view key) {
  const std::string k(key);
  {
    const std::shared_lock lock(mutex_);
    const auto it = limits_.find(k);
    if (it != limits_.end()) return it->second;
  }
  const std::string base = "ratelimit.service.rate_limit." + sanitize_stat_name(key) + ".";
  LimitCounters c{named(base + "total_hits"),   named(base + "over_limit"),
                  named(base + "near_limit"),   named(base + "over_limit_with_local_cache"),
                  named(base + "within_limit"), named(base + "shadow_mode")};
  const std::unique_lock lock(mutex_);
  // Bounded as the store is: past its counters every new key gets its overflow slot, and
  // the map stops growing.
  if (limits_.size() >= 20000) return c;
  return limits_.emplace(k, c).first->second;
}

void GoStats::on_descriptor(const DescriptorReport& r) noexcept {
  try {
    const LimitCounters c = limit_counters(r.key);
    const DescriptorCounts n = count_descriptor(r, ratio_);
    Store::add(c.total_hits, n.total_hits);
    Store::add(c.over_limit, n.over_limit);
    Store::add(c.near_limit, n.near_limit);
    Store::add(c.over_limit_with_local_cache, n.over_limit_with_local_cache);
    Store::add(c.within_limit, n.within_limit);
    Store::add(c.shadow_mode, n.shadow_mode);
  } catch (...) {  // stats never fail a call
  }
}

void GoStats::on_domain_not_found(std::string_view domain) noexcept {
  try {
    Counter c = nullptr;
    const std::string d(domain);
    {
      const std::shared_lock lock(mutex_);
      const auto it = domains_.find(d);
      if (it != domains_.end()) c = it->second;
    }
    if (c == nullptr) {
      c = named("ratelimit.service.rate_limit." + sanitize_stat_name(domain) + ".domain_not_found");
      const std::unique_lock lock(mutex_);
      if (domains_.size() < 20000) domains_.emplace(d, c);
    }
    Store::add(c, 1);
  } catch (...) {
  }
}

void GoStats::on_error(CallError error) noexcept {
  Store::add(error == CallError::redis ? redis_error_ : service_error_, 1);
}

void GoStats::on_global_shadow_mode() noexcept { Store::add(global_shadow_mode_, 1); }

void GoStats::on_config_load(bool ok) noexcept {
  Store::add(ok ? config_load_success_ : config_load_error_, 1);
}

void GoStats::on_call(std::string_view method, std::chrono::nanoseconds elapsed) noexcept {
  try {
    const MethodStats* m = nullptr;
    const std::string name(method);
    {
      const std::shared_lock lock(mutex_);
      const auto it = methods_.find(name);
      if (it != methods_.end()) m = &it->second;
    }
    if (m == nullptr) {
      // ScopeWithTags("ratelimit_server", EXTRA_TAGS) (src/service_cmd/runner/runner.go).
      MethodStats s{named("ratelimit_server." + name + ".total_requests"),
                    "ratelimit_server." + name + ".response_time" + tags_};
      const std::unique_lock lock(mutex_);
      m = &methods_.emplace(name, std::move(s)).first->second;
    }
    Store::add(m->total_requests, 1);
    // The reference's interceptor: AddValue(float64(time.Since(start).Milliseconds())).
    store_->timer(m->response_time,
                  static_cast<double>(
                      std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()));
  } catch (...) {
  }
}

}  // namespace ratelimit::server::stats
