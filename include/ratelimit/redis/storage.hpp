#pragma once
/// @file redis/storage.hpp
/// The Redis storage: per-key state shared by every instance of a service, one atomic Lua
/// script per decision. Needs hiredis (CMake target `ratelimit::redis`).
///
/// Time resolution: decisions are made at the clock's reading rounded down to a whole
/// microsecond (the scripts' time unit, exact below 2^53 in Lua), and every duration in a
/// Decision is exact to the nanosecond from there. With whole-microsecond times (ManualClock
/// in whole ms, say) the decisions equal `InMemoryStorage`'s in every field. Range: the core
/// range of every algorithm, unchanged (every number the scripts hold stays below 2^53: see
/// lua/prelude.lua), except that a window (fixed window, sliding counter) must be whole
/// microseconds; clock readings are clamped to [0, 2^62] ns.
///
/// How a decision flows: a limiter's `try_acquire` reads its clock and calls its binding's
/// `apply`; the binding formats its model's arguments (`Model::Wire::args`), the client sends
/// one EVALSHA of the model's script on a pooled connection (reloading it after NOSCRIPT), and
/// the binding reads the reply back with `Model::Wire::decode`, which evaluates the C++ model on
/// the state the script saw. A failure (down, slow, error reply) goes to the failure policy.
/// `decide_all` sends every part in one composed script (lua/multi.lua) instead. The binding is
/// redis/binding.hpp.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../algorithms/registry.hpp"
#include "../core/decision.hpp"
#include "../core/storage.hpp"
#include "../core/wire.hpp"
#include "../memory/in_memory_storage.hpp"
#include "binding.hpp"
#include "detail/client.hpp"
#include "detail/decimal.hpp"
#include "detail/keys.hpp"
#include "detail/script.hpp"
#include "detail/sentinel_client.hpp"
#include "options.hpp"

namespace ratelimit {

/// Keeps every key's state in Redis, shared by every process that uses the same Redis and
/// key_prefix: one Lua script per decision (EVALSHA; reloaded by itself after NOSCRIPT), run
/// atomically by Redis, so instances never spend the same capacity twice.
///
/// Keys: one per client key and limiter, `<key_prefix>{<key>}<algorithm tag><format>:<name>`
/// (redis/detail/keys.hpp: '%' and '}' escaped in the key, ':' and '%' in the name), one hash
/// tag per client key (Redis Cluster-safe), unambiguous for any bytes; every write sets a TTL
/// of the time the state still matters plus `ttl_margin`.
/// Time: see the file comment (whole microseconds; exact Decisions; the core range).
/// Failures (down, slower than command_timeout, error replies): `failure_policy` decides,
/// with `degraded = true`; a circuit breaker skips Redis for a short back-off after a failure,
/// and decisions return to Redis by themselves once it answers again.
///
/// A handle: copies share one connection pool, breaker and counters. Construction does not
/// connect (connections open on first use) unless `RedisOptions::warm_up` asks it to, and
/// succeeds while Redis is down either way. A script goes as EVAL with its body the first time
/// this process sends it to a node (EVALSHA after that, EVAL again after NOSCRIPT), so a cold
/// process's first decision is one round trip.
/// Errors: the constructor throws `std::invalid_argument` naming a bad option; `bind` throws it
/// for parameters outside the range above.
/// Thread safety: every member is safe from many threads.
class RedisStorage {
 public:
  /// Refunds and penalties run as one script call, like a take (`AdjustingStorage`); also on
  /// Redis Cluster.
  static constexpr bool adjusts = true;

  /// A storage on 127.0.0.1:6379 with the default options (so `Storage = {}` works).
  RedisStorage() : RedisStorage(RedisOptions{}) {}

  /// A storage on `options.host:options.port`.
  explicit RedisStorage(RedisOptions options)
      : client_(make_client(std::move(options))),
        hot_(std::make_shared<detail::HotKeys>(client_->options())) {
    if (client_->options().warm_up) (void)warm_up();
  }

  /// Cold start: connects to Redis now (TCP, TLS handshake, AUTH, SELECT) and loads every
  /// algorithm's script (SCRIPT LOAD; on Redis Cluster, learns the slot map and loads them on
  /// every primary), so that the first decision is one round trip with no script body. Call it
  /// at start-up (or set `RedisOptions::warm_up`). Waits at most connect_timeout +
  /// command_timeout (a cluster: the slot map's own budget first). Never throws for Redis
  /// failures: they are reported to listeners and `on_failure`, the breaker hears of them, and
  /// decisions then follow `failure_policy`. Without it the first decision still costs one
  /// round trip (EVAL with the script's body) plus the connect. Listeners attached before it
  /// hear `on_connect`. Returns true if every node loaded every script; false from a
  /// completion (an I/O thread cannot wait). Thread safety: safe from many threads.
  bool warm_up() const {
    std::vector<const detail::RedisScript*> scripts;
    Algorithms::for_each([&]<class M>() { scripts.push_back(&detail::script_of<M>()); });
    return client_->warm_up(scripts);
  }

  /// The binding type for model `M`.
  template <WireModel M>
  using Binding = RedisBinding<M>;

  /// One part of an all-or-nothing decision (`decide_all`).
  using Part = RedisPart;

  /// Binds model `M` under limiter name `name` (bindings with equal M and name share keys).
  /// Throws `std::invalid_argument` naming the field for params outside the range.
  template <WireModel M>
  RedisBinding<M> bind(std::string_view name, const typename M::Params& params) {
    return RedisBinding<M>(client_, hot_, fallback_, name, params, std::nullopt);
  }

  /// As above, with an explicit per-instance limit (for `FailurePolicy::local_fallback` and the
  /// pre-limit) instead of the shared one divided by `fallback_divisor` (e.g.
  /// `TokenBucketModel::make_params(...)`).
  template <WireModel M>
  RedisBinding<M> bind(std::string_view name, const typename M::Params& params,
                       const typename M::Params& local_fallback) {
    return RedisBinding<M>(client_, hot_, fallback_, name, params, local_fallback);
  }

  /// Decides every part at `now` in one script (lua/multi.lua), all or nothing (see
  /// `MultiKeyStorage`): every part admits and spends, or nothing changes. The script decides
  /// every part first and writes only when all admit, so a part costs Redis what its own
  /// decision costs. When Redis cannot
  /// decide, each part gets its binding's failure policy (`degraded = true`); local_fallback
  /// then decides part by part on the per-instance limits. On Redis Cluster all keys must share
  /// one slot (give the parts one `tag`); otherwise the call is refused (CROSSSLOT) and degraded.
  /// Throws `std::invalid_argument` if `out` is too short, a part belongs to another storage, or
  /// two parts name the same Redis key.
  bool decide_all(std::span<const Part> parts, std::chrono::nanoseconds now,
                  std::span<Decision> out) const {
    if (out.size() < parts.size())
      throw std::invalid_argument("decide_all: out has " + std::to_string(out.size()) +
                                  " decisions for " + std::to_string(parts.size()) + " parts");
    if (parts.empty()) return true;
    const auto deadline = client_->deadline_from_now();
    std::vector<detail::RedisCall> calls;
    calls.push_back(multi_call(parts, now));
    if (pre_limited(parts, now, out)) return false;
    auto results = client_->execute(std::move(calls), deadline);
    const bool all = read_all(parts, now, results.front(), out);
    if (all) spend_pre_limit(parts, now, out);
    return all;
  }

  /// `decide_all` without blocking: `done(decisions, all_admitted)` is called exactly once,
  /// on the storage's I/O thread, or before this returns when Redis is not tried (see
  /// core/completion.hpp). The parts' keys and tags are copied; their bindings must stay alive
  /// until `done` runs (RuleSet::decide_async keeps them). Throws as `decide_all` (and then
  /// never calls `done`).
  void decide_all_async(std::span<const Part> parts, std::chrono::nanoseconds now,
                        std::function<void(std::vector<Decision>&&, bool)> done) const {
    struct Held {
      std::vector<std::string> keys, tags;  // the parts' keys and tags, owned
      std::vector<Part> parts;              // pointing into them
    };
    auto held = std::make_shared<Held>();
    held->keys.reserve(parts.size());
    held->tags.reserve(parts.size());
    for (const Part& p : parts) {
      held->keys.emplace_back(p.key);
      held->tags.emplace_back(p.tag);
      held->parts.push_back(p);
      held->parts.back().key = held->keys.back();
      held->parts.back().tag = held->tags.back();
    }
    if (parts.empty()) {
      try {
        done({}, true);
      } catch (...) {  // see core/completion.hpp
      }
      return;
    }
    const auto deadline = client_->deadline_from_now();
    std::vector<detail::RedisCall> calls;
    calls.push_back(multi_call(parts, now));
    if (std::vector<Decision> local(parts.size()); pre_limited(parts, now, local)) {
      try {
        done(std::move(local), false);
      } catch (...) {  // see core/completion.hpp
      }
      return;
    }
    client_->execute_async(std::move(calls), deadline,
                           [self = *this, held, now,
                            done = std::move(done)](std::vector<detail::RedisResult>&& results) {
                             std::vector<Decision> out(held->parts.size());
                             const bool all = self.read_all(held->parts, now, results.front(), out);
                             if (all) self.spend_pre_limit(held->parts, now, out);
                             try {
                               done(std::move(out), all);
                             } catch (...) {  // see core/completion.hpp
                             }
                           });
  }

  /// Counters since construction (shared by every copy).
  RedisStats stats() const noexcept {
    RedisStats s = client_->stats();
    s.cache_hits = hot_->cache.hits();
    s.cache_entries = hot_->cache.size();
    s.pre_limited = hot_->pre_limited.load(std::memory_order_relaxed);
    return s;
  }

  /// Attaches a listener to this storage (and every copy): it hears of storage errors
  /// (`on_storage_error`, with what `on_failure` gets), each node's circuit breaker opening or
  /// closing, every pipelined round trip to a node (`on_round_trip`, from the I/O thread),
  /// every new connection (`on_connect`: TCP connect, TLS handshake, the whole), the storage's
  /// first decision (`on_first_decision`, once) and every over-limit cache hit (with the key
  /// only if `options.with_keys`). Decisions are
  /// reported by limiters and rule sets, not here. What it throws is swallowed. Attaching and
  /// detaching keep about 40 B plus 24 B per listener each, until the storage is destroyed.
  /// Thread safety: safe from many threads, also while deciding.
  void attach_listener(std::shared_ptr<Listener> listener, ListenerOptions options = {}) const {
    client_->observers.attach(std::move(listener), options);
  }
  /// Detaches every attachment of `listener`; returns whether it was attached. An event under
  /// way on another thread may still reach it. Thread safety: safe from many threads.
  bool detach_listener(const Listener& listener) const {
    return client_->observers.detach(&listener);
  }

  /// Empties the over-limit cache: every key's next request asks Redis (after a reset or a limit
  /// raised through another instance, say). Thread safety: safe from many threads.
  void clear_over_limit_cache() const { hot_->cache.clear(); }

  /// The options it was built with.
  const RedisOptions& options() const noexcept { return client_->options(); }

 protected:
  /// The cluster hook: RedisClusterStorage is a RedisStorage whose client routes by slot.
  explicit RedisStorage(std::shared_ptr<detail::RedisClient> client)
      : client_(std::move(client)), hot_(std::make_shared<detail::HotKeys>(client_->options())) {
    if (client_->options().warm_up) (void)warm_up();
  }

 private:
  friend class RedisBatch;

  /// A client for one Redis, or for the primary that Sentinel names.
  static std::shared_ptr<detail::RedisClient> make_client(RedisOptions options) {
    if (options.sentinel.sentinels.empty())
      return std::make_shared<detail::RedisClient>(std::move(options));
    return std::make_shared<detail::RedisSentinelClient>(std::move(options));
  }

  /// The parts' per-instance limits (the pre-limit), each with `peek` as given; empty when the
  /// pre-limit is off.
  std::vector<InMemoryStorage::Part> local_parts(std::span<const Part> parts, bool peek) const {
    std::vector<InMemoryStorage::Part> local;
    if (!client_->options().pre_limit) return local;
    local.reserve(parts.size());
    for (const Part& p : parts) {
      Operation op = p.op;
      op.peek = peek || op.peek;
      auto l = p.ops->local(p.binding, p.key, op);
      if (!l) return {};
      local.push_back(*l);
    }
    return local;
  }

  /// Decides the per-instance parts; nullopt when they cannot be decided together: two parts on
  /// one per-instance counter (one limiter and key under two tags, which Redis keeps apart),
  /// where the pre-limit is skipped.
  std::optional<bool> decide_local(std::span<const InMemoryStorage::Part> local,
                                   std::chrono::nanoseconds now, std::span<Decision> out) const {
    try {
      return fallback_.decide_all(local, now, out);
    } catch (const std::invalid_argument&) {
      return std::nullopt;
    }
  }

  /// True, with every part's per-instance decision in `out`, if the pre-limit denies the parts
  /// (all or nothing, like the shared decision; nothing is spent).
  bool pre_limited(std::span<const Part> parts, std::chrono::nanoseconds now,
                   std::span<Decision> out) const {
    const auto local = local_parts(parts, true);
    if (local.empty()) return false;
    std::vector<Decision> dry(local.size());
    if (decide_local(local, now, dry).value_or(true)) return false;
    std::copy(dry.begin(), dry.end(), out.begin());
    hot_->pre_limited.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  /// After Redis itself admitted every part (`decided`: none degraded: a failure policy's
  /// admission is not Redis's), the pre-limit spends them too, all or nothing; parts in
  /// flight together may find it spent already, which they may, being admitted.
  void spend_pre_limit(std::span<const Part> parts, std::chrono::nanoseconds now,
                       std::span<const Decision> decided) const {
    for (std::size_t i = 0; i < parts.size(); ++i)
      if (decided[i].degraded) return;
    const auto local = local_parts(parts, false);
    if (local.empty()) return;
    std::vector<Decision> scratch(local.size());
    (void)decide_local(local, now, scratch);
  }

  /// The one script call that decides every part (lua/multi.lua). Throws as `decide_all`.
  detail::RedisCall multi_call(std::span<const Part> parts, std::chrono::nanoseconds now) const {
    detail::RedisCall call;
    bool dry_only = true;
    std::vector<detail::ScriptPart> scripts;
    for (const Part& p : parts) {
      if (p.ops->client(p.binding) != client_.get())
        throw std::invalid_argument("decide_all: a part belongs to another RedisStorage");
      detail::check_cost(p.op.cost);
      dry_only = dry_only && p.op.peek;
      scripts.push_back(p.ops->script);
    }
    call.script = &detail::multi_script_for(std::move(scripts));
    call.argv.push_back(std::to_string(parts.size()));
    call.argv.push_back(dry_only ? "1" : "0");
    // Views of call.keys' strings, which never move: the vector is reserved up front. Hashed,
    // so a request of thousands of parts is checked in linear time (a scan per part was
    // quadratic).
    call.keys.reserve(parts.size());
    std::unordered_set<std::string_view> seen;
    for (const Part& p : parts) {
      call.keys.push_back(p.ops->key(p.binding, p.key, p.tag));
      // Parts are decided before any writes, so two parts on one key would both see the state
      // before either: refused, as the in-memory storage refuses them.
      if (!seen.insert(call.keys.back()).second)
        throw std::invalid_argument("decide_all: two parts name the Redis key " + call.keys.back());
      call.argv.push_back(std::to_string(p.ops->script.wire_id));
      const std::size_t count_at = call.argv.size();
      call.argv.emplace_back();
      p.ops->args(p.binding, now, p.op, call.argv);
      call.argv[count_at] = std::to_string(call.argv.size() - count_at - 1);
    }
    return call;
  }

  /// Reads lua/multi.lua's reply {admitted, written, reply_1, ..., reply_m} into `out`.
  bool read_all(std::span<const Part> parts, std::chrono::nanoseconds now, detail::RedisResult& res,
                std::span<Decision> out) const {
    const auto degrade_all = [&] {
      bool all = true;
      for (std::size_t i = 0; i < parts.size(); ++i) {
        out[i] = parts[i].ops->degrade(parts[i].binding, parts[i].key, now, parts[i].op);
        all = all && out[i].allowed;
      }
      return all;
    };
    if (res.failure) return degrade_all();
    const redisReply& reply = *res.reply;
    const auto admitted = detail::reply_int(reply, 0), phase = detail::reply_int(reply, 1);
    if (!admitted || !phase || reply.elements != parts.size() + 2) {
      client_->report({RedisFailureKind::protocol, "unexpected reply from the multi-key script"});
      return degrade_all();
    }
    bool all = true;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      Operation op = parts[i].op;
      if (*phase != 1) op.peek = true;  // nothing written: every reply reads as a peek's
      if (auto d = parts[i].ops->decode(parts[i].binding, *reply.element[i + 2], op)) {
        out[i] = *d;
      } else {
        client_->report(
            {RedisFailureKind::protocol, "unexpected reply for part " + std::to_string(i) + " (" +
                                             std::string(parts[i].ops->script.name) + ")"});
        out[i] = parts[i].ops->degrade(parts[i].binding, parts[i].key, now, op);
      }
      all = all && out[i].allowed;
    }
    return all && *admitted == 1;
  }

  std::shared_ptr<detail::RedisClient> client_;
  std::shared_ptr<detail::HotKeys> hot_;  ///< the over-limit cache, the pre-limit's counter
  /// Per-instance state (local_fallback, pre-limit): a handle, shared by copies; mutable as
  /// the client is (deciding changes what it refers to, never the storage object).
  mutable InMemoryStorage fallback_;
};

static_assert(
    [] {
      bool all = true;
      Algorithms::for_each([&]<class M>() { all = all && StorageFor<RedisStorage, M>; });
      return all;
    }(),
    "RedisStorage must hold every algorithm of the registry");

}  // namespace ratelimit
