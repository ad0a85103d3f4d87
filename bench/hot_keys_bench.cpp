/// @file bench/hot_keys_bench.cpp
/// The hot-key goals, side by side in one run (`bench/run --hot-keys`):
///
/// 1. Redis commands per denied request under a one-key flood (goal: below 0.01). Four threads
///    flood one key of a token bucket (capacity 100, 100 per second, SteadyClock) for a fixed
///    wall time, once with each lever: none (the reference: every request is a script), the
///    over-limit cache, the pre-limit (fallback_divisor 1: the per-instance limit is the shared
///    one). Redis's commands are counted by INFO commandstats on the bench's own server (the sum
///    of every command's calls, less the INFO calls themselves).
/// 2. The denied path in process (goal: at most 1.5x an in-memory decision): one thread, one key
///    already over its limit, ns per decision of a cache hit on the Redis storage beside the same
///    denied decision on InMemoryStorage, same clock; 5 interleaved rounds, median and range.
///
///   hot_keys_bench --port P [--quick]     writes markdown to stdout
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

using namespace std::chrono_literals;
using ratelimit::RedisOptions;
using ratelimit::RedisStorage;
using ratelimit::SteadyClock;
using ratelimit::TokenBucket;
using ratelimit::TokenBucketConfig;

namespace {

int port = 0;
bool quick = false;

/// The sum of every command's calls in INFO commandstats, less INFO's own.
std::int64_t redis_commands() {
  redisContext* c = redisConnect("127.0.0.1", port);
  if (c == nullptr || c->err) {
    std::fprintf(stderr, "hot_keys_bench: cannot connect to 127.0.0.1:%d\n", port);
    std::exit(1);
  }
  auto* r = static_cast<redisReply*>(redisCommand(c, "INFO commandstats"));
  std::int64_t total = 0;
  if (r != nullptr && r->type == REDIS_REPLY_STRING) {
    const std::string text(r->str, r->len);
    std::size_t at = 0;
    while ((at = text.find("cmdstat_", at)) != std::string::npos) {
      const auto colon = text.find(':', at);
      const std::string name = text.substr(at + 8, colon - at - 8);
      const auto calls = text.find("calls=", colon);
      const std::int64_t n = std::strtoll(text.c_str() + calls + 6, nullptr, 10);
      if (name != "info") total += n;
      at = colon;
    }
  }
  freeReplyObject(r);
  redisFree(c);
  return total;
}

RedisOptions options(const std::string& tag) {
  RedisOptions o;
  o.port = port;
  o.key_prefix = "hotkeys-bench:" + tag + ":";
  o.command_timeout = 1s;
  return o;
}

struct Flood {
  std::int64_t requests = 0, denied = 0, commands = 0, degraded = 0;
};

/// Four threads flood one key for `seconds` of wall time.
Flood flood(const RedisOptions& o, std::chrono::milliseconds length) {
  RedisStorage storage(o);
  TokenBucket<SteadyClock, RedisStorage> tb(TokenBucketConfig{100, ratelimit::per_second(100)},
                                            storage);
  (void)tb.try_acquire("warm-up");  // connect before counting
  const std::int64_t before = redis_commands();
  std::atomic<std::int64_t> requests{0}, denied{0}, degraded{0};
  const auto until = std::chrono::steady_clock::now() + length;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      std::int64_t n = 0, no = 0, deg = 0;
      while (std::chrono::steady_clock::now() < until) {
        const auto d = tb.try_acquire("hot");
        ++n;
        no += d.allowed ? 0 : 1;
        deg += d.degraded ? 1 : 0;
      }
      requests += n;
      denied += no;
      degraded += deg;
    });
  for (auto& th : threads) th.join();
  Flood f;
  f.commands = redis_commands() - before;
  f.requests = requests.load();
  f.denied = denied.load();
  f.degraded = degraded.load();
  return f;
}

/// ns per decision of `n` denied decisions by `decide`.
template <class F>
double ns_per(F&& decide, int n) {
  const auto t0 = std::chrono::steady_clock::now();
  int admitted = 0;
  for (int i = 0; i < n; ++i) admitted += decide() ? 1 : 0;
  const auto t1 = std::chrono::steady_clock::now();
  if (admitted != 0) {
    std::fprintf(stderr, "hot_keys_bench: %d decisions admitted on a spent key\n", admitted);
    std::exit(1);
  }
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / n;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--port") == 0 && i + 1 < argc)
      port = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--quick") == 0)
      quick = true;
  }
  if (port <= 0) {
    std::fprintf(stderr, "usage: hot_keys_bench --port P [--quick]\n");
    return 2;
  }
  const auto length = quick ? 300ms : 2s;

  // --- goal 1: Redis commands per denied request -----------------------------------------------
  RedisOptions none = options("none"), cache = options("cache"), pre = options("pre");
  cache.over_limit_cache.enabled = true;
  pre.pre_limit = true;
  const Flood f_none = flood(none, length), f_cache = flood(cache, length),
              f_pre = flood(pre, length);
  std::printf("## Hot keys\n\n");
  std::printf("### Goal 1: Redis commands per denied request, one-key flood\n\n");
  std::printf(
      "4 threads flood one key (token bucket, capacity 100, 100/s, SteadyClock) for %.1f s "
      "each; commands counted by INFO commandstats on the bench's own redis-server.\n\n",
      std::chrono::duration<double>(length).count());
  std::printf("| lever | requests | denied | Redis commands | commands per denied | degraded |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
  const auto row = [](const char* name, const Flood& f) {
    std::printf(
        "| %s | %lld | %lld | %lld | %.5f | %lld |\n", name, static_cast<long long>(f.requests),
        static_cast<long long>(f.denied), static_cast<long long>(f.commands),
        f.denied > 0 ? static_cast<double>(f.commands) / static_cast<double>(f.denied) : 0.0,
        static_cast<long long>(f.degraded));
  };
  row("none (reference)", f_none);
  row("over-limit cache", f_cache);
  row("pre-limit (divisor 1)", f_pre);
  const double ratio = static_cast<double>(f_cache.commands) / static_cast<double>(f_cache.denied);
  std::printf("\nGoal 1 (over-limit cache, below 0.01): **%.5f, %s**.\n\n", ratio,
              ratio < 0.01 ? "met" : "missed");

  // --- goal 2: the denied path in process ------------------------------------------------------
  RedisStorage cached_storage(cache);
  TokenBucket<SteadyClock, RedisStorage> on_redis(TokenBucketConfig{1, ratelimit::per_hour(1)},
                                                  cached_storage, {}, "denied");
  TokenBucket<SteadyClock> in_memory(TokenBucketConfig{1, ratelimit::per_hour(1)});
  (void)on_redis.try_acquire("k");  // spends the one token: the key is over for an hour
  (void)in_memory.try_acquire("k");
  const int n = quick ? 200'000 : 2'000'000, rounds = quick ? 2 : 5;
  std::vector<double> cached_ns, memory_ns;
  for (int r = 0; r < rounds; ++r) {
    cached_ns.push_back(ns_per([&] { return on_redis.try_acquire("k").allowed; }, n));
    memory_ns.push_back(ns_per([&] { return in_memory.try_acquire("k").allowed; }, n));
  }
  const double c = median(cached_ns), m = median(memory_ns);
  std::printf("### Goal 2: the denied path in process\n\n");
  std::printf(
      "One thread, one key over its limit, %d decisions per figure, %d interleaved rounds; "
      "median [min-max] ns per decision.\n\n",
      n, rounds);
  std::printf("| decision | ns |\n| --- | ---: |\n");
  std::printf("| over-limit cache hit (RedisStorage) | %.1f [%.1f-%.1f] |\n", c,
              *std::min_element(cached_ns.begin(), cached_ns.end()),
              *std::max_element(cached_ns.begin(), cached_ns.end()));
  std::printf("| in-memory decision (InMemoryStorage, reference) | %.1f [%.1f-%.1f] |\n", m,
              *std::min_element(memory_ns.begin(), memory_ns.end()),
              *std::max_element(memory_ns.begin(), memory_ns.end()));
  std::printf(
      "\nGoal 2 (at most 1.5x): **%.2fx, %s**. Redis scripts during the rounds: %llu "
      "(the cache answered %llu).\n",
      c / m, c / m <= 1.5 ? "met" : "missed",
      static_cast<unsigned long long>(cached_storage.stats().decisions),
      static_cast<unsigned long long>(cached_storage.stats().cache_hits));
  return 0;
}
