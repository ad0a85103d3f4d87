#pragma once
/// @file counters.hpp
/// Where the server keeps its counters: one interface, so that the service decides the same
/// way on every storage.

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <ratelimit/core/decision.hpp>

namespace ratelimit {
struct RedisOptions;         // redis/options.hpp
struct RedisClusterOptions;  // redis/cluster.hpp
class Listener;              // core/listener.hpp
}  // namespace ratelimit

namespace ratelimit::server {

/// One descriptor's hits on one counter: the limit's identity (stable across reloads while the
/// limit's path and unit stay), the counter within it, the limit and its window, the hits
/// (0 reads without counting) and the algorithm.
struct Hit {
  std::string limit_id;
  std::string key;
  std::int64_t limit = 0;     ///< requests per window, 0 to 2^32 - 1
  std::int64_t window_s = 1;  ///< the window (for a library algorithm: the rate's period), >= 1
  std::int64_t hits = 1;
  /// A name of `ServerAlgorithms` (the rule's `algorithm`, pointing at the model's static
  /// name); empty: the Go window (go_window.hpp), whose parameters are limit and window_s. A
  /// library algorithm gets `M::from_rate(limit per window_s)`.
  std::string_view algorithm;
  /// The Go window only: count a hit over the limit too (the reference), or only admitted
  /// ones (the all-or-nothing option).
  bool count_denied = true;
  /// The Go window only: the reference's counter key (src/limiter/cache_key.go) without
  /// CACHE_KEY_PREFIX and the window's start: the domain, '_', then each request entry's key
  /// '_' value '_' (a `share_threshold` wildcard's pattern for its value). `count` and
  /// `count_async` keep such a counter under prefix + go_key + the window's start in Unix
  /// seconds, as the reference does, so a limit override of the same unit shares the rule's
  /// count, and the Go service's replicas share it too. Empty, or in `count_all`: the counter
  /// is `limit_id` and `key`, the server's own (the all-or-nothing extension's).
  std::string go_key;
  /// With 0 hits: a read before counting (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT), which the
  /// reference makes with GET: it neither creates the key nor renews its expiry.
  bool get = false;
};

/// What one hit came to: its decision and, beside it, the counter's count when the storage
/// knows it. The Go window's count is the count the hit brought its counter to, admitted or
/// not (INCRBY's reply on Redis, the value read plus the hits on memcache), or for a read the
/// count read: the reference's stats split a call's hits between within, near and over limit
/// by it (src/limiter/base_limiter.go), where `Decision::remaining` stops at 0. A library
/// algorithm has no such count (nullopt). Thread safety: a plain value.
struct HitResult {
  Decision decision{};
  std::optional<std::int64_t> count;
};

/// How the Go window's counters with a `Hit::go_key` are kept, as the reference keeps them.
struct GoKeyOptions {
  std::string prefix;  ///< CACHE_KEY_PREFIX, before every key
  /// EXPIRATION_JITTER_MAX_SECONDS: a key expires after its window plus a random [0, this)
  /// seconds (0: no jitter); >= 0.
  std::int64_t jitter_max_s = 300;
};

/// A storage of counters: the Go window's (see go_window.hpp) and the library's algorithms'.
/// Thread safety: `count` is safe from many threads.
class Counters {
 public:
  virtual ~Counters() = default;
  /// Applies each hit in order (a later hit on the same counter sees the earlier ones), at
  /// `now` (nanoseconds since the Unix epoch): one result per hit (its decision, and the
  /// Go window's count beside it). Throws `std::runtime_error` when the storage fails.
  virtual std::vector<HitResult> count(std::span<const Hit> hits, std::chrono::nanoseconds now) = 0;
  /// `count` without blocking: `done(results, nullptr)` or `done({}, error)` is called
  /// exactly once, on the storage's I/O thread or here before this returns. Hits on one
  /// counter are applied in some order (the Redis storage sends them at once). By default,
  /// `count` here.
  virtual void count_async(std::vector<Hit> hits, std::chrono::nanoseconds now,
                           std::function<void(std::vector<HitResult>, std::exception_ptr)> done) {
    std::vector<HitResult> ds;
    try {
      ds = count(hits, now);
    } catch (...) {
      return done({}, std::current_exception());
    }
    done(std::move(ds), nullptr);
  }

  /// All or nothing: every hit is admitted and counted, or nothing changes anywhere (the
  /// storage's `decide_all`, as the library's rule sets decide). Returns each hit's decision
  /// (when not all admitted, what each would have been). Hits name distinct counters. Throws
  /// `std::runtime_error` when the storage fails.
  virtual std::vector<Decision> count_all(std::span<const Hit> hits,
                                          std::chrono::nanoseconds now) = 0;
  /// `count_all` without blocking, called back as `count_async`. By default, `count_all` here.
  virtual void count_all_async(
      std::vector<Hit> hits, std::chrono::nanoseconds now,
      std::function<void(std::vector<Decision>, std::exception_ptr)> done) {
    std::vector<Decision> ds;
    try {
      ds = count_all(hits, now);
    } catch (...) {
      return done({}, std::current_exception());
    }
    done(std::move(ds), nullptr);
  }

 protected:
  /// `count` for a storage whose own path is `count_async`: starts it and waits for its
  /// answer (or rethrows its error). Never on the storage's I/O thread, which would wait on
  /// itself.
  std::vector<HitResult> count_and_wait(std::span<const Hit> hits, std::chrono::nanoseconds now) {
    // Shared: the completion may still be inside set_value when the waiting thread returns.
    auto promise = std::make_shared<std::promise<std::vector<HitResult>>>();
    auto future = promise->get_future();
    count_async(std::vector<Hit>(hits.begin(), hits.end()), now,
                [promise](std::vector<HitResult> ds, std::exception_ptr err) {
                  if (err)
                    promise->set_exception(std::move(err));
                  else
                    promise->set_value(std::move(ds));
                });
    return future.get();
  }
};

/// Counters in this process (`InMemoryStorage`), bounded by its sweeps of expired windows.
/// Hits with a `go_key` are counted under it (prefixed), as on every storage.
std::shared_ptr<Counters> make_memory_counters(GoKeyOptions go = {});

/// Where the reference's per-second limits go (REDIS_PERSECOND=true): a Redis of their own.
/// A hit of a one-second window with a `go_key` is counted there; the others stay on the main
/// Redis. Exactly one of `redis` (a single Redis, or Sentinel's primary) and `cluster` is set.
struct PerSecondRedis {
  std::shared_ptr<RedisOptions> redis;
  std::shared_ptr<RedisClusterOptions> cluster;
};

/// Counters on Redis (`RedisStorage` with `options`). A hit with a `go_key` outside `count_all`
/// is the reference's INCRBY and EXPIRE of prefix + go_key + window start (a `get` hit: GET),
/// pipelined with the other hits of the moment; any other hit is one script call (the Go
/// window's, server/lua/go_window.lua, under the server's own keys, or the library
/// algorithm's). A hit Redis did not answer (the storage's failure policy decided it) throws
/// `std::runtime_error` instead. Only in a build with the Redis storage (hiredis and OpenSSL
/// found). `listener`, when set, hears of the storage's errors, breaker changes and round trips
/// (`RedisStorage::attach_listener`). `per_second`: see `PerSecondRedis`.
std::shared_ptr<Counters> make_redis_counters(RedisOptions options,
                                              std::shared_ptr<Listener> listener = nullptr,
                                              GoKeyOptions go = {}, PerSecondRedis per_second = {});

/// The same on a Redis Cluster (`RedisClusterStorage`): each Go key on its slot's node, as
/// the reference's cluster client sends it (CRC16 of the key's hash tag).
std::shared_ptr<Counters> make_redis_cluster_counters(RedisClusterOptions options,
                                                      std::shared_ptr<Listener> listener = nullptr,
                                                      GoKeyOptions go = {},
                                                      PerSecondRedis per_second = {});

/// Where the reference's memcache backend (BACKEND_TYPE=memcache) keeps its counters.
struct MemcacheOptions {
  /// MEMCACHE_HOST_PORT: "host:port" of each server, in order: a key goes to server
  /// CRC-32 (IEEE) of the key modulo their number, as the reference's client picks it.
  std::vector<std::string> servers;
  /// MEMCACHE_MAX_IDLE_CONNS (>= 0): the reference's idle connections kept per server. Checked
  /// only: this storage keeps one pipelined connection per server, busy or idle.
  int max_idle_conns = 2;
  /// Each request's read and write budget (the reference's client: 500 ms).
  std::chrono::milliseconds timeout{500};
};

/// Counters on memcached, as the reference's memcache backend (src/memcached/cache_impl.go):
/// the Go window only (a rule naming an `algorithm`, or `count_all`, throws
/// `std::runtime_error`: memcached has no atomic read-modify-write of several values). A call's
/// keys are read together (one `get` per server), each decided on the value read plus its hits,
/// then each is counted: `incr`, on a miss `add` with the window plus jitter as expiry, and
/// `incr` again when another writer added it first. The `get` and the `incr`s go out in one
/// write (memcached answers them in order, so the values read are those before the call's
/// hits, as the reference reads them). The reference answers before it counts; here the answer
/// comes once the `incr`s are answered (in the same round trip), so a caller's next decision
/// sees its own hits. A memcached error (or a request unanswered after `timeout`, or more than
/// 65,536 calls in flight) counts as 0 and never fails a call, as in the reference. One I/O
/// thread per storage keeps one connection per server and writes every call of the moment
/// together on it; `count_async`'s `done` runs on that thread, never the caller's. Throws
/// `std::invalid_argument` naming MEMCACHE_HOST_PORT for a server that is not host:port.
std::shared_ptr<Counters> make_memcache_counters(MemcacheOptions options, GoKeyOptions go = {});

/// Refuses the two ways of counting a call's descriptors together: all or nothing
/// (RATELIMIT_SERVER_ALL_OR_NOTHING) counts none of them when one would go over, the reference's
/// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT counts exactly those that would. Throws
/// std::invalid_argument naming both when both are on.
inline void check_counting_modes(bool all_or_nothing, bool stop_increment_when_over) {
  if (all_or_nothing && stop_increment_when_over)
    throw std::invalid_argument(
        "RATELIMIT_SERVER_ALL_OR_NOTHING = true and STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT = "
        "true: choose one (all or nothing counts none of a call's descriptors when one would go "
        "over its limit; the other counts only those that would)");
}

}  // namespace ratelimit::server
