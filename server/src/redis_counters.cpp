#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include <ratelimit/redis.hpp>

#include "any_binding.hpp"
#include "counters.hpp"

namespace ratelimit::server {
namespace {

/// Counters on Redis (`RedisStorage` or `RedisClusterStorage`): each hit is one script call
/// (server/lua/go_window.lua, or the library algorithm's); on a cluster each counter lives on
/// its key's node.
/// A decision that the storage's failure policy had to make (Redis unreachable) is an error,
/// as the reference returns Redis errors to the caller.
template <class Storage>
class RedisCounters final : public Counters {
 public:
  template <class Options>
  RedisCounters(Options options, std::shared_ptr<Listener> listener)
      : storage_(std::move(options)) {
    if (listener) storage_.attach_listener(std::move(listener));
  }

  std::vector<Decision> count(std::span<const Hit> hits, std::chrono::nanoseconds now) override {
    std::vector<Decision> out;
    out.reserve(hits.size());
    for (const Hit& h : hits) {
      const auto binding = binding_of(h);
      const Decision d = binding.apply(h.key, now, detail::operation_of(h));
      if (d.degraded)
        throw std::runtime_error(
            "Redis did not answer (its errors are counted in ratelimit_redis_errors_total on "
            "/metrics)");
      out.push_back(d);
    }
    return out;
  }

  std::vector<Decision> count_all(std::span<const Hit> hits,
                                  std::chrono::nanoseconds now) override {
    std::vector<Binding> bindings;
    for (const Hit& h : hits) bindings.push_back(binding_of(h));
    std::vector<typename Storage::Part> parts;
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
    std::vector<typename Storage::Part> parts;
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

  /// Every hit sent at once; `done` runs on the storage's I/O thread when the last answers.
  void count_async(std::vector<Hit> hits, std::chrono::nanoseconds now,
                   std::function<void(std::vector<Decision>, std::exception_ptr)> done) override {
    struct Gather {
      std::vector<Hit> hits;
      std::vector<Binding> bindings;
      std::vector<Decision> out;
      std::atomic<std::size_t> left{0};
      std::atomic<bool> failed{false};
      std::function<void(std::vector<Decision>, std::exception_ptr)> done;
    };
    auto g = std::make_shared<Gather>();
    g->hits = std::move(hits);
    g->out.resize(g->hits.size());
    g->left = g->hits.size();
    g->done = std::move(done);
    try {
      for (const Hit& h : g->hits) g->bindings.push_back(binding_of(h));
    } catch (...) {
      return g->done({}, std::current_exception());
    }
    for (std::size_t i = 0; i < g->hits.size(); ++i) {
      const Hit& h = g->hits[i];
      g->bindings[i].apply_async(h.key, now, detail::operation_of(h), [g, i](Decision d) {
        g->out[i] = d;
        if (d.degraded) g->failed = true;
        if (g->left.fetch_sub(1) != 1) return;
        if (g->failed)
          return g->done({}, std::make_exception_ptr(std::runtime_error(
                                 "Redis did not answer (its errors are counted in "
                                 "ratelimit_redis_errors_total on /metrics)")));
        g->done(std::move(g->out), nullptr);
      });
    }
  }

 private:
  using Binding = detail::AnyBinding<Storage>;

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
      if (d.degraded)
        throw std::runtime_error(
            "Redis did not answer (its errors are counted in ratelimit_redis_errors_total on "
            "/metrics)");
  }

  Storage storage_;
  std::mutex mutex_;
  std::unordered_map<std::string, Binding> bindings_;
};

}  // namespace

std::shared_ptr<Counters> make_redis_counters(RedisOptions options,
                                              std::shared_ptr<Listener> listener) {
  return std::make_shared<RedisCounters<RedisStorage>>(std::move(options), std::move(listener));
}

std::shared_ptr<Counters> make_redis_cluster_counters(RedisClusterOptions options,
                                                      std::shared_ptr<Listener> listener) {
  return std::make_shared<RedisCounters<RedisClusterStorage>>(std::move(options),
                                                              std::move(listener));
}

}  // namespace ratelimit::server
