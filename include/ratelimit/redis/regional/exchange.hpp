#pragma once
/// @file redis/regional/exchange.hpp
/// What the copies of a regional storage share (clients, counters, listeners) and the exchange
/// between regions: a round claims, in this region's Redis, the units admitted since the last
/// push to each other region (lua/regional_exchange.lua), pushes them there as increments of
/// this region's field, then records each acknowledgement (or undoes the claim of a failed
/// push, so that the next round pushes those units again).
///
/// Counts merge by addition: a region's field in another region's hash only ever grows by what
/// this region claimed and had not pushed there before. A push whose reply was lost after Redis
/// applied it is pushed again, and counted twice there: the error only ever denies more.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../core/detail/decimal.hpp"
#include "../../core/listener.hpp"
#include "../../core/wire.hpp"
#include "../../lua/regional_bucket.hpp"
#include "../../lua/regional_exchange.hpp"
#include "../../lua/regional_window.hpp"
#include "../detail/client.hpp"
#include "../detail/cluster_client.hpp"
#include "../detail/cluster_slot.hpp"
#include "../detail/decimal.hpp"
#include "../detail/script.hpp"
#include "options.hpp"

namespace ratelimit {

namespace detail {
class RegionalState;
}

/// The units one exchange round claimed (RegionalStorage::begin_exchange), not yet pushed.
/// Thread safety: a plain value; finish it once.
class ExchangeRound {
 public:
  /// Hashes (client key, limiter, window) with units to push.
  std::size_t hashes() const noexcept { return claims_.size(); }

 private:
  friend class detail::RegionalState;
  struct Claim {
    std::string hash;
    std::int64_t ttl_ms;
    std::int64_t unit_ns;  ///< a bucket's unit (period / count, rounded up); 0 for windows
    std::int64_t hold_ms;  ///< a bucket's hold (see RegionalState::add_dirty_set); 0 for windows
    std::vector<std::int64_t> units;  ///< per other region (RegionalOptions::remotes order)
  };
  std::vector<Claim> claims_;
  std::chrono::nanoseconds at_{0};
};

/// What one exchange round did. Thread safety: a plain value.
struct ExchangeReport {
  std::size_t hashes = 0;           ///< hashes with units to push
  std::uint64_t units_pushed = 0;   ///< units other regions acknowledged, summed over them
  std::vector<std::string> failed;  ///< other regions this round could not reach
};

namespace detail {

inline const RedisScript& regional_window_script() {
  static const RedisScript s = make_script("regional_window", std::string(lua::regional_window));
  return s;
}
inline const RedisScript& regional_bucket_script() {
  static const RedisScript s = make_script("regional_bucket", std::string(lua::regional_bucket));
  return s;
}
inline const RedisScript& regional_exchange_script() {
  static const RedisScript s =
      make_script("regional_exchange", std::string(lua::regional_exchange));
  return s;
}

/// On a Redis Cluster, the slots whose dirty sets an exchange round must claim: one bit per
/// slot, set by each decision after its script ran (so a round that clears the bit either sees
/// the decision's SADD or leaves the bit for the next round). Thread safety: atomic.
struct DirtySlots {
  std::array<std::atomic<std::uint64_t>, redis_cluster_slots / 64> bits{};
  void mark(int slot) noexcept {
    bits[static_cast<std::size_t>(slot) / 64].fetch_or(std::uint64_t{1} << (slot % 64),
                                                       std::memory_order_relaxed);
  }
};

/// One other region: its client, whether the last round reached it and whether this process
/// excludes it (see RegionalState::update_exclusions).
struct RegionalRemote {
  std::string name;
  std::shared_ptr<RedisClient> client;
  /// A Redis Cluster: it cannot fence a push (the exclusion hash and the pushed hash are in
  /// different slots), so it neither grants exclusions nor is sent the fence's key.
  bool cluster = false;
  std::atomic<bool> cut{false};
  std::atomic<bool> excluded{false};
  /// While excluded, rounds do not wait for it: a PING in the background tells when it
  /// answers again (shared with that PING's completion, which may outlive the storage).
  struct Probe {
    std::atomic<bool> ok{false}, in_flight{false};
  };
  std::shared_ptr<Probe> probe = std::make_shared<Probe>();
  // Guarded by RegionalState's exclusion mutex:
  bool release_pending = false;  ///< excluded until lately: release once a round reached it
  std::chrono::steady_clock::time_point excluded_until{};  ///< the grants' end, conservatively
};

/// Shared by every copy of a RegionalStorage. Thread safety: every member is safe from many
/// threads (rounds may run at once: each claims only what the others have not).
class RegionalState {
 public:
  explicit RegionalState(RegionalOptions o)
      : options_((check_regional_options(o), std::move(o))),
        local_(
            make_redis_client(options_.local, options_.local_cluster_seeds, "local_cluster_seeds")),
        cluster_(!options_.local_cluster_seeds.empty()) {
    for (std::size_t i = 0; i < options_.remotes.size(); ++i) {
      const RemoteRegion& r = options_.remotes[i];
      RedisOptions ro = r.redis;
      ro.key_prefix = options_.local.key_prefix;
      auto remote = std::make_unique<RegionalRemote>();
      remote->name = r.name;
      remote->client = make_redis_client(std::move(ro), r.cluster_seeds,
                                         "remotes[" + std::to_string(i) + "].cluster_seeds");
      remote->cluster = !r.cluster_seeds.empty();
      remotes_.push_back(std::move(remote));
    }
    if (cluster_) (void)redis_slot_tag(0);  // the tag table: built here, not by a decision
  }

  const RegionalOptions& options() const noexcept { return options_; }
  RedisClient& local() const noexcept { return *local_; }
  /// Whether this region's Redis is a Redis Cluster (one dirty set per slot).
  bool local_is_cluster() const noexcept { return cluster_; }

  /// The dirty set a decision on `hash` adds it to: `set` on one Redis; on a cluster, the
  /// set's copy for the hash's slot, named with that slot's tag (redis_slot_tag), so that the
  /// decision's script and the exchange's claim each touch one slot. `set` is
  /// "<prefix>{rg-dirty}<tail>"; the copy is "<prefix>{<slot tag>}rg-dirty<tail>".
  std::string dirty_key(const std::string& set, std::string_view hash) const {
    if (!cluster_) return set;
    return cluster_dirty_name(set, redis_key_slot(hash));
  }
  std::size_t remote_count() const noexcept { return remotes_.size(); }
  const std::string& remote_name(std::size_t i) const noexcept { return remotes_[i]->name; }

  /// Appends, for a decision script, the count and names of the regions whose
  /// acknowledgements bound this region's unseen units: every other region but those this
  /// process excludes now.
  void append_bounding_regions(std::vector<std::string>& argv) const {
    const std::size_t at = argv.size();
    argv.emplace_back();
    std::size_t kept = 0;
    for (const auto& r : remotes_) {
      if (r->excluded.load(std::memory_order_acquire)) continue;
      argv.push_back(r->name);
      ++kept;
    }
    argv[at] = std::to_string(kept);
  }

  /// Listeners: partitions (on_breaker_change, node "region <name>"; on_storage_error, kind
  /// "partition") and every client's own events.
  Observers observers;
  std::atomic<std::uint64_t> decisions{0}, unseen_denials{0}, degraded{0};

  void attach(std::shared_ptr<Listener> l, ListenerOptions o) {
    local_->observers.attach(l, o);
    for (auto& r : remotes_) r->client->observers.attach(l, o);
    observers.attach(std::move(l), o);
  }
  bool detach(const Listener& l) {
    bool found = local_->observers.detach(&l);
    for (auto& r : remotes_) found = r->client->observers.detach(&l) || found;
    return observers.detach(&l) || found;
  }

  /// Connects to every region's Redis and loads the scripts each will run (see
  /// RegionalStorage::warm_up). True if every Redis answered.
  bool warm_up() {
    bool ok = local_->warm_up(
        {&regional_window_script(), &regional_bucket_script(), &regional_exchange_script()});
    for (auto& remote : remotes_) ok = remote->client->warm_up({&regional_exchange_script()}) && ok;
    return ok;
  }

  /// A limiter's dirty set: the exchange claims from every set bound so far. For a bucket,
  /// `hold_ms` > 0 keeps a hash that some region has not acknowledged whole at least that long
  /// (its unseen units must outlast a partition) and `unit_ns` (period / count, rounded up) is
  /// what one unit takes to refill, by which a push lengthens the other region's hash (see
  /// lua/regional_exchange.lua); windows pass 0 for both (their hashes end with the window).
  /// Returns the set's slot marks (used on a cluster only: a decision marks its key's slot).
  std::shared_ptr<DirtySlots> add_dirty_set(const std::string& set, std::int64_t hold_ms = 0,
                                            std::int64_t unit_ns = 0) {
    const std::lock_guard lock(mutex_);
    auto& s = dirty_sets_[set];
    s.hold_ms = std::max(s.hold_ms, hold_ms);
    s.unit_ns = std::max(s.unit_ns, unit_ns);
    if (!s.slots) s.slots = std::make_shared<DirtySlots>();
    return s.slots;
  }

  /// ms of the callers' clock: the longest from an admission to its acknowledgement by every
  /// region while none is cut off: a wait for the next claim (S) and a whole round
  /// (claim_expiry_ms).
  std::int64_t exchange_lag_ms() const {
    return options_.exchange_interval.count() + claim_expiry_ms();
  }

  RegionalStats stats() const noexcept {
    RegionalStats s;
    s.decisions = decisions.load(std::memory_order_relaxed);
    s.unseen_denials = unseen_denials.load(std::memory_order_relaxed);
    s.degraded = degraded.load(std::memory_order_relaxed);
    s.exchanges = exchanges_.load(std::memory_order_relaxed);
    s.units_pushed = units_pushed_.load(std::memory_order_relaxed);
    s.push_failures = push_failures_.load(std::memory_order_relaxed);
    for (const auto& r : remotes_) {
      s.partitioned += r->cut.load(std::memory_order_relaxed) ? 1u : 0u;
      s.excluded += r->excluded.load(std::memory_order_relaxed) ? 1u : 0u;
    }
    return s;
  }

  /// Claims, in this region's Redis, what every dirty set holds unpushed. On a cluster, from
  /// the sets of the slots decisions marked since the last round, of the slots whose set the
  /// last claim left non-empty, and of `sweep_slots` more in turn (every slot within 16384 /
  /// sweep_slots rounds: what an instance that died before its exchange left is found).
  ExchangeRound claim(std::chrono::nanoseconds now) {
    ExchangeRound round;
    round.at_ = now;
    if (remotes_.empty()) return round;
    std::vector<RedisCall> calls;
    std::vector<DirtySet> kinds;                   // each call's set's
    std::vector<std::pair<DirtySet*, int>> slots;  // each call's set and slot (cluster)
    {
      const std::lock_guard lock(mutex_);
      for (auto& entry : dirty_sets_) {
        const std::string& set = entry.first;
        DirtySet& kind = entry.second;  // a plain reference: lambdas cannot capture bindings
        const auto claim_call = [&](const std::string& name) {
          RedisCall c;
          c.script = &regional_exchange_script();
          c.keys.push_back(name);
          c.argv = {"claim", options_.region, std::to_string(options_.exchange_batch),
                    std::to_string(remotes_.size())};
          for (const auto& r : remotes_) c.argv.push_back(r->name);
          c.argv.push_back(std::to_string(wire_time_us(now) / 1000));
          c.argv.push_back(std::to_string(claim_expiry_ms()));
          c.argv.push_back(std::to_string(kind.hold_ms));
          if (cluster_) c.argv.push_back("1");  // the set's size after the claim, last
          DirtySet k;  // its hold and unit only: not the cluster's per-slot tables
          k.hold_ms = kind.hold_ms;
          k.unit_ns = kind.unit_ns;
          kinds.push_back(std::move(k));
          calls.push_back(std::move(c));
        };
        if (!cluster_) {
          claim_call(set);
          continue;
        }
        for (const int slot : slots_to_claim(kind)) {
          claim_call(cluster_dirty_name(set, slot));
          slots.emplace_back(&kind, slot);
        }
      }
    }
    if (calls.empty()) return round;
    auto results = local_->execute(std::move(calls), local_->deadline_from_now());
    for (std::size_t i = 0; i < results.size(); ++i) {
      // This region's Redis is down, or the reply was lost after the script ran: a claim
      // that is then never acknowledged is claimed again by a round after claim_expiry_ms.
      if (results[i].failure) {
        if (cluster_) keep_slot(slots[i], true);
        continue;
      }
      const bool left = read_claims(*results[i].reply, kinds[i], round, cluster_);
      if (cluster_) keep_slot(slots[i], left);
    }
    return round;
  }

  /// Slots a cluster round claims beside the marked and kept ones, in turn.
  static constexpr int sweep_slots = 256;

  /// Pushes `round`'s units to every other region at once (the round lasts one round trip to
  /// the farthest, not the sum of them), then acknowledges or undoes them here.
  ExchangeReport finish(ExchangeRound&& round) {
    ExchangeReport report;
    report.hashes = round.claims_.size();
    const std::size_t m = remotes_.size();
    // Shared with the completions, which may still be returning when the wait ends.
    struct Pending {
      std::mutex mutex;
      std::condition_variable done;
      std::size_t left;
      std::vector<std::vector<RedisResult>> results;
    };
    auto pending = std::make_shared<Pending>();
    pending->results.resize(m);
    std::vector<std::vector<std::size_t>> claim_of(
        m);  // push i to r carries claims_[claim_of[r][i]]
    // A region this one excludes is not waited for (a round over a cut link lasts its
    // timeout, which would hold back the acknowledgements of the regions that answer): its
    // claims are undone at once, and a PING in the background tells when to push again.
    std::vector<char> skipped(m);
    for (std::size_t r = 0; r < m; ++r)
      skipped[r] = remotes_[r]->excluded.load(std::memory_order_acquire) &&
                   !remotes_[r]->probe->ok.load(std::memory_order_acquire);
    pending->left = m - static_cast<std::size_t>(std::count(skipped.begin(), skipped.end(), 1));
    for (std::size_t r = 0; r < m; ++r) {
      if (skipped[r]) {
        for (std::size_t i = 0; i < round.claims_.size(); ++i)
          if (round.claims_[i].units[r] > 0) claim_of[r].push_back(i);
        start_probe(*remotes_[r]);
        continue;
      }
      std::vector<RedisCall> pushes;
      for (std::size_t i = 0; i < round.claims_.size(); ++i) {
        const auto& claim = round.claims_[i];
        if (claim.units[r] <= 0) continue;
        RedisCall c;
        c.script = &regional_exchange_script();
        c.keys = {claim.hash};
        // Refused there while this region is excluded (a cluster cannot fence: see cluster).
        if (!remotes_[r]->cluster) c.keys.push_back(exclusion_key());
        c.argv = {"push", "n:" + options_.region, std::to_string(claim.units[r]),
                  std::to_string(claim.ttl_ms)};
        if (claim.unit_ns > 0) {  // what those units take to refill, ms rounded up; the hold
          const i128 ns = i128{claim.units[r]} * claim.unit_ns;
          c.argv.push_back(to_decimal(ns / 1'000'000 + 1));
          c.argv.push_back(std::to_string(claim.hold_ms));
          // Debited there at the claim's time, with the refill since (every unit pushed was
          // admitted before the claim: late, never early; redis/regional/bucket.hpp).
          c.argv.push_back(std::to_string(wire_time_us(round.at_)));
          c.argv.push_back(std::to_string(claim.unit_ns));
        }
        pushes.push_back(std::move(c));
        claim_of[r].push_back(i);
      }
      // With nothing to push, a PING still tells whether the region is reachable (so that a
      // partition's end is seen, and reported, before traffic resumes).
      if (pushes.empty()) pushes.push_back(RedisCall{nullptr, {"ping"}, {"PING"}});
      RedisClient& client = *remotes_[r]->client;
      client.execute_async(std::move(pushes), client.deadline_from_now(),
                           [pending, r](std::vector<RedisResult>&& res) {
                             const std::lock_guard lock(pending->mutex);
                             pending->results[r] = std::move(res);
                             if (--pending->left == 0) pending->done.notify_all();
                           });
    }
    {
      std::unique_lock lock(pending->mutex);
      pending->done.wait(lock, [&] { return pending->left == 0; });
    }
    std::vector<RedisCall> local_calls;
    std::vector<char> reached(m), was_cut(m);
    for (std::size_t r = 0; r < m; ++r) {
      RegionalRemote& remote = *remotes_[r];
      if (skipped[r]) {
        for (std::size_t i : claim_of[r]) {
          push_failures_.fetch_add(1, std::memory_order_relaxed);
          local_calls.push_back(
              add_call(round.claims_[i].hash, remote.name, false, round.claims_[i].units[r]));
        }
        report.failed.push_back(remote.name);
        was_cut[r] =
            set_cut(remote, true, "excluded, and its last probe has not answered", round.at_);
        continue;
      }
      const auto& results = pending->results[r];
      bool failed = false;
      std::string why;
      for (std::size_t i = 0; i < results.size(); ++i) {
        if (results[i].failure) {
          failed = true;
          why = results[i].failure->message;
        }
        if (claim_of[r].empty()) continue;  // the PING
        const auto& claim = round.claims_[claim_of[r][i]];
        const bool ok = !results[i].failure;
        if (ok) {
          report.units_pushed += static_cast<std::uint64_t>(claim.units[r]);
        } else {
          push_failures_.fetch_add(1, std::memory_order_relaxed);
        }
        local_calls.push_back(add_call(claim.hash, remote.name, ok, claim.units[r]));
      }
      if (failed) {
        report.failed.push_back(remote.name);
        remote.probe->ok.store(false, std::memory_order_release);  // probe again
      }
      reached[r] = !failed;
      was_cut[r] = set_cut(remote, failed, why, round.at_);
    }
    if (!local_calls.empty()) {
      // If this region's Redis fails here, the acknowledgements are lost: those units stay
      // unseen (denying early, never late) until a round after claim_expiry_ms claims them
      // again and pushes them twice (counted twice there: the error only ever denies more).
      (void)local_->execute(std::move(local_calls), local_->deadline_from_now());
    }
    update_exclusions(reached, was_cut);
    units_pushed_.fetch_add(report.units_pushed, std::memory_order_relaxed);
    exchanges_.fetch_add(1, std::memory_order_relaxed);
    return report;
  }

 private:
  /// How long a round can last from its claim to its acknowledgements (ms of the callers'
  /// clock): the pushes' connect and command timeouts on the slowest link, then this region's
  /// for the acknowledgement. A claim older than this that was neither acknowledged nor undone
  /// was lost. (Instances of a region stamp claims with their own clocks, which must agree
  /// as they already must on the windows; a clock ahead only pushes a claim twice, counting
  /// it twice elsewhere, which only ever denies more.)
  std::int64_t claim_expiry_ms() const {
    std::chrono::milliseconds slowest{0};
    for (const RemoteRegion& r : options_.remotes)
      slowest = std::max(slowest, r.redis.connect_timeout + r.redis.command_timeout);
    return (slowest + options_.local.connect_timeout + options_.local.command_timeout).count();
  }

  /// Acknowledges `units` pushed to `region` (s:<region> += units) or undoes their claim
  /// (c:<region> -= units); either way s:<region> stays at most c:<region>, so that a claim
  /// pushed twice (taken again after it expired while its first round was under way) is not
  /// acknowledged twice (lua/regional_exchange.lua).
  static RedisCall add_call(const std::string& hash, const std::string& region, bool acked,
                            std::int64_t units) {
    RedisCall c;
    c.script = &regional_exchange_script();
    c.keys.push_back(hash);
    c.argv = {"add", (acked ? "s:" : "c:") + region, std::to_string(acked ? units : -units),
              "s:" + region, "c:" + region};
    return c;
  }

  struct DirtySet {
    std::int64_t hold_ms = 0;
    std::int64_t unit_ns = 0;
    std::shared_ptr<DirtySlots> slots;  ///< marked by decisions (cluster)
    std::vector<char> kept;             ///< per slot: its set was left non-empty (cluster)
    int sweep = 0;                      ///< the next slot the sweep claims (cluster)
  };

  /// "<prefix>{<slot tag>}rg-dirty<tail>" for `set` = "<prefix>{rg-dirty}<tail>".
  std::string cluster_dirty_name(const std::string& set, int slot) const {
    const std::size_t p = options_.local.key_prefix.size();
    std::string name = set.substr(0, p);
    name += '{';
    name += redis_slot_tag(slot);
    name += "}rg-dirty";
    name.append(set, p + std::string_view("{rg-dirty}").size());
    return name;
  }

  /// The slots whose sets this round claims (cluster): marked, kept, and the sweep's next
  /// `sweep_slots`. Clears the marks. Call with mutex_ held.
  static std::vector<int> slots_to_claim(DirtySet& kind) {
    if (kind.kept.empty()) kind.kept.assign(redis_cluster_slots, 0);
    std::vector<char> take(kind.kept);
    for (std::size_t w = 0; w < kind.slots->bits.size(); ++w) {
      const std::uint64_t bits = kind.slots->bits[w].exchange(0, std::memory_order_relaxed);
      for (int b = 0; b < 64; ++b)
        if ((bits >> b) & 1U) take[w * 64 + static_cast<std::size_t>(b)] = 1;
    }
    for (int i = 0; i < sweep_slots; ++i)
      take[static_cast<std::size_t>((kind.sweep + i) % redis_cluster_slots)] = 1;
    kind.sweep = (kind.sweep + sweep_slots) % redis_cluster_slots;
    std::vector<int> out;
    for (int s = 0; s < redis_cluster_slots; ++s)
      if (take[static_cast<std::size_t>(s)] != 0) out.push_back(s);
    return out;
  }

  /// Records whether a claimed slot's set was left non-empty (or its claim failed): it is then
  /// claimed again next round (a bucket's held hashes are kept alive by each claim).
  void keep_slot(const std::pair<DirtySet*, int>& at, bool keep) {
    const std::lock_guard lock(mutex_);
    at.first->kept[static_cast<std::size_t>(at.second)] = keep ? 1 : 0;
  }

  /// Reads claim's reply { hash, ttl, d_1..d_m, ..., [the set's size] } into `round` (`kind`:
  /// its set's; `counted`: the size comes last). Returns whether the set was left non-empty
  /// (true when unknown).
  bool read_claims(const redisReply& reply, const DirtySet& kind, ExchangeRound& round,
                   bool counted) {
    const std::size_t m = remotes_.size(), stride = 2 + m;
    const std::size_t n = reply.elements - (counted && reply.elements > 0 ? 1 : 0);
    if (reply.type != REDIS_REPLY_ARRAY || n % stride != 0 || (counted && reply.elements == 0)) {
      local_->report({RedisFailureKind::protocol, "unexpected reply from the exchange's claim"});
      return true;
    }
    bool left = true;
    if (counted) {
      const auto size = reply_int(reply, n);
      left = !size || *size > 0;
    }
    for (std::size_t at = 0; at < n; at += stride) {
      const redisReply* h = reply.element[at];
      if (h == nullptr || h->type != REDIS_REPLY_STRING) continue;
      ExchangeRound::Claim claim;
      claim.hash.assign(h->str, h->len);
      const auto ttl = reply_int(reply, at + 1);
      claim.ttl_ms = ttl ? static_cast<std::int64_t>(*ttl) : 1;
      claim.unit_ns = kind.unit_ns;
      claim.hold_ms = kind.hold_ms;
      for (std::size_t r = 0; r < m; ++r) {
        const auto d = reply_int(reply, at + 2 + r);
        claim.units.push_back(d ? static_cast<std::int64_t>(*d) : 0);
      }
      round.claims_.push_back(std::move(claim));
    }
    return left;
  }

  /// Sends `remote` a PING in the background unless one is under way; its answer lets the next
  /// round push there again (and wait for it).
  static void start_probe(RegionalRemote& remote) {
    std::shared_ptr<RegionalRemote::Probe> probe = remote.probe;
    if (probe->in_flight.exchange(true)) return;
    std::vector<RedisCall> ping;
    ping.push_back(RedisCall{nullptr, {"ping"}, {"PING"}});
    remote.client->execute_async(
        std::move(ping), remote.client->deadline_from_now(), [probe](std::vector<RedisResult>&& r) {
          probe->ok.store(!r.empty() && !r.front().failure, std::memory_order_release);
          probe->in_flight.store(false, std::memory_order_release);
        });
  }

  /// The hash of exclusions granted by a region's Redis (the same name in every region).
  std::string exclusion_key() const { return options_.local.key_prefix + "{rg-ex}"; }

  /// A grant or release of this process's exclusion of `excluded` (lua/regional_exchange.lua).
  RedisCall exclusion_call(const char* mode, const std::string& excluded) const {
    RedisCall c;
    c.script = &regional_exchange_script();
    c.keys.push_back(exclusion_key());
    c.argv = {mode, options_.region, excluded};
    if (std::string_view(mode) == "grant")
      c.argv.push_back(std::to_string(options_.exclusion_lease.count()));
    c.argv.push_back(instance_);
    return c;
  }

  /// A random name for this process's grants: instances of one region hold and release their
  /// own (one that releases must not lift another's exclusion).
  static std::string random_instance() {
    std::random_device rd;
    const std::uint64_t v = (std::uint64_t{rd()} << 32) ^ std::uint64_t{rd()};
    static constexpr char hex[] = "0123456789abcdef";
    std::string out(16, '0');
    for (std::size_t i = 0; i < 16; ++i) out[i] = hex[(v >> (4 * i)) & 0xF];
    return out;
  }

  /// Runs `calls[k]` on client k (0: this region's Redis, k: remotes_[k - 1]; an empty list
  /// is not sent) all at once; returns each client's results (empty where nothing was sent).
  std::vector<std::vector<RedisResult>> run_everywhere(std::vector<std::vector<RedisCall>> calls) {
    struct Pending {
      std::mutex mutex;
      std::condition_variable done;
      std::size_t left = 0;
      std::vector<std::vector<RedisResult>> results;
    };
    auto pending = std::make_shared<Pending>();
    pending->results.resize(calls.size());
    for (const auto& c : calls)
      if (!c.empty()) ++pending->left;
    for (std::size_t k = 0; k < calls.size(); ++k) {
      if (calls[k].empty()) continue;
      RedisClient& client = k == 0 ? *local_ : *remotes_[k - 1]->client;
      client.execute_async(std::move(calls[k]), client.deadline_from_now(),
                           [pending, k](std::vector<RedisResult>&& res) {
                             const std::lock_guard lock(pending->mutex);
                             pending->results[k] = std::move(res);
                             if (--pending->left == 0) pending->done.notify_all();
                           });
    }
    std::unique_lock lock(pending->mutex);
    pending->done.wait(lock, [&] { return pending->left == 0; });
    return std::move(pending->results);
  }

  /// Partitions hit the partitioned. A region that failed to reach region j in this round and
  /// the one before asks its own Redis and every region it reached to grant it the exclusion
  /// of j (lua/regional_exchange.lua, mode grant). Granted by a strict majority of the R
  /// regions, it leaves j out of its unseen bound (append_bounding_regions) and renews the
  /// grants at each round until it reaches j again; then it stops excluding, and releases
  /// the grants at the next round that reaches j, whose claim carries every unit admitted
  /// while j was excluded. A grantor refuses while j excludes this region, this region is
  /// excluded, or j excludes anyone; every two majorities share a region, and a grant lasts
  /// (unless released) `exclusion_lease` after its last renewal, which this region's own
  /// steady clock, started before it asked, never outlasts: so no two regions ever exclude
  /// each other, and an excluded region excludes no one. A grantor refuses the pushes of the
  /// excluded region (it is fenced: its acknowledgements from a majority stay as they were).
  /// The bound this keeps is proven in docs/far.md ("A partition").
  void update_exclusions(const std::vector<char>& reached, const std::vector<char>& was_cut) {
    const std::size_t m = remotes_.size();
    const auto asked_at = std::chrono::steady_clock::now();
    std::vector<std::size_t> ask, release;
    {
      const std::lock_guard lock(exclusion_mutex_);
      for (std::size_t r = 0; r < m; ++r) {
        RegionalRemote& x = *remotes_[r];
        const bool excluded = x.excluded.load(std::memory_order_relaxed);
        if (excluded && asked_at >= x.excluded_until) {  // not renewed in time: lapsed
          x.excluded.store(false, std::memory_order_release);
          x.release_pending = true;
        }
        if (!reached[r]) {
          if (was_cut[r]) ask.push_back(r);
        } else if (x.excluded.load(std::memory_order_relaxed)) {
          x.excluded.store(false, std::memory_order_release);
          x.release_pending = true;
        } else if (x.release_pending) {
          x.release_pending = false;
          release.push_back(r);
        }
      }
    }
    if (ask.empty() && release.empty()) return;
    std::vector<std::vector<RedisCall>> calls(m + 1);
    for (std::size_t k = 0; k <= m; ++k) {
      if (k > 0 && !reached[k - 1]) continue;
      // A Redis that cannot fence the excluded region's pushes (a cluster) grants nothing.
      if (k == 0 ? cluster_ : remotes_[k - 1]->cluster) continue;
      for (std::size_t r : ask) calls[k].push_back(exclusion_call("grant", remotes_[r]->name));
      for (std::size_t r : release)
        calls[k].push_back(exclusion_call("release", remotes_[r]->name));
    }
    auto results = run_everywhere(calls);
    // A grant that reached no majority is given back where it was taken (it would fence j
    // there and refuse others for a lease), unless an exclusion of j is still to be released.
    std::vector<std::vector<RedisCall>> give_back(m + 1);
    bool any_back = false;
    {
      const std::lock_guard lock(exclusion_mutex_);
      for (std::size_t a = 0; a < ask.size(); ++a) {
        RegionalRemote& x = *remotes_[ask[a]];
        std::vector<std::size_t> granted_by;
        for (std::size_t k = 0; k <= m; ++k) {
          if (results[k].size() <= a || results[k][a].failure) continue;
          const redisReply& reply = *results[k][a].reply;
          if (reply.type == REDIS_REPLY_INTEGER && reply.integer == 1) granted_by.push_back(k);
        }
        if (2 * granted_by.size() > m + 1) {
          x.excluded_until = asked_at + options_.exclusion_lease;
          x.excluded.store(true, std::memory_order_release);
        } else if (!x.excluded.load(std::memory_order_relaxed) && !x.release_pending) {
          for (std::size_t k : granted_by) {
            give_back[k].push_back(exclusion_call("release", x.name));
            any_back = true;
          }
        }
      }
    }
    if (any_back) (void)run_everywhere(std::move(give_back));
  }

  /// Records whether `remote` was reached; tells the listeners when that changes (and of each
  /// failure while it is cut). Returns whether it was cut before.
  bool set_cut(RegionalRemote& remote, bool cut, const std::string& why,
               std::chrono::nanoseconds at) {
    const bool was = remote.cut.exchange(cut);
    const ObserverSet* obs = observers.current();
    if (obs == nullptr) return was;
    const std::string node = "region " + remote.name;
    if (cut) {
      const std::string msg = "region " + options_.region + " cannot reach " + node + " (at " +
                              std::to_string(at.count()) + " ns): " + why +
                              "; deciding on its own count plus its unseen bound";
      Observers::each(*obs, [&](Listener& l, bool) {
        l.on_storage_error(StorageErrorEvent{"partition", msg});
      });
    }
    if (was != cut)
      Observers::each(*obs, [&](Listener& l, bool) { l.on_breaker_change({node, cut}); });
    return was;
  }

  RegionalOptions options_;
  std::shared_ptr<RedisClient> local_;
  bool cluster_;
  std::vector<std::unique_ptr<RegionalRemote>> remotes_;
  std::mutex mutex_;
  std::map<std::string, DirtySet> dirty_sets_;  ///< see add_dirty_set
  std::mutex exclusion_mutex_;                  ///< RegionalRemote's exclusion fields
  std::string instance_ = random_instance();    ///< names this process's grants
  std::atomic<std::uint64_t> exchanges_{0}, units_pushed_{0}, push_failures_{0};
};

}  // namespace detail
}  // namespace ratelimit
