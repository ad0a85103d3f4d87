#pragma once
/// @file redis/lease/options.hpp
/// What every leased binding shares (docs/far.md, "Leased quotas for hot keys"): the options,
/// the counters, the Redis client, one part of a `decide_all`, and the round trip itself. The
/// bindings are redis/lease/window.hpp (fixed window, sliding counter) and
/// redis/lease/bucket.hpp (token bucket); redis/lease/storage.hpp binds them.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../../core/clock.hpp"
#include "../../core/completion.hpp"
#include "../../core/decision.hpp"
#include "../../core/detail/validate.hpp"
#include "../../core/storage.hpp"
#include "../../memory/in_memory_storage.hpp"
#include "../detail/client.hpp"
#include "../detail/cluster_client.hpp"
#include "../detail/decimal.hpp"
#include "../options.hpp"

namespace ratelimit {

/// A leased storage's configuration. Thread safety: a plain value.
struct LeaseOptions {
  /// The shared Redis. Its failure_policy decides when a lease cannot be taken; here it
  /// defaults to local_fallback (each instance decides on its share, the limit divided by
  /// `fallback_divisor`, in process), not RedisStorage's fail_open: fail_open would void every
  /// bound while the far Redis does not answer. Assigning a whole RedisOptions brings its own
  /// policy (fail_open unless set): set `redis.failure_policy` after.
  RedisOptions redis = [] {
    RedisOptions o;
    o.failure_policy = FailurePolicy::local_fallback;
    return o;
  }();
  /// A lease takes N / lease_divisor units (at least 1) unless `bind` is given L; 1 to 10^6.
  std::int64_t lease_divisor = 10;
  /// H: a lease's unused units go back after this long (the instance's clock), 1 ms to 1 h.
  std::chrono::milliseconds lease_duration{1000};
  /// G: a lease's record in Redis expires H + G after the lease (0 to 1 h). The next decision
  /// of any instance on the key after that reclaims the units the record holds (a holder that
  /// died gives nothing back itself). A live holder gives its lease back with its next miss or
  /// `flush`: call `flush` at least every G, or a reclaimed record's units may be spent twice
  /// (the window over-admits by at most the units it had spent of them; docs/far.md, Limits).
  std::chrono::milliseconds reclaim_grace{1000};
  /// Keys holding a lease at most per limiter (1 to 10^7): memory stays bounded under hostile
  /// traffic; beyond it a key is decided with a lease of exactly its cost (one round trip).
  std::size_t max_keys = 100000;
  /// Empty (the default): the shared Redis is the one `redis` names. Otherwise it is a Redis
  /// Cluster, learned from these nodes ("host:port", any of them; docs/cluster.md): `redis`
  /// applies per node (host and port unused, db 0), each lease call goes to the primary of its
  /// key's slot (a key's count, its lease records and the previous window's count share the
  /// client key's hash tag: one slot), with MOVED, ASK and failover handled as for
  /// RedisClusterStorage.
  std::vector<std::string> cluster_seeds{};
};

/// Counters since construction, shared by copies. Thread safety: a plain value.
struct LeaseStats {
  std::uint64_t local = 0;        ///< decisions spent from a lease, no round trip
  std::uint64_t round_trips = 0;  ///< leases asked for (misses and flushes)
  std::uint64_t units_leased = 0;
  std::uint64_t units_returned = 0;   ///< unused units handed back (a bucket credits fewer)
  std::uint64_t degraded = 0;         ///< decisions the failure policy made (Redis down)
  std::uint64_t denied_locally = 0;   ///< denials answered from a remembered one, no round trip
  std::uint64_t units_reclaimed = 0;  ///< units of expired lease records this instance reclaimed
};

/// One part of a `LeasedStorage::decide_all` (one key). Thread safety: a plain value.
struct LeasedPart {
  std::string_view key;
  Operation op;
  Decision (*apply)(const void* binding, std::string_view key, std::chrono::nanoseconds now,
                    const Operation& op);
  const void* binding;
  /// Decides the part without blocking: its binding's apply_async (which copies the binding
  /// and the key before it returns).
  void (*apply_async)(const void* binding, std::string_view key, std::chrono::nanoseconds now,
                      const Operation& op, Completion<Decision> done);
};

class LeasedStorage;

namespace detail {

/// What the copies of a LeasedStorage share. Thread safety: safe from many threads.
struct LeaseShared {
  explicit LeaseShared(LeaseOptions o)
      : options(std::move(o)), client([this] {
          if (options.lease_divisor < 1 || options.lease_divisor > 1'000'000)
            invalid("lease_divisor", options.lease_divisor, "must be in [1, 1000000]");
          if (options.lease_duration < std::chrono::milliseconds{1} ||
              options.lease_duration > std::chrono::hours{1})
            invalid("lease_duration (ms)", options.lease_duration.count(),
                    "must be in [1 ms, 1 h]");
          if (options.reclaim_grace < std::chrono::milliseconds{0} ||
              options.reclaim_grace > std::chrono::hours{1})
            invalid("reclaim_grace (ms)", options.reclaim_grace.count(), "must be in [0, 1 h]");
          if (options.max_keys < 1 || options.max_keys > 10'000'000)
            invalid("max_keys", static_cast<std::int64_t>(options.max_keys),
                    "must be in [1, 10^7]");
          return make_redis_client(options.redis, options.cluster_seeds, "cluster_seeds");
        }()) {}
  LeaseOptions options;
  std::shared_ptr<RedisClient> client;
  /// The per-instance shares of local_fallback.
  InMemoryStorage fallback;
  std::atomic<std::uint64_t> local{0}, round_trips{0}, units_leased{0}, units_returned{0},
      degraded{0}, denied_locally{0}, units_reclaimed{0};
  /// This instance's name in lease records: random, so instances never share one.
  const std::string instance = [] {
    std::random_device rd;
    std::uint64_t v = (std::uint64_t{rd()} << 32) ^ rd();
    std::string s(16, '0');
    for (int i = 15; i >= 0; --i, v >>= 4)
      s[static_cast<std::size_t>(i)] = "0123456789abcdef"[v & 15];
    return s;
  }();
  std::atomic<std::uint64_t> next_record{0};

  /// A fresh lease record's id: the instance, then a sequence number.
  std::string record_id() {
    return instance + "." + std::to_string(next_record.fetch_add(1, std::memory_order_relaxed));
  }
};

/// A denial a lease call got, answered in process until `until` for every request of more
/// than `room` units under the same limit, as RedisStorage's over-limit cache does: a flood's
/// denials cost no round trip. `until` is the denial's retry_after, but at most H: another
/// instance's lease ends within H and its unused units come back, which a remembered denial
/// would not see (under-admission only, for at most H). Thread safety: guarded by its
/// binding's table mutex.
struct LeaseDenial {
  std::chrono::nanoseconds at{0};  ///< when Redis denied
  std::chrono::nanoseconds until{0};
  std::int64_t room = 0;   ///< units Redis still had for this key (a smaller request asks it)
  std::int64_t limit = 0;  ///< the limit it was decided under
  Decision decision;
};

/// The remembered denial of `key` for `op` at `now`, if any (peeks always ask), its durations
/// counted from `now`. Drops an expired one. Call with the table's mutex held.
inline std::optional<Decision> recall_denial(std::unordered_map<std::string, LeaseDenial>& denied,
                                             const std::string& key, std::chrono::nanoseconds now,
                                             const Operation& op, std::int64_t limit) {
  if (op.peek || denied.empty()) return std::nullopt;
  const auto it = denied.find(key);
  if (it == denied.end()) return std::nullopt;
  const LeaseDenial& m = it->second;
  if (now >= m.until || now < m.at) {  // over, or a clock stepped back
    denied.erase(it);
    return std::nullopt;
  }
  if (op.cost <= m.room || m.limit != limit) return std::nullopt;
  Decision d = m.decision;
  const auto spent = now - m.at;
  d.retry_after = std::max(d.retry_after - spent, std::chrono::nanoseconds{1});
  d.reset_after = std::max(d.reset_after - spent, std::chrono::nanoseconds{0});
  return d;
}

/// Remembers denial `d` of `key` at `now` for at most `hold` (room: units Redis still had),
/// within `max_keys` keys.
inline void remember_denial(std::unordered_map<std::string, LeaseDenial>& denied,
                            const std::string& key, std::chrono::nanoseconds now, const Decision& d,
                            std::int64_t limit, std::size_t max_keys,
                            std::chrono::nanoseconds hold) {
  if (d.retry_after <= std::chrono::nanoseconds{0} || d.retry_after == Decision::never) return;
  if (denied.size() >= max_keys && denied.find(key) == denied.end()) return;
  denied[key] = LeaseDenial{now, now + std::min(d.retry_after, hold),
                            std::max<std::int64_t>(d.remaining, 0), limit, d};
}

/// `now` within the clock's range [0, 2^62 ns] (as every storage reads it): ends and ages such
/// as (k + 1) W - t cannot overflow for any `now` a caller passes.
inline std::chrono::nanoseconds lease_clamp_time(std::chrono::nanoseconds now) noexcept {
  return std::clamp(now, std::chrono::nanoseconds{0}, max_clock_time);
}

/// The reply of one lease script call: its integers when it has `size` of them, all >= 0;
/// nothing when Redis could not answer (the client reported it) or answered otherwise
/// (reported here as a protocol error).
inline std::optional<std::vector<i128>> lease_reply(LeaseShared& shared, const RedisResult& res,
                                                    std::size_t size) {
  if (res.failure) return std::nullopt;
  const auto v = reply_ints(*res.reply);
  const std::span<const i128> r = v ? std::span<const i128>(*v) : std::span<const i128>{};
  if (r.size() != size ||
      std::any_of(r.begin(), r.end(), [](i128 x) { return x < 0 || x > (i128{1} << 62); })) {
    shared.client->report({RedisFailureKind::protocol, "unexpected reply from the lease script"});
    return std::nullopt;
  }
  return std::vector<i128>(r.begin(), r.end());
}

/// local_fallback's decision for a lease that could not be taken: the instance's share, in
/// process (`fallback`, the binding's limit divided by fallback_divisor). Degraded.
template <class Fallback>
Decision lease_fallback(LeaseShared& shared, const Fallback& fallback, std::string_view key,
                        std::chrono::nanoseconds now, const Operation& op) {
  shared.degraded.fetch_add(1, std::memory_order_relaxed);
  Decision d = fallback.apply(key, now, op);
  d.degraded = true;
  return d;
}

/// The failure policy's decision for a lease that could not be taken: fail_open admits,
/// otherwise a denial to be retried after `retry` (never for a cost above `limit`). Degraded.
inline Decision lease_degraded(LeaseShared& shared, std::int64_t limit, const Operation& op,
                               std::chrono::nanoseconds retry) {
  shared.degraded.fetch_add(1, std::memory_order_relaxed);
  Decision d{};
  d.limit = limit;
  d.degraded = true;
  if (op.cost > limit) {
    d.retry_after = Decision::never;
  } else if (shared.options.redis.failure_policy == FailurePolicy::fail_open) {
    d.allowed = true;
    d.remaining = limit;
  } else {
    d.retry_after = retry;
  }
  return d;
}

}  // namespace detail
}  // namespace ratelimit
