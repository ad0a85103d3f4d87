#include "service.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "go_window.hpp"
#include "server_algorithms.hpp"

namespace ratelimit::server {
namespace {

namespace pb = envoy::service::ratelimit::v3;
using Unit = pb::RateLimitResponse::RateLimit::Unit;

/// A limit as the wire reports it: the unit enum and the window in seconds (the reference's
/// UnitToDivider, src/utils/utilities.go: a week is 7 days, a month 30, a year 365).
struct WireUnit {
  Unit unit;
  std::int64_t window_s;
};

/// The units by wire number (Envoy's rls.proto: WEEK, added last, is 7) and rules-file name.
constexpr struct {
  int number;
  Unit unit;
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

/// What one descriptor came to before counting.
struct Planned {
  const Rule* rule = nullptr;  ///< the rules' limit (null for none, an override, unlimited)
  bool unlimited = false;
  bool shadow = false;
  bool quota = false;
  /// Decided by a library algorithm (the rule's `algorithm`), not the Go window.
  bool library = false;
  /// A library algorithm's `requests_per_unit: 0`: denied without asking the storage.
  bool blocked = false;
  std::optional<std::size_t> hit;  ///< its entry in the hits, when counted
  WireUnit unit{};
  std::int64_t limit = 0;
  std::string name;
  std::string metric;      ///< the listener's name for it (only with a listener)
  std::string stat_key;    ///< the stats' key of its limit (only with stats)
  std::int64_t asked = 0;  ///< the hits the request asked for (the stats count these)
};

std::string what(std::exception_ptr err) {
  try {
    std::rethrow_exception(std::move(err));
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

void append_field(std::string& out, std::string_view s) {
  out += std::to_string(s.size());
  out += ':';
  out += s;
}

void set_status(pb::RateLimitResponse::DescriptorStatus& st, const Planned& p, const Decision& d,
                std::int64_t reset_s) {
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

}  // namespace

namespace detail {

/// Counters known to be over their limit until their window ends (the reference's local
/// cache, a freecache of LOCAL_CACHE_SIZE_IN_BYTES). Bounded: an entry is charged its key's
/// size plus 64 bytes; when full, expired entries are dropped, and if that frees nothing the
/// new entry is not remembered (the storage still decides it).
/// Thread safety: every member is safe from many threads.
class OverLimitCache {
 public:
  explicit OverLimitCache(std::size_t bytes) : budget_(bytes) {}

  bool over(const std::string& key, std::int64_t now_s) const {
    const std::lock_guard lock(mutex_);
    const auto it = until_.find(key);
    return it != until_.end() && now_s < it->second;
  }

  void remember(const std::string& key, std::int64_t until_s, std::int64_t now_s) {
    const std::lock_guard lock(mutex_);
    const std::size_t cost = key.size() + 64;
    if (used_ + cost > budget_) {
      for (auto it = until_.begin(); it != until_.end();) {
        if (it->second <= now_s) {
          used_ -= it->first.size() + 64;
          it = until_.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (used_ + cost > budget_) return;
    if (until_.emplace(key, until_s).second) used_ += cost;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::int64_t> until_;
  std::size_t budget_;
  std::size_t used_ = 0;
};

}  // namespace detail

Service::Service(std::shared_ptr<Counters> counters, ServiceSettings settings, Now now)
    : counters_(std::move(counters)), settings_(std::move(settings)), now_(std::move(now)) {
  check_counting_modes(settings_.all_or_nothing, settings_.stop_increment_when_over);
  if (settings_.over_limit_cache_bytes > 0 && !settings_.all_or_nothing)
    cache_ = std::make_unique<detail::OverLimitCache>(settings_.over_limit_cache_bytes);
}

Service::~Service() = default;

std::chrono::nanoseconds Service::system_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::system_clock::now().time_since_epoch());
}

void Service::reload(RulesConfig config) {
  // A rule is served by the algorithm it names; its parameters are checked now, so that a
  // limit no model can hold is refused with its line rather than failing every call.
  for (const Rules& rules : config.domains())
    for (const Rule& r : rules.rules()) {
      bool known = false;
      ServerAlgorithms::visit(r.algorithm.name, [&]<class M>() {
        known = true;
        if (r.blocks() || std::is_same_v<M, GoWindowModel>) return;
        try {
          (void)M::from_rate(r.rate);
        } catch (const std::invalid_argument& e) {
          throw std::invalid_argument(r.source + ":" + std::to_string(r.line) +
                                      ": rate_limit.algorithm = \"" +
                                      std::string(r.algorithm.name) + "\": " + e.what());
        }
      });
      if (!known)  // a configuration loaded with another registry
        throw std::invalid_argument(r.source + ":" + std::to_string(r.line) +
                                    ": rate_limit.algorithm = \"" + std::string(r.algorithm.name) +
                                    "\": not an algorithm of this server (load the rules with "
                                    "ServerAlgorithms)");
    }
  auto next = std::make_shared<const RulesConfig>(std::move(config));
  const std::lock_guard lock(mutex_);
  config_ = std::move(next);
}

std::shared_ptr<const RulesConfig> Service::config() const {
  const std::lock_guard lock(mutex_);
  return config_;
}

/// One call between its rounds: what its descriptors matched, and the hits to count.
struct Service::Call {
  std::shared_ptr<const RulesConfig> config;  ///< keeps the plan's `Rule` pointers valid
  std::vector<Planned> plan;
  std::vector<Hit> hits;
  std::chrono::nanoseconds now{0};
  pb::RateLimitResponse* response = nullptr;
  std::string domain;  ///< the request's domain
  /// Per hit: known over its limit from the over-limit cache (not sent to the storage).
  std::vector<bool> cached;
  bool any_cached = false;
  /// All or nothing: per hit, dropped from the next rounds (a denied shadow- or quota-mode
  /// limit), and its latest decision.
  std::vector<bool> dropped;
  std::vector<Decision> decided;
  /// All or nothing: false when the last round denied, so nothing was counted.
  bool counted = true;

  std::vector<Hit> round() const;
};

namespace {

std::int64_t seconds_of(std::chrono::nanoseconds now) {
  return now.count() < 0 ? 0 : now.count() / 1'000'000'000;
}

/// The over-limit cache's key of a hit: its counter and window.
std::string cache_key(const Hit& h, std::int64_t now_s) {
  std::string key = h.limit_id;
  key += '\0';
  key += h.key;
  key += '\0';
  key += std::to_string(now_s / h.window_s);
  return key;
}

/// The hits that go to the storage.
std::vector<Hit> to_send(const std::vector<Hit>& hits, const std::vector<bool>& cached) {
  std::vector<Hit> out;
  for (std::size_t k = 0; k < hits.size(); ++k)
    if (!cached[k]) out.push_back(hits[k]);
  return out;
}

}  // namespace

void Service::consult_cache(Call& call) const {
  call.cached.assign(call.hits.size(), false);
  if (!cache_) return;
  const std::int64_t now_s = seconds_of(call.now);
  // Only the Go window's counters: a library algorithm may admit again before a window ends.
  // As the reference (fixed_cache_impl.go, DoLimit), a cached counter is skipped whatever its
  // hits, a read too.
  for (std::size_t k = 0; k < call.hits.size(); ++k)
    if (call.hits[k].algorithm.empty() && cache_->over(cache_key(call.hits[k], now_s), now_s))
      call.cached[k] = call.any_cached = true;
  // The reference's getHitsAddend: by default the others are counted in full; with
  // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, once one is known over, they are only read.
  if (call.any_cached && settings_.stop_increment_when_over)
    for (std::size_t k = 0; k < call.hits.size(); ++k)
      if (!call.cached[k]) call.hits[k].hits = 0;
}

std::vector<Decision> Service::merged(const Call& call, std::vector<Decision> sent) const {
  std::vector<Decision> out(call.hits.size());
  const std::int64_t now_s = seconds_of(call.now);
  std::size_t next = 0;
  for (std::size_t k = 0; k < call.hits.size(); ++k) {
    const Hit& h = call.hits[k];
    if (call.cached[k]) {
      Decision d{};
      d.limit = h.limit;
      d.reset_after = std::chrono::seconds{h.window_s - now_s % h.window_s};
      d.retry_after = d.reset_after;
      out[k] = d;
      continue;
    }
    out[k] = sent[next++];
    // As the reference, whatever the hits: its INCRBY 0 over the limit is remembered too.
    if (cache_ && h.algorithm.empty() && !out[k].allowed)
      cache_->remember(cache_key(h, now_s), (now_s / h.window_s + 1) * h.window_s, now_s);
  }
  return out;
}

namespace {

/// All or nothing decides each counter once (`decide_all` refuses a key twice): descriptors
/// on one counter become one hit of their summed hits, reported to each.
void merge_same_counters(std::vector<Planned>& plan, std::vector<Hit>& hits) {
  std::unordered_map<std::string, std::size_t> first;
  std::vector<std::size_t> index(hits.size());
  std::vector<Hit> kept;
  for (std::size_t k = 0; k < hits.size(); ++k) {
    std::string id(hits[k].algorithm);
    append_field(id, hits[k].limit_id);
    append_field(id, hits[k].key);
    const auto [it, fresh] = first.emplace(std::move(id), kept.size());
    index[k] = it->second;
    if (fresh) {
      kept.push_back(std::move(hits[k]));
    } else {
      Hit& into = kept[it->second];
      into.hits = std::min(into.hits + hits[k].hits, std::int64_t{1} << 62);
    }
  }
  hits = std::move(kept);
  for (Planned& p : plan)
    if (p.hit) p.hit = index[*p.hit];
}

}  // namespace

grpc::Status Service::plan(const pb::RateLimitRequest& request, Call& call) const {
  // As the reference (src/service/ratelimit.go, shouldRateLimitWorker): a Go error returned
  // from the handler, which grpc-go reports as UNKNOWN with the error's text.
  if (request.domain().empty())
    return {grpc::StatusCode::UNKNOWN, "rate limit domain must not be empty"};
  if (request.descriptors_size() == 0)
    return {grpc::StatusCode::UNKNOWN, "rate limit descriptor list must not be empty"};
  call.config = this->config();
  call.domain = request.domain();
  const auto& config = call.config;
  if (!config) return {grpc::StatusCode::UNKNOWN, "no rate limit configuration loaded"};
  const Rules* rules = config->find(request.domain());

  const std::size_t n = static_cast<std::size_t>(request.descriptors_size());
  // The reference counts max(1, hits_addend); a descriptor's own hits_addend, when set,
  // replaces it and may be 0 (a read).
  const std::int64_t request_hits = std::max<std::int64_t>(1, request.hits_addend());
  std::vector<Planned>& plan = call.plan;
  plan.resize(n);
  std::vector<Hit>& hits = call.hits;
  std::unordered_set<std::string> replacing;
  std::vector<DescriptorEntry> entries;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& d = request.descriptors(static_cast<int>(i));
    if (rules == nullptr) {  // unknown domain: no limit (config_impl.go GetLimit)
      if (settings_.stats) settings_.stats->on_domain_not_found(request.domain());
      continue;
    }
    Planned& p = plan[i];
    const std::int64_t h = d.has_hits_addend()
                               ? static_cast<std::int64_t>(std::min<std::uint64_t>(
                                     d.hits_addend().value(), std::uint64_t{1} << 62))
                               : request_hits;
    if (d.has_limit()) {
      // The caller's own limit: never shadow, never replaced (config_impl.go GetLimit).
      const auto unit = unit_of_enum(d.limit().unit());
      if (!unit)
        return {grpc::StatusCode::INVALID_ARGUMENT,
                "RateLimitOverride.unit = " + std::to_string(d.limit().unit()) +
                    ": not a known unit (SECOND = 1, MINUTE = 2, HOUR = 3, DAY = 4, MONTH = 5, "
                    "YEAR = 6 or WEEK = 7)"};
      p.unit = *unit;
      p.limit = d.limit().requests_per_unit();
      if (settings_.listener) p.metric = request.domain() + ".override";
      if (settings_.stats) {
        // The reference's descriptorKey (config_impl.go): the request's entries.
        p.stat_key = request.domain() + ".";
        for (int e = 0; e < d.entries_size(); ++e) {
          if (e > 0) p.stat_key += '.';
          p.stat_key += d.entries(e).key();
          if (!d.entries(e).value().empty()) p.stat_key += "_" + d.entries(e).value();
        }
      }
      p.asked = h;
      Hit hit{"override:", "", p.limit, unit->window_s, h, {}, true};
      append_field(hit.limit_id, request.domain());
      hit.limit_id += std::to_string(unit->window_s);
      for (const auto& e : d.entries()) {
        append_field(hit.key, e.key());
        append_field(hit.key, e.value());
      }
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
    p.shadow = m.rule->shadow_mode;
    p.quota = m.rule->quota_mode;
    p.unit = *unit;
    p.limit = m.rule->rate.count;
    p.library = m.rule->algorithm.name != GoWindowModel::name;
    p.name = m.rule->given_name;
    if (settings_.listener || settings_.stats)
      p.metric =
          RuleSet<>::metric_name(*rules, *m.rule, [&](std::string_view k) -> const std::string* {
            for (const DescriptorEntry& e : entries)
              if (e.key == k) return &e.value;
            return nullptr;
          });
    if (settings_.stats) p.stat_key = p.metric;
    p.asked = h;
    if (p.library && m.rule->blocks()) {
      p.blocked = true;  // from_rate refuses a limit of 0: nothing to count
      continue;
    }
    p.hit = hits.size();
    // A library algorithm's rate is the loader's (its units are second to day, whose periods
    // are the Go dividers).
    hits.push_back(Hit{m.rule->id, std::move(m.key), p.limit, unit->window_s, h,
                       p.library ? m.rule->algorithm.name : std::string_view{}, true});
  }
  // A limit named in the `replaces` of another applying limit is not applied (ratelimit.go).
  for (Planned& p : plan)
    if (p.rule != nullptr && !p.rule->given_name.empty() &&
        replacing.count(p.rule->given_name) != 0) {
      if (p.hit) hits[*p.hit].hits = -1;  // dropped below (a blocked limit has no hit)
      p.hit.reset();
      p.rule = nullptr;
      p.blocked = false;
    }
  std::vector<std::size_t> index(hits.size());
  {
    std::vector<Hit> kept;
    for (std::size_t k = 0; k < hits.size(); ++k) {
      index[k] = kept.size();
      if (hits[k].hits >= 0) kept.push_back(std::move(hits[k]));
    }
    hits = std::move(kept);
    for (Planned& p : plan)
      if (p.hit) p.hit = index[*p.hit];
  }
  if (settings_.all_or_nothing) {
    merge_same_counters(call.plan, hits);
    // A limit of 0 of a library algorithm is denied without the storage: the call then counts
    // nothing, its other descriptors only read (a shadow- or quota-mode one does not deny).
    const bool blocked = std::any_of(plan.begin(), plan.end(), [](const Planned& p) {
      return p.blocked && !p.shadow && !p.quota;
    });
    for (Hit& hit : hits) {
      hit.count_denied = false;  // a call over its limits counts nothing
      if (blocked) hit.hits = 0;
    }
  }
  return grpc::Status::OK;
}

namespace {

/// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT's rule for a call's counters when none is in the
/// over-limit cache (src/redis/fixed_cache_impl.go, DoLimit and getHitsAddend): every counter
/// is first read; those whose count would go over their limit (IsOverLimitThresholdReached:
/// count + hits > limit) are counted and, if there is one, every other is only read; if there
/// is none, all are counted. `before` are the reads' decisions: a read is allowed iff count <=
/// limit, with remaining = limit - count, so count + hits > limit iff denied or remaining <
/// hits.
void count_only_those_going_over(std::vector<Hit>& hits, const std::vector<Decision>& before) {
  std::vector<bool> going_over(hits.size());
  bool any = false;
  for (std::size_t k = 0; k < hits.size(); ++k) {
    going_over[k] = !before[k].allowed || before[k].remaining < hits[k].hits;
    any = any || going_over[k];
  }
  if (!any) return;
  for (std::size_t k = 0; k < hits.size(); ++k)
    if (!going_over[k]) hits[k].hits = 0;
}

std::vector<Hit> reads_of(const std::vector<Hit>& hits) {
  std::vector<Hit> reads = hits;
  for (Hit& r : reads) r.hits = 0;
  return reads;
}

grpc::Status storage_error(const std::string& what) {
  return {grpc::StatusCode::UNAVAILABLE, "rate limit storage: " + what};
}

}  // namespace

/// The hits of the next all-or-nothing round: those not dropped.
std::vector<Hit> Service::Call::round() const {
  std::vector<Hit> out;
  for (std::size_t k = 0; k < hits.size(); ++k)
    if (!dropped[k]) out.push_back(hits[k]);
  return out;
}

/// Takes a round's decisions (in `round()`'s order); true when another round is due: not all
/// admitted, and a denied shadow-mode hit, or a denied quota-mode hit while some quota-mode hit
/// admits, is dropped (the library's rule sets: such a denial does not deny the call).
bool Service::after_round(Call& call, std::vector<Decision> decided) const {
  std::vector<std::size_t> sent;
  for (std::size_t k = 0; k < call.hits.size(); ++k)
    if (!call.dropped[k]) sent.push_back(k);
  bool all = true;
  for (std::size_t i = 0; i < sent.size(); ++i) {
    call.decided[sent[i]] = decided[i];
    all = all && decided[i].allowed;
  }
  call.counted = all;
  if (all) return false;
  std::vector<const Planned*> owner(call.hits.size(), nullptr);
  for (const Planned& p : call.plan)
    if (p.hit && owner[*p.hit] == nullptr) owner[*p.hit] = &p;
  std::size_t quota_total = 0, quota_over = 0;
  for (const std::size_t k : sent)
    if (owner[k] != nullptr && owner[k]->quota) {
      ++quota_total;
      if (!call.decided[k].allowed) ++quota_over;
    }
  bool dropped = false;
  for (const std::size_t k : sent) {
    const Planned* p = owner[k];
    if (call.decided[k].allowed || p == nullptr) continue;
    if (p->shadow || (p->quota && quota_over < quota_total)) call.dropped[k] = dropped = true;
  }
  return dropped;
}

void Service::all_or_nothing_async(std::shared_ptr<Call> call,
                                   std::function<void(grpc::Status)> done) {
  counters_->count_all_async(call->round(), call->now,
                             [this, call, done](std::vector<Decision> ds, std::exception_ptr err) {
                               if (err) return done(storage_error(what(err)));
                               if (after_round(*call, std::move(ds)))
                                 return all_or_nothing_async(call, done);
                               finish(*call, merged(*call, call->decided));
                               done(grpc::Status::OK);
                             });
}

/// Whether a call's counters are read before they are counted: only with
/// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT and no counter of the call in the over-limit cache
/// (then nothing is counted anyway). The reference reads a single counter too, but counts it
/// whether or not it would go over, so one is not read here.
bool Service::reads_first(const Call& call) const {
  return settings_.stop_increment_when_over && !call.any_cached && call.hits.size() > 1;
}

namespace {

/// The reference counts a failed call by its cause (ratelimit.go ShouldRateLimit): a storage
/// failure as redis_error, any other error as service_error.
void count_error(stats::StatsObserver& observer, const grpc::Status& st) {
  if (st.ok()) return;
  observer.on_error(st.error_code() == grpc::StatusCode::UNAVAILABLE ? stats::CallError::redis
                                                                     : stats::CallError::service);
}

}  // namespace

grpc::Status Service::should_rate_limit(const pb::RateLimitRequest& request,
                                        pb::RateLimitResponse& response) {
  if (!settings_.stats) return decide(request, response);
  const auto start = std::chrono::steady_clock::now();
  grpc::Status st = decide(request, response);
  count_error(*settings_.stats, st);
  settings_.stats->on_call("ShouldRateLimit", std::chrono::steady_clock::now() - start);
  return st;
}

void Service::should_rate_limit_async(const pb::RateLimitRequest& request,
                                      pb::RateLimitResponse& response,
                                      std::function<void(grpc::Status)> done) {
  if (!settings_.stats) return decide_async(request, response, std::move(done));
  const auto start = std::chrono::steady_clock::now();
  decide_async(request, response,
               [stats = settings_.stats, start, done = std::move(done)](grpc::Status st) {
                 count_error(*stats, st);
                 stats->on_call("ShouldRateLimit", std::chrono::steady_clock::now() - start);
                 done(std::move(st));
               });
}

grpc::Status Service::decide(const pb::RateLimitRequest& request, pb::RateLimitResponse& response) {
  Call call;
  call.response = &response;
  if (grpc::Status st = plan(request, call); !st.ok()) return st;
  call.now = now_();
  consult_cache(call);
  std::vector<Decision> ds;
  if (settings_.all_or_nothing) {
    call.dropped.assign(call.hits.size(), false);
    call.decided.assign(call.hits.size(), Decision{});
    try {
      while (!call.hits.empty() &&
             after_round(call, counters_->count_all(call.round(), call.now))) {
      }
    } catch (const std::exception& e) {
      return storage_error(e.what());
    }
    finish(call, merged(call, call.decided));
    return grpc::Status::OK;
  }
  try {
    if (reads_first(call))
      count_only_those_going_over(call.hits, counters_->count(reads_of(call.hits), call.now));
    const auto send = to_send(call.hits, call.cached);
    ds = merged(call, send.empty() ? std::vector<Decision>{} : counters_->count(send, call.now));
  } catch (const std::exception& e) {
    return storage_error(e.what());
  }
  finish(call, ds);
  return grpc::Status::OK;
}

void Service::decide_async(const pb::RateLimitRequest& request, pb::RateLimitResponse& response,
                           std::function<void(grpc::Status)> done) {
  auto call = std::make_shared<Call>();
  call->response = &response;
  if (grpc::Status st = plan(request, *call); !st.ok()) return done(st);
  call->now = now_();
  consult_cache(*call);
  if (settings_.all_or_nothing) {
    call->dropped.assign(call->hits.size(), false);
    call->decided.assign(call->hits.size(), Decision{});
    if (call->hits.empty()) {
      finish(*call, {});
      return done(grpc::Status::OK);
    }
    return all_or_nothing_async(std::move(call), std::move(done));
  }
  auto counters = counters_;
  auto count = [this, call, counters, done]() {
    auto send = to_send(call->hits, call->cached);
    if (send.empty()) {
      finish(*call, merged(*call, {}));
      return done(grpc::Status::OK);
    }
    counters->count_async(std::move(send), call->now,
                          [this, call, done](std::vector<Decision> ds, std::exception_ptr err) {
                            if (err) return done(storage_error(what(err)));
                            finish(*call, merged(*call, std::move(ds)));
                            done(grpc::Status::OK);
                          });
  };
  if (!reads_first(*call)) return count();
  counters->count_async(reads_of(call->hits), call->now,
                        [call, done, count](std::vector<Decision> before, std::exception_ptr err) {
                          if (err) return done(storage_error(what(err)));
                          count_only_those_going_over(call->hits, before);
                          count();
                        });
}

namespace {

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

/// Tells the listener what a counted descriptor came to.
void report(Listener& listener, const Planned& p, const Decision& d, std::int64_t hits) {
  DecisionEvent e{};
  e.name = p.metric;
  e.decision = d;
  if (p.shadow && !d.allowed) e.decision.shadow_denied = true;
  e.outcome = outcome_of(e.decision);
  e.cost = hits;
  e.latency = std::chrono::nanoseconds{-1};
  try {
    listener.on_decision(e);
  } catch (...) {  // a listener's failure never fails the call
  }
}

/// Tells the stats what a limited descriptor came to (stats/observer.hpp).
void report_stats(stats::StatsObserver& observer, std::string_view domain, const Planned& p,
                  const Decision& d, bool cached) {
  stats::DescriptorReport r;
  r.domain = domain;
  r.key = p.stat_key;
  r.limit = p.limit;
  r.hits = p.asked;
  r.shadow = p.shadow;
  r.over_limit_with_local_cache = cached;
  // The Go window's remaining is limit - count, negative over the limit (go_window.hpp); a
  // library algorithm has no count: admitted, what remains below the limit; denied, past it.
  if (!p.library) {
    r.after = p.limit - d.remaining;
  } else if (d.allowed) {
    r.after = std::max<std::int64_t>(0, p.limit - d.remaining);
  } else {
    r.after = p.limit + std::max<std::int64_t>(1, p.asked);
    r.before = p.limit;
  }
  if (!p.library || d.allowed) r.before = std::max<std::int64_t>(0, r.after - p.asked);
  observer.on_descriptor(r);
}

}  // namespace

void Service::finish(Call& call, const std::vector<Decision>& ds) const {
  pb::RateLimitResponse& response = *call.response;
  const std::vector<Planned>& plan = call.plan;
  const std::size_t n = plan.size();
  const auto now = call.now;
  const std::int64_t now_s = now.count() < 0 ? 0 : now.count() / 1'000'000'000;
  bool over = false;
  std::size_t quota_total = 0, quota_over = 0;
  const pb::RateLimitResponse::DescriptorStatus* closest = nullptr;
  for (std::size_t i = 0; i < n; ++i) {
    auto* st = response.add_statuses();
    const Planned& p = plan[i];
    if (p.unlimited) {
      // The reference reports an unlimited descriptor as OK with the most remaining.
      st->set_code(pb::RateLimitResponse::OK);
      st->set_limit_remaining(std::numeric_limits<std::uint32_t>::max());
      continue;
    }
    if (!p.hit && !p.blocked) {
      st->set_code(pb::RateLimitResponse::OK);
      continue;
    }
    Decision d = p.blocked ? blocked_decision() : ds[*p.hit];
    set_status(*st, p, d,
               p.library ? library_reset_s(d, p.unit.window_s)
                         : p.unit.window_s - now_s % p.unit.window_s);
    // A call that counted nothing (all or nothing) reports only its denials: the others'
    // admissions were dry runs.
    if (settings_.listener && p.hit && call.hits[*p.hit].hits > 0 && (call.counted || !d.allowed))
      report(*settings_.listener, p, d, call.hits[*p.hit].hits);
    if (settings_.stats && p.hit && (call.counted || !d.allowed))
      report_stats(*settings_.stats, call.domain, p, d,
                   !call.cached.empty() && call.cached[*p.hit]);
    const bool denied = st->code() == pb::RateLimitResponse::OVER_LIMIT;
    if (p.quota) {
      ++quota_total;
      if (denied) ++quota_over;
    } else if (denied) {
      over = true;
    }
    if (closest == nullptr || (denied && closest->code() != pb::RateLimitResponse::OVER_LIMIT) ||
        (closest->code() == st->code() && st->limit_remaining() < closest->limit_remaining()))
      closest = st;
  }
  // Quota-mode limits deny only all together (the library's rules semantics).
  if (quota_total > 0 && quota_over == quota_total) over = true;
  if (over && settings_.global_shadow_mode && settings_.stats)
    settings_.stats->on_global_shadow_mode();
  response.set_overall_code(over && !settings_.global_shadow_mode
                                ? pb::RateLimitResponse::OVER_LIMIT
                                : pb::RateLimitResponse::OK);
  if (settings_.response_headers && closest != nullptr) {
    const auto add = [&](const std::string& key, std::string value) {
      auto* h = response.add_response_headers_to_add();
      h->set_key(key);
      h->set_value(std::move(value));
    };
    add(settings_.limit_header, std::to_string(closest->current_limit().requests_per_unit()));
    add(settings_.remaining_header, std::to_string(closest->limit_remaining()));
    add(settings_.reset_header, std::to_string(closest->duration_until_reset().seconds()));
  }
}

}  // namespace ratelimit::server
