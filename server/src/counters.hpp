#pragma once
/// @file counters.hpp
/// Where the server keeps its counters: one interface, so that the service decides the same
/// way on every storage.

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
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
};

/// A storage of counters: the Go window's (see go_window.hpp) and the library's algorithms'.
/// Thread safety: `count` is safe from many threads.
class Counters {
 public:
  virtual ~Counters() = default;
  /// Applies each hit in order (a later hit on the same counter sees the earlier ones), at
  /// `now` (nanoseconds since the Unix epoch). Throws `std::runtime_error` when the storage
  /// fails.
  virtual std::vector<Decision> count(std::span<const Hit> hits, std::chrono::nanoseconds now) = 0;
  /// `count` without blocking: `done(decisions, nullptr)` or `done({}, error)` is called
  /// exactly once, on the storage's I/O thread or here before this returns. Hits on one
  /// counter are applied in some order (the Redis storage sends them at once). By default,
  /// `count` here.
  virtual void count_async(std::vector<Hit> hits, std::chrono::nanoseconds now,
                           std::function<void(std::vector<Decision>, std::exception_ptr)> done) {
    std::vector<Decision> ds;
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
};

/// Counters in this process (`InMemoryStorage`), bounded by its sweeps of expired windows.
std::shared_ptr<Counters> make_memory_counters();

/// Counters on Redis (`RedisStorage` with `options`): one script call per hit. A hit the storage's
/// failure policy decided (Redis unreachable) throws `std::runtime_error` instead. Only in a
/// build with the Redis storage (hiredis and OpenSSL found). `listener`, when set, hears of
/// the storage's errors, breaker changes and round trips (`RedisStorage::attach_listener`).
std::shared_ptr<Counters> make_redis_counters(RedisOptions options,
                                              std::shared_ptr<Listener> listener = nullptr);

/// The same on a Redis Cluster (`RedisClusterStorage`).
std::shared_ptr<Counters> make_redis_cluster_counters(RedisClusterOptions options,
                                                      std::shared_ptr<Listener> listener = nullptr);

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
