#include "counting.hpp"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ratelimit/algorithms/token_bucket.hpp>
#include <ratelimit/rules/detail/rounds.hpp>

namespace ratelimit::server {
namespace {

/// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT's rule for a call's counters when none is in the
/// over-limit cache (src/redis/fixed_cache_impl.go, DoLimit and getHitsAddend): every counter
/// is first read; those whose count would go over their limit (IsOverLimitThresholdReached:
/// count + hits > limit) are counted and, if there is one, every other is only read; if there
/// is none, all are counted. `before` are the reads' results: their counts; without one (a
/// library algorithm) the decision: a read is allowed iff count <= limit, with remaining =
/// limit - count, so count + hits > limit iff denied or remaining < hits.
void count_only_those_going_over(std::vector<Hit>& hits, const std::vector<HitResult>& before) {
  std::vector<bool> going_over(hits.size());
  bool any = false;
  for (std::size_t k = 0; k < hits.size(); ++k) {
    const Decision& d = before[k].decision;
    going_over[k] = before[k].count ? *before[k].count > hits[k].limit - hits[k].hits
                                    : !d.allowed || d.remaining < hits[k].hits;
    any = any || going_over[k];
  }
  if (!any) return;
  for (std::size_t k = 0; k < hits.size(); ++k)
    if (!going_over[k]) hits[k].hits = 0;
}

std::vector<Hit> reads_of(const std::vector<Hit>& hits) {
  std::vector<Hit> reads = hits;
  for (Hit& r : reads) {
    r.hits = 0;
    r.get = true;  // the reference's GET, not an INCRBY of 0
  }
  return reads;
}

/// Sends the hits not known over to the storage, then takes its decisions beside the cached
/// ones (and remembers the counters found over).
void count_uncached(std::shared_ptr<Counters> counters, OverLimitCache* cache,
                    std::shared_ptr<Call> call, Counted done) {
  std::vector<Hit> send;
  for (std::size_t k = 0; k < call->hits.size(); ++k)
    if (!call->cached[k]) send.push_back(call->hits[k]);
  auto take = [cache, call, done](std::vector<HitResult> sent, std::exception_ptr err) {
    if (err) return done(err);
    const std::int64_t now_s = seconds_of(call->now);
    call->decisions.resize(call->hits.size());
    call->counts.assign(call->hits.size(), std::nullopt);
    std::size_t next = 0;
    for (std::size_t k = 0; k < call->hits.size(); ++k) {
      const Hit& h = call->hits[k];
      if (call->cached[k]) {
        Decision d{};
        d.limit = h.limit;
        d.reset_after = std::chrono::seconds{h.window_s - now_s % h.window_s};
        d.retry_after = d.reset_after;
        call->decisions[k] = d;
        continue;
      }
      call->counts[k] = sent[next].count;
      call->decisions[k] = sent[next++].decision;
      // As the reference, whatever the hits: its INCRBY 0 over the limit is remembered too.
      if (cache != nullptr && h.algorithm.empty() && !call->decisions[k].allowed)
        cache->remember(h, now_s);
    }
    done(nullptr);
  };
  if (send.empty()) return take({}, nullptr);
  counters->count_async(std::move(send), call->now, std::move(take));
}

/// All or nothing decides each counter once (`decide_all` refuses a key twice): descriptors
/// on one counter become one hit of their summed hits, reported to each.
void merge_same_counters(Call& call) {
  std::unordered_map<std::string, std::size_t> first;
  std::vector<std::size_t> index(call.hits.size());
  std::vector<Hit> kept;
  for (std::size_t k = 0; k < call.hits.size(); ++k) {
    std::string id(call.hits[k].algorithm);
    id += '\0';
    id += std::to_string(call.hits[k].limit_id.size()) + ':' + call.hits[k].limit_id;
    id += call.hits[k].key;
    const auto [it, fresh] = first.emplace(std::move(id), kept.size());
    index[k] = it->second;
    if (fresh) {
      kept.push_back(std::move(call.hits[k]));
    } else {
      Hit& into = kept[it->second];
      into.hits = std::min(into.hits + call.hits[k].hits, std::int64_t{1} << 62);
    }
  }
  call.hits = std::move(kept);
  for (PlannedDescriptor& p : call.plan)
    if (p.hit) p.hit = index[*p.hit];
}

/// A call's all-or-nothing rounds: the library's rounds over the call's hits (one group per
/// hit, in order), then one group per blocked descriptor (never sent).
struct Rounds {
  std::shared_ptr<Counters> counters;
  std::shared_ptr<Call> call;
  ratelimit::detail::AllOrNothingRounds rounds;
  Counted done;
};

void next_round(std::shared_ptr<Rounds> r) {
  Call& call = *r->call;
  const std::vector<std::size_t>& in = r->rounds.next();
  if (in.empty()) {
    call.decisions.resize(call.hits.size());
    for (std::size_t k = 0; k < call.hits.size(); ++k) call.decisions[k] = r->rounds.decision(k);
    call.counted = !r->rounds.denied();
    return r->done(nullptr);
  }
  std::vector<Hit> parts;
  parts.reserve(in.size());
  for (const std::size_t k : in) {
    parts.push_back(call.hits[k]);
    // The dry run of a call already denied reads (the Go window's read: count <= limit).
    if (r->rounds.dry_run()) parts.back().hits = 0;
  }
  r->counters->count_all_async(
      std::move(parts), call.now, [r](std::vector<Decision> ds, std::exception_ptr err) {
        if (err) return r->done(err);
        const bool all =
            std::all_of(ds.begin(), ds.end(), [](const Decision& d) { return d.allowed; });
        r->rounds.absorb(ds, all);
        next_round(r);
      });
}

/// The lock of `rule`'s counter `counter` as a hit: `Lockout`'s one-token bucket refilled once
/// per block duration, under the rule's id + "/lockout" and the counter's key, as the
/// library's rule sets keep it (so a `RuleSet` or a `Lockout` around a limiter named the rule's
/// id on the same storage sees the same lock). 0 hits: a peek; 1: the take that locks.
Hit lock_hit(const Rule& rule, const Hit& counter, std::int64_t hits) {
  const auto block_s = std::chrono::duration_cast<std::chrono::seconds>(rule.block_duration);
  return Hit{rule.id + "/lockout",
             counter.key,
             1,
             std::max<std::int64_t>(1, block_s.count()),
             hits,
             TokenBucketModel::name,
             true,
             {},
             false};
}

bool locks_out(const PlannedDescriptor& p) {
  return p.rule != nullptr && p.rule->locks_out() && p.hit.has_value();
}

}  // namespace

void check_locks(std::shared_ptr<Counters> counters, std::shared_ptr<Call> call, Counted done) {
  std::vector<Hit> peeks;
  std::vector<std::size_t> of;  // the plan's index of each peek
  for (std::size_t i = 0; i < call->plan.size(); ++i) {
    const PlannedDescriptor& p = call->plan[i];
    if (!locks_out(p)) continue;
    peeks.push_back(lock_hit(*p.rule, call->hits[*p.hit], 0));
    of.push_back(i);
  }
  if (peeks.empty()) return done(nullptr);
  counters->count_async(
      std::move(peeks), call->now,
      [call, of = std::move(of), done](std::vector<HitResult> locks, std::exception_ptr err) {
        if (err) return done(err);
        std::vector<bool> dropped(call->hits.size(), false);
        bool any = false;
        for (std::size_t j = 0; j < of.size(); ++j) {
          const Decision& lock = locks[j].decision;
          if (lock.allowed) continue;
          // As `Lockout` denies a locked key: nothing remains, the wait is the lock's.
          PlannedDescriptor& p = call->plan[of[j]];
          p.locked = true;
          p.lock_wait = lock.retry_after;
          p.lock_denial = Decision{};
          p.lock_denial.limit = p.limit;
          p.lock_denial.retry_after = lock.retry_after;
          p.lock_denial.reset_after = lock.retry_after;
          dropped[*p.hit] = any = true;
          p.hit.reset();
        }
        if (any) {  // the locked descriptors' hits leave the call (each descriptor has its own)
          std::vector<std::size_t> index(call->hits.size());
          std::vector<Hit> kept;
          for (std::size_t k = 0; k < call->hits.size(); ++k) {
            index[k] = kept.size();
            if (!dropped[k]) kept.push_back(std::move(call->hits[k]));
          }
          call->hits = std::move(kept);
          for (PlannedDescriptor& p : call->plan)
            if (p.hit) p.hit = index[*p.hit];
        }
        done(nullptr);
      });
}

void take_locks(std::shared_ptr<Counters> counters, std::shared_ptr<Call> call, Counted done) {
  std::vector<Hit> takes;
  std::vector<std::size_t> of;
  for (std::size_t i = 0; i < call->plan.size(); ++i) {
    const PlannedDescriptor& p = call->plan[i];
    // Denied by its own limit (a read that finds it over takes no lock, as `Lockout::peek`).
    if (!locks_out(p) || p.hits <= 0 || *p.hit >= call->decisions.size() ||
        call->decisions[*p.hit].allowed)
      continue;
    takes.push_back(lock_hit(*p.rule, call->hits[*p.hit], 1));
    of.push_back(i);
  }
  if (takes.empty()) return done(nullptr);
  counters->count_async(
      std::move(takes), call->now,
      [call, of = std::move(of), done](std::vector<HitResult> taken, std::exception_ptr err) {
        if (!err)
          for (std::size_t j = 0; j < of.size(); ++j) {
            PlannedDescriptor& p = call->plan[of[j]];
            const Decision& t = taken[j].decision;
            p.lock_wait = t.allowed ? p.rule->block_duration : t.retry_after;
          }
        done(nullptr);
      });
}

void count_each(std::shared_ptr<Counters> counters, OverLimitCache* cache, bool stop_increment,
                std::shared_ptr<Call> call, Counted done) {
  call->cached.assign(call->hits.size(), false);
  bool any_cached = false;
  if (cache != nullptr) {
    const std::int64_t now_s = seconds_of(call->now);
    // Only the Go window's counters: a library algorithm may admit again before a window
    // ends. As the reference (fixed_cache_impl.go, DoLimit), a cached counter is skipped
    // whatever its hits, a read too.
    for (std::size_t k = 0; k < call->hits.size(); ++k)
      if (call->hits[k].algorithm.empty() && cache->over(call->hits[k], now_s))
        call->cached[k] = any_cached = true;
  }
  // The reference's getHitsAddend: by default the others are counted in full; with
  // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, once one is known over, they are only read.
  if (any_cached && stop_increment)
    for (std::size_t k = 0; k < call->hits.size(); ++k)
      if (!call->cached[k]) call->hits[k].hits = 0;
  // Reads first only with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT and no counter of the call
  // known over. The reference reads a single counter too, but counts it whether or not it
  // would go over, so one is not read here.
  if (!stop_increment || any_cached || call->hits.size() <= 1)
    return count_uncached(std::move(counters), cache, std::move(call), std::move(done));
  auto reads = reads_of(call->hits);
  counters->count_async(
      std::move(reads), call->now,
      [counters, cache, call, done](std::vector<HitResult> before, std::exception_ptr err) {
        if (err) return done(err);
        count_only_those_going_over(call->hits, before);
        count_uncached(counters, cache, call, done);
      });
}

void count_all_or_nothing(std::shared_ptr<Counters> counters, std::shared_ptr<Call> call,
                          Counted done) {
  merge_same_counters(*call);
  auto r = std::make_shared<Rounds>();
  using Kind = ratelimit::detail::AllOrNothingRounds::Kind;
  std::vector<const PlannedDescriptor*> owner(call->hits.size(), nullptr);
  for (const PlannedDescriptor& p : call->plan)
    if (p.hit && owner[*p.hit] == nullptr) owner[*p.hit] = &p;
  const auto kind_of = [](const PlannedDescriptor& p) {
    return p.shadow ? Kind::shadow : p.quota ? Kind::quota : Kind::enforced;
  };
  // A read (0 hits) over its limit denies the call, as the Go window's read is over when its
  // count is (so `check` is false, where the library's rule sets let a check drop out).
  for (std::size_t k = 0; k < call->hits.size(); ++k) {
    call->hits[k].count_denied = false;  // a call over its limits counts nothing
    r->rounds.add(owner[k] != nullptr ? kind_of(*owner[k]) : Kind::enforced, false, false);
  }
  for (const PlannedDescriptor& p : call->plan)
    if (p.blocked)
      r->rounds.add(kind_of(p), false, true);
    else if (p.locked)
      r->rounds.add(kind_of(p), false, true, p.lock_denial);
  r->rounds.start();
  r->counters = std::move(counters);
  r->call = std::move(call);
  r->done = std::move(done);
  next_round(std::move(r));
}

}  // namespace ratelimit::server
