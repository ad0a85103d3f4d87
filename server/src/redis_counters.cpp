#include <atomic>
#include <charconv>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include <ratelimit/redis.hpp>

#include "any_binding.hpp"
#include "counters.hpp"
#include "go_keys.hpp"

namespace ratelimit::server {
namespace {

/// A `RedisStorage` on a client made here, so that the Go keys' plain commands and the
/// scripts share its connections and I/O thread (a cluster client routes both by slot).
class ClientStorage : public RedisStorage {
 public:
  explicit ClientStorage(std::shared_ptr<ratelimit::detail::RedisClient> client)
      : RedisStorage(std::move(client)) {}
};

/// A client for one Redis, or for the primary Sentinel names (as RedisStorage makes it).
std::shared_ptr<ratelimit::detail::RedisClient> client_of(RedisOptions o) {
  if (o.sentinel.sentinels.empty())
    return std::make_shared<ratelimit::detail::RedisClient>(std::move(o));
  return std::make_shared<ratelimit::detail::RedisSentinelClient>(std::move(o));
}

/// A client for a Redis Cluster (as RedisClusterStorage makes it).
std::shared_ptr<ratelimit::detail::RedisClient> client_of(RedisClusterOptions o) {
  if (o.max_redirects < 1 || o.max_redirects > 100)
    ratelimit::detail::invalid("max_redirects", o.max_redirects, "must be in [1, 100]");
  std::vector<ratelimit::detail::RedisNode> seeds;
  for (std::size_t i = 0; i < o.seeds.size(); ++i)
    seeds.push_back(
        ratelimit::detail::parse_redis_node(o.seeds[i], "seeds[" + std::to_string(i) + "]"));
  return std::make_shared<ratelimit::detail::RedisClusterClient>(
      std::move(seeds), std::move(o.redis), o.max_redirects);
}

std::shared_ptr<ratelimit::detail::RedisClient> client_of(const PerSecondRedis& p) {
  if (p.cluster) return client_of(*p.cluster);
  if (p.redis) return client_of(*p.redis);
  return nullptr;
}

constexpr std::string_view unanswered =
    "Redis did not answer (its errors are counted in ratelimit_redis_errors_total on /metrics)";

/// Counters on Redis: a Go-window hit with a Go key as the reference sends it (INCRBY and
/// EXPIRE, or GET: see `make_redis_counters`), every other hit as one script call
/// (server/lua/go_window.lua, or the library algorithm's); on a cluster each key lives on its
/// slot's node. A decision that the storage's failure policy had to make (Redis unreachable)
/// is an error, as the reference returns Redis errors to the caller.
class RedisCounters final : public Counters {
 public:
  RedisCounters(std::shared_ptr<ratelimit::detail::RedisClient> client,
                std::shared_ptr<Listener> listener, GoKeyOptions go,
                std::shared_ptr<ratelimit::detail::RedisClient> per_second)
      : client_(client),
        storage_(std::move(client)),
        per_second_(std::move(per_second)),
        go_(std::move(go)) {
    if (!listener) return;
    // The per-second Redis's round trips, errors and breakers are heard as the main one's.
    if (per_second_) per_second_->observers.attach(listener, {});
    storage_.attach_listener(std::move(listener));
  }

  /// `count_async` and a wait: the reference's pipeline is the same either way.
  std::vector<HitResult> count(std::span<const Hit> hits, std::chrono::nanoseconds now) override {
    return count_and_wait(hits, now);
  }

  std::vector<Decision> count_all(std::span<const Hit> hits,
                                  std::chrono::nanoseconds now) override {
    std::vector<Binding> bindings;
    for (const Hit& h : hits) bindings.push_back(binding_of(h));
    std::vector<RedisStorage::Part> parts;
    for (std::size_t i = 0; i < hits.size(); ++i)
      parts.push_back(bindings[i].part(hits[i].key, detail::operation_of(hits[i])));
    std::vector<Decision> out(hits.size());
    storage_.decide_all(parts, now, out);
    throw_if_degraded(out);
    return out;
  }

  /// One script call for every hit; `done` runs on the storage's I/O thread when it answers.
  void count_all_async(
      std::vector<Hit> hits, std::chrono::nanoseconds now,
      std::function<void(std::vector<Decision>, std::exception_ptr)> done) override {
    // The parts point at the bindings and keys: both live in `held` until the answer.
    struct Held {
      std::vector<Hit> hits;
      std::vector<Binding> bindings;
    };
    auto held = std::make_shared<Held>();
    held->hits = std::move(hits);
    std::vector<RedisStorage::Part> parts;
    try {
      for (const Hit& h : held->hits) held->bindings.push_back(binding_of(h));
      for (std::size_t i = 0; i < held->hits.size(); ++i)
        parts.push_back(
            held->bindings[i].part(held->hits[i].key, detail::operation_of(held->hits[i])));
      storage_.decide_all_async(parts, now,
                                [held, done](std::vector<Decision>&& out, bool) mutable {
                                  try {
                                    throw_if_degraded(out);
                                  } catch (...) {
                                    return done({}, std::current_exception());
                                  }
                                  done(std::move(out), nullptr);
                                });
    } catch (...) {
      return done({}, std::current_exception());
    }
  }

  /// Every hit sent at once: the Go keys' commands as one pipeline per Redis (the main one and
  /// the per-second one), each other hit as its script call; `done` runs on an I/O thread when
  /// the last answers.
  void count_async(std::vector<Hit> hits, std::chrono::nanoseconds now,
                   std::function<void(std::vector<HitResult>, std::exception_ptr)> done) override {
    struct Gather {
      std::vector<Hit> hits;
      std::vector<Binding> bindings;
      std::vector<HitResult> out;
      std::atomic<std::size_t> left{0};
      std::atomic<bool> failed{false};
      std::mutex mutex;  // guards `error`
      std::string error;
      std::function<void(std::vector<HitResult>, std::exception_ptr)> done;

      void fail(std::string what) {
        {
          const std::lock_guard lock(mutex);
          if (error.empty()) error = std::move(what);
        }
        failed = true;
      }
      void one_done() {
        if (left.fetch_sub(1) != 1) return;
        if (failed) return done({}, std::make_exception_ptr(std::runtime_error(error)));
        done(std::move(out), nullptr);
      }
    };
    auto g = std::make_shared<Gather>();
    g->hits = std::move(hits);
    g->out.resize(g->hits.size());
    g->done = std::move(done);
    // The Go keys' commands, per Redis: the calls, and per hit the call whose reply counts.
    struct Pipeline {
      std::vector<ratelimit::detail::RedisCall> calls;
      std::vector<std::pair<std::size_t, std::size_t>> replies;  // (hit, call)
    };
    Pipeline main, per_second;
    std::vector<std::size_t> scripted;
    try {
      const std::int64_t now_s = detail::unix_seconds(now);
      for (std::size_t i = 0; i < g->hits.size(); ++i) {
        const Hit& h = g->hits[i];
        if (!detail::uses_go_key(h)) {
          scripted.push_back(i);
          continue;
        }
        // The reference sends a per-second limit's commands to its own Redis when it has one.
        Pipeline& p = per_second_ && h.window_s == 1 ? per_second : main;
        std::string key = detail::go_counter_key(go_, h, now_s);
        p.replies.emplace_back(i, p.calls.size());
        if (h.get && h.hits <= 0) {
          p.calls.push_back({nullptr, {key}, {"GET", key}});
          continue;
        }
        const std::string expiry = std::to_string(detail::go_expiry_s(go_, h.window_s));
        p.calls.push_back(
            {nullptr, {key}, {"INCRBY", key, std::to_string(h.hits > 0 ? h.hits : 0)}});
        p.calls.push_back({nullptr, {key}, {"EXPIRE", key, expiry}});
      }
      for (const std::size_t i : scripted) g->bindings.push_back(binding_of(g->hits[i]));
    } catch (...) {
      return g->done({}, std::current_exception());
    }
    g->left = scripted.size() + (main.calls.empty() ? 0 : 1) + (per_second.calls.empty() ? 0 : 1);
    if (g->left == 0) return g->done({}, nullptr);
    const auto send = [&](ratelimit::detail::RedisClient& client, Pipeline& p) {
      if (p.calls.empty()) return;
      client.execute_async(std::move(p.calls), client.deadline_from_now(),
                           [g, now, replies = std::move(p.replies)](
                               std::vector<ratelimit::detail::RedisResult>&& results) {
                             read_go_replies(*g, results, replies, now);
                             g->one_done();
                           });
    };
    send(*client_, main);
    if (per_second_) send(*per_second_, per_second);
    for (std::size_t j = 0; j < scripted.size(); ++j) {
      const std::size_t i = scripted[j];
      const Hit& h = g->hits[i];
      // A script's decision only: a library algorithm has no count to report.
      g->bindings[j].apply_async(h.key, now, detail::operation_of(h), [g, i](Decision d) {
        g->out[i].decision = d;
        if (d.degraded) g->fail(std::string(unanswered));
        g->one_done();
      });
    }
  }

 private:
  using Binding = detail::AnyBinding<RedisStorage>;

  /// Decides each Go-key hit on its reply, and reports that count beside: INCRBY's count after
  /// the hits, or GET's count (nil: 0). A failure (Redis unreachable, an error reply, a value that
  /// is not a count) fails the call, as the reference's pipeline error does.
  template <class Gather>
  static void read_go_replies(Gather& g, const std::vector<ratelimit::detail::RedisResult>& results,
                              const std::vector<std::pair<std::size_t, std::size_t>>& replies,
                              std::chrono::nanoseconds now) {
    for (const auto& r : results)
      if (r.failure) return g.fail("Redis: " + r.failure->message);
    for (const auto& [i, c] : replies) {
      const Hit& h = g.hits[i];
      const redisReply* reply = results[c].reply.get();
      std::int64_t count = 0;
      if (reply != nullptr && reply->type == REDIS_REPLY_INTEGER) {
        count = reply->integer;
      } else if (reply != nullptr && reply->type == REDIS_REPLY_STRING) {
        const auto [end, ec] = std::from_chars(reply->str, reply->str + reply->len, count);
        if (ec != std::errc{} || end != reply->str + reply->len)
          return g.fail("Redis: a counter's value is not a count (another writer's key?)");
      } else if (reply == nullptr || reply->type != REDIS_REPLY_NIL) {
        return g.fail("Redis: an unexpected reply to a counter's command");
      }
      const std::int64_t added = h.get || h.hits <= 0 ? 0 : h.hits;
      g.out[i] = detail::go_result(h, count - added, now);
    }
  }

  /// The binding of a limit, kept for the next calls (bounded: cleared when it grows past
  /// 65,536 limits, which only a configuration that many limits or a flood of overrides
  /// with distinct limits reach).
  Binding binding_of(const Hit& h) {
    std::string id = h.limit_id;
    id += '\0';
    id += h.algorithm;
    id += '\0';
    id += std::to_string(h.limit);
    id += '/';
    id += std::to_string(h.window_s);
    if (h.algorithm.empty() && h.hits <= 0) id += 'r';      // the Go window's reading binding
    if (h.algorithm.empty() && !h.count_denied) id += 'a';  // counting only admitted hits
    const std::lock_guard lock(mutex_);
    if (const auto it = bindings_.find(id); it != bindings_.end()) return it->second;
    if (bindings_.size() >= 65'536) bindings_.clear();
    return bindings_.emplace(std::move(id), Binding::make(storage_, h)).first->second;
  }

  /// A decision the failure policy made (Redis did not answer) is the caller's error.
  static void throw_if_degraded(const std::vector<Decision>& out) {
    for (const Decision& d : out)
      if (d.degraded) throw std::runtime_error(std::string(unanswered));
  }

  std::shared_ptr<ratelimit::detail::RedisClient> client_;
  ClientStorage storage_;
  std::shared_ptr<ratelimit::detail::RedisClient> per_second_;
  GoKeyOptions go_;
  std::mutex mutex_;
  std::unordered_map<std::string, Binding> bindings_;
};

}  // namespace

std::shared_ptr<Counters> make_redis_counters(RedisOptions options,
                                              std::shared_ptr<Listener> listener, GoKeyOptions go,
                                              PerSecondRedis per_second) {
  return std::make_shared<RedisCounters>(client_of(std::move(options)), std::move(listener),
                                         std::move(go), client_of(per_second));
}

std::shared_ptr<Counters> make_redis_cluster_counters(RedisClusterOptions options,
                                                      std::shared_ptr<Listener> listener,
                                                      GoKeyOptions go, PerSecondRedis per_second) {
  return std::make_shared<RedisCounters>(client_of(std::move(options)), std::move(listener),
                                         std::move(go), client_of(per_second));
}

}  // namespace ratelimit::server
