#include "response.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "dynamic_metadata.hpp"

namespace ratelimit::server {
namespace {

namespace pb = envoy::service::ratelimit::v3;
constexpr std::uint32_t max_uint32 = std::numeric_limits<std::uint32_t>::max();

/// A library algorithm's `requests_per_unit: 0`: every call denied, never admitted (as the
/// library's rule sets decide it).
Decision blocked_decision() {
  Decision d{};
  d.retry_after = Decision::never;
  return d;
}

/// `duration_until_reset` of a library algorithm's decision, in whole seconds rounded up: when
/// admitted, until its counter is back to fresh (`reset_after`); when denied, until the same
/// hit would be admitted (`retry_after`), or, for one that never will (more hits than the
/// limit, or a limit of 0), `reset_after`, else the unit's length.
std::int64_t library_reset_s(const Decision& d, std::int64_t unit_s) {
  auto wait = d.allowed || d.retry_after == Decision::never ? d.reset_after : d.retry_after;
  if (!d.allowed && d.retry_after == Decision::never && wait.count() <= 0) return unit_s;
  return (wait.count() + 999'999'999) / 1'000'000'000;
}

void set_status(pb::RateLimitResponse::DescriptorStatus& st, const PlannedDescriptor& p,
                const Decision& d, std::int64_t reset_s) {
  auto* limit = st.mutable_current_limit();
  limit->set_requests_per_unit(static_cast<std::uint32_t>(p.limit));
  limit->set_unit(p.unit.unit);
  if (!p.name.empty()) limit->set_name(p.name);
  st.mutable_duration_until_reset()->set_seconds(reset_s);
  if (d.allowed) {
    st.set_code(pb::RateLimitResponse::OK);
    st.set_limit_remaining(static_cast<std::uint32_t>(d.remaining));
  } else {
    // A shadow-mode limit over its limit reports OK with nothing remaining (base_limiter.go).
    st.set_code(p.shadow ? pb::RateLimitResponse::OK : pb::RateLimitResponse::OVER_LIMIT);
    st.set_limit_remaining(0);
  }
}

/// Tells the listener what a counted descriptor came to: one decision of `hits` hits, with the
/// call's counting time when it is sampled.
void report(Listener& listener, const Call& call, const PlannedDescriptor& p, const Decision& d,
            std::int64_t hits) {
  DecisionEvent e{};
  e.name = p.metric;
  e.decision = d;
  if (p.shadow && !d.allowed) e.decision.shadow_denied = true;
  e.outcome = p.locked ? Outcome::locked_out : outcome_of(e.decision);
  e.cost = hits;
  e.latency = call.latency_from ? std::chrono::steady_clock::now() - *call.latency_from
                                : std::chrono::nanoseconds{-1};
  try {
    listener.on_decision(e);
  } catch (...) {  // a listener's failure never fails the call
  }
}

/// The descriptor's result for the observer (see descriptor_result.hpp).
DescriptorResult result_of(const Call& call, const PlannedDescriptor& p, const Decision& d,
                           bool cached, bool global_quota, float near_ratio) {
  DescriptorResult r;
  r.domain = call.domain;
  r.entries = p.entries;
  r.rule = p.rule;
  r.metric = p.metric;
  r.limit = p.limit;
  r.window_s = p.unit.window_s;
  r.hits = p.hits;
  r.shadow = p.shadow;
  r.quota = global_quota || p.quota;
  r.from_local_cache = cached;
  r.counted = call.counted;
  r.library_algorithm = p.library;
  // The count the storage returned beside the decision (the Go window's, on every storage);
  // else, when admitted, limit - remaining; a denial from the over-limit cache or by a library
  // algorithm has none.
  const std::optional<std::int64_t> count =
      p.hit && *p.hit < call.counts.size() ? call.counts[*p.hit] : std::nullopt;
  if (count && !cached)
    r.count_after = *count;
  else if (d.allowed)
    r.count_after = p.limit - d.remaining;
  if (r.count_after) r.count_before = *r.count_after - (call.counted ? p.hits : 0);
  // base_limiter.go: over iff after > limit; near iff after > floor(limit * ratio) (float32).
  const auto near_threshold =
      static_cast<std::int64_t>(std::floor(static_cast<float>(p.limit) * near_ratio));
  if (!d.allowed)
    r.standing = LimitStanding::over;
  else if (r.count_after && *r.count_after > near_threshold)
    r.standing = LimitStanding::near;
  return r;
}

}  // namespace

void build_response(const Call& call, const ServiceSettings& settings) {
  pb::RateLimitResponse& response = *call.response;
  const std::int64_t now_s = seconds_of(call.now);
  // shouldRateLimitWorker's tallies.
  std::uint32_t min_remaining = max_uint32;
  const pb::RateLimitResponse::DescriptorStatus* chosen = nullptr;
  const PlannedDescriptor* chosen_plan = nullptr;
  std::size_t failed = 0, failed_quota = 0, total_quota = 0;
  std::vector<std::size_t> passed;
  for (std::size_t i = 0; i < call.plan.size(); ++i) {
    const PlannedDescriptor& p = call.plan[i];
    auto* st = response.add_statuses();
    if (p.unlimited) {
      // The reference reports an unlimited descriptor as OK with the most remaining, and leaves
      // it out of every tally.
      st->set_code(pb::RateLimitResponse::OK);
      st->set_limit_remaining(max_uint32);
      continue;
    }
    if (!p.hit && !p.blocked && !p.locked) {
      st->set_code(pb::RateLimitResponse::OK);  // no limit
    } else {
      const Decision d = p.blocked  ? blocked_decision()
                         : p.locked ? p.lock_denial
                                    : call.decisions[*p.hit];
      std::int64_t reset_s = p.library ? library_reset_s(d, p.unit.window_s)
                                       : p.unit.window_s - now_s % p.unit.window_s;
      // A lockout (`Lockout`'s answer): while locked, the lock's time left; the denial that
      // locks, at least the lock's wait. Whole seconds rounded up, as a library algorithm's.
      if (p.lock_wait.count() > 0) {
        const std::int64_t lock_s = (p.lock_wait.count() + 999'999'999) / 1'000'000'000;
        reset_s = p.locked ? lock_s : std::max(reset_s, lock_s);
      }
      set_status(*st, p, d, reset_s);
      const bool cached = p.hit && !call.cached.empty() && call.cached[*p.hit];
      // A call that counted nothing (all or nothing) reports only its denials: the others'
      // admissions were dry runs.
      if (settings.listener && p.hit && call.hits[*p.hit].hits > 0 && (call.counted || !d.allowed))
        report(*settings.listener, call, p, d, call.hits[*p.hit].hits);
      else if (settings.listener && p.locked && p.hits > 0)
        report(*settings.listener, call, p, d, p.hits);
      if (settings.observer) {
        try {
          settings.observer(
              result_of(call, p, d, cached, settings.global_quota_mode, settings.near_limit_ratio));
        } catch (...) {  // an observer's failure never fails the call
        }
      }
      // The headers' descriptor: the first with the least remaining below 2^32 - 1 among
      // those with a limit...
      if (st->limit_remaining() < min_remaining) {
        chosen = st;
        chosen_plan = &p;
        min_remaining = st->limit_remaining();
      }
    }
    const bool quota = settings.global_quota_mode || (p.limited && p.quota);
    if (st->code() == pb::RateLimitResponse::OVER_LIMIT) {
      if (quota) {
        ++failed_quota;
      } else {
        ++failed;
        // ...unless one is over its limit, not in quota mode: the last such.
        chosen = st;
        chosen_plan = &p;
        min_remaining = 0;
      }
    } else {
      passed.push_back(i);
    }
    if (quota) ++total_quota;
  }
  const bool over = failed > 0 || (total_quota > 0 && total_quota == failed_quota);
  if (over && settings.global_shadow_mode && settings.stats)
    settings.stats->on_global_shadow_mode();
  response.set_overall_code(over && !settings.global_shadow_mode ? pb::RateLimitResponse::OVER_LIMIT
                                                                 : pb::RateLimitResponse::OK);
  if (settings.response_headers && chosen != nullptr) {
    const auto add = [&](const std::string& key, std::string value) {
      auto* h = response.add_response_headers_to_add();
      h->set_key(key);
      h->set_value(std::move(value));
    };
    add(settings.limit_header, std::to_string(chosen->current_limit().requests_per_unit()));
    add(settings.remaining_header, std::to_string(chosen->limit_remaining()));
    // utils.CalculateReset: the unit's divider minus now modulo it, for any algorithm; a
    // descriptor locked out, or locking now, resets when its lock ends (its status's duration).
    const std::int64_t w = chosen_plan->unit.window_s;
    add(settings.reset_header,
        std::to_string(chosen_plan->lock_wait.count() > 0 ? chosen->duration_until_reset().seconds()
                                                          : w - now_s % w));
  }
  if (call.metadata) {
    google::protobuf::Struct out = *call.metadata;
    google::protobuf::Struct passed_metadata;
    for (const std::size_t i : passed) {
      const Rule* rule = call.plan[i].rule;
      if (rule == nullptr) continue;
      const auto it = call.served->metadata.find(rule);
      if (it != call.served->metadata.end()) merge_metadata(passed_metadata, it->second);
    }
    if (passed_metadata.fields_size() > 0)
      *(*out.mutable_fields())["metadata"].mutable_struct_value() = std::move(passed_metadata);
    *response.mutable_dynamic_metadata() = std::move(out);
  }
}

}  // namespace ratelimit::server
