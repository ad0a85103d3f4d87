/// @file bench/redis_bench.cpp
/// Shared-state costs: every algorithm on RedisStorage against a throwaway redis-server on
/// loopback (bench/run starts one and passes it as RATELIMIT_BENCH_REDIS=host:port).
///
/// Per algorithm: one connection, synchronous (_OneConnection); a pool of 2, 8 and 32
/// connections used by as many threads (_Pool/threads:N); and the pipelined batch call with 16
/// and 64 keys per round trip (_Batch/16, _Batch/64). Keys are spread uniformly over 100,000
/// client keys, as redis-benchmark spreads its keys with __rand_int__ over -r 100000 in bench/run,
/// so the two are read as ratios. Counters: p50_us, p99_us, p999_us (latency of one call: a
/// decision, or a whole batch round trip), `redis_cpu_us` (redis-server's CPU time, user + sys
/// from INFO cpu, per decision), `degraded` (decisions the failure policy made: must be 0, else
/// Redis was not really measured).

#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

namespace {

using ratelimit::Decision;
using ratelimit::RedisStorage;
using ratelimit::SystemClock;

constexpr int key_space = 100'000;

/// The server from RATELIMIT_BENCH_REDIS ("host:port"); empty host when unset.
ratelimit::RedisOptions options_for(std::size_t pool_size) {
  ratelimit::RedisOptions o;
  const char* env = std::getenv("RATELIMIT_BENCH_REDIS");
  const std::string target = env != nullptr ? env : "";
  const auto colon = target.rfind(':');
  if (colon == std::string::npos) {
    o.host.clear();
    return o;
  }
  o.host = target.substr(0, colon);
  o.port = std::atoi(target.c_str() + colon + 1);
  o.key_prefix = "bench:";
  o.pool_size = pool_size;
  // Generous: a benchmark on a loaded machine must measure Redis, not the failure policy.
  o.command_timeout = std::chrono::milliseconds{2000};
  o.connect_timeout = std::chrono::milliseconds{2000};
  return o;
}

// Generous limits, so that nearly every decision is admitted and writes (the common case).
struct TokenBucketAlg {
  static constexpr const char* name = "TokenBucket";
  template <class C>
  using Limiter = ratelimit::TokenBucket<C, RedisStorage>;
  static constexpr bool reserves = true;  // see ratelimit::Reservable
  static ratelimit::TokenBucketConfig config() { return {1000, ratelimit::per_second(1000)}; }
};
struct LeakyBucketAlg {
  static constexpr const char* name = "LeakyBucket";
  template <class C>
  using Limiter = ratelimit::LeakyBucket<C, RedisStorage>;
  static constexpr bool reserves = true;
  static ratelimit::LeakyBucketConfig config() { return {1000, ratelimit::per_second(1000)}; }
};
struct FixedWindowAlg {
  static constexpr const char* name = "FixedWindow";
  template <class C>
  using Limiter = ratelimit::FixedWindow<C, RedisStorage>;
  static ratelimit::Rate config() { return ratelimit::per_second(1000); }
};
struct SlidingCounterAlg {
  static constexpr const char* name = "SlidingCounter";
  template <class C>
  using Limiter = ratelimit::SlidingCounter<C, RedisStorage>;
  static ratelimit::Rate config() { return ratelimit::per_second(1000); }
};
// Limit 100, as in process.
struct SlidingLogAlg {
  static constexpr const char* name = "SlidingLog";
  template <class C>
  using Limiter = ratelimit::SlidingLog<C, RedisStorage>;
  static ratelimit::Rate config() { return ratelimit::per_second(100); }
};

const std::vector<std::string>& keys() {
  static const std::vector<std::string> k = [] {
    std::vector<std::string> v;
    v.reserve(key_space);
    char buf[32];
    for (int i = 0; i < key_space; ++i) {
      std::snprintf(buf, sizeof buf, "client-%07d", i);
      v.emplace_back(buf);
    }
    return v;
  }();
  return k;
}

/// Latencies of one thread's calls, in ns.
class Latencies {
 public:
  explicit Latencies(std::size_t expected) { ns_.reserve(expected); }
  void add(std::chrono::steady_clock::duration d) {
    ns_.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  }
  /// Sets p50_us, p99_us and p999_us (averaged over threads when several report).
  void report(benchmark::State& state) {
    if (ns_.empty()) return;
    std::sort(ns_.begin(), ns_.end());
    const auto at = [&](double q) {
      const auto i = static_cast<std::size_t>(q * static_cast<double>(ns_.size() - 1));
      return static_cast<double>(ns_[i]) / 1000.0;
    };
    const auto avg = benchmark::Counter::kAvgThreads;
    state.counters["p50_us"] = benchmark::Counter(at(0.50), avg);
    state.counters["p99_us"] = benchmark::Counter(at(0.99), avg);
    state.counters["p999_us"] = benchmark::Counter(at(0.999), avg);
  }

 private:
  std::vector<std::int64_t> ns_;
};

/// redis-server's CPU seconds so far (INFO cpu: used_cpu_user + used_cpu_sys); -1 if unknown.
double redis_cpu_seconds(const ratelimit::RedisOptions& o) {
  redisContext* c = redisConnect(o.host.c_str(), o.port);
  double total = -1;
  if (c != nullptr && c->err == 0) {
    if (auto* r = static_cast<redisReply*>(redisCommand(c, "INFO cpu"))) {
      if (r->type == REDIS_REPLY_STRING) {
        const std::string info(r->str, r->len);
        total = 0;
        for (const char* field : {"used_cpu_user:", "used_cpu_sys:"}) {
          const auto at = info.find(field);
          if (at == std::string::npos) {
            total = -1;
            break;
          }
          total += std::atof(info.c_str() + at + std::char_traits<char>::length(field));
        }
      }
      freeReplyObject(r);
    }
  }
  if (c != nullptr) redisFree(c);
  return total;
}

/// Measures redis-server's CPU per decision between construction and `report` (thread 0 only:
/// the other threads run in the same interval).
class RedisCpu {
 public:
  RedisCpu(const benchmark::State& state, const ratelimit::RedisOptions& o)
      : options_(o),
        active_(state.thread_index() == 0),
        start_(active_ ? redis_cpu_seconds(o) : -1) {}
  void report(benchmark::State& state, double decisions) {
    if (!active_ || start_ < 0 || decisions <= 0) return;
    const double end = redis_cpu_seconds(options_);
    if (end >= 0) state.counters["redis_cpu_us"] = (end - start_) * 1e6 / decisions;
  }

 private:
  ratelimit::RedisOptions options_;
  bool active_;
  double start_;
};

bool have_server(benchmark::State& state, const ratelimit::RedisOptions& o) {
  if (o.host.empty()) {
    state.SkipWithError("set RATELIMIT_BENCH_REDIS=host:port (bench/run does)");
    return false;
  }
  return true;
}

void report_degraded(benchmark::State& state, const RedisStorage& storage,
                     std::uint64_t degraded_before) {
  const auto degraded = storage.stats().degraded_decisions - degraded_before;
  state.counters["degraded"] =
      benchmark::Counter(static_cast<double>(degraded), benchmark::Counter::kAvgThreads);
}

/// One storage per (algorithm, pool size) for the whole run, shared by a benchmark's threads.
template <class A>
RedisStorage& shared_storage(std::size_t pool_size) {
  static std::mutex mutex;
  static std::map<std::size_t, std::unique_ptr<RedisStorage>> storages;
  std::lock_guard lock(mutex);
  auto& s = storages[pool_size];
  if (!s) s = std::make_unique<RedisStorage>(options_for(pool_size));
  return *s;
}

/// What BM_OneConnection asks per round trip: a take (`try_acquire`), a refund of a unit taken
/// at the same instant, a penalty of one unit, a reservation of one unit (the buckets only), or a
/// take carrying the limiter's parameters.
enum class Ask { take, refund, penalty, reserve, with_params };

// One thread, one connection, one synchronous round trip per decision.
template <class A, Ask ask = Ask::take>
void BM_OneConnection(benchmark::State& state) {
  const auto options = options_for(1);
  if (!have_server(state, options)) return;
  RedisStorage& storage = shared_storage<A>(1);
  typename A::template Limiter<SystemClock> limiter(A::config(), storage);
  const auto plan = limiter.params();  // Ask::with_params: the limiter's own, carried per call
  const auto& k = keys();
  std::minstd_rand rng(1);
  Latencies lat(1 << 16);
  const auto degraded_before = storage.stats().degraded_decisions;
  std::int64_t admitted = 0;
  RedisCpu cpu(state, options);
  for (auto _ : state) {
    const auto& key = k[rng() % key_space];
    const auto t0 = std::chrono::steady_clock::now();
    Decision d{};
    if constexpr (ask == Ask::take)
      d = limiter.try_acquire(key);
    else if constexpr (ask == Ask::with_params)
      d = limiter.try_acquire(key, 1, plan);
    else if constexpr (ask == Ask::refund)
      d = limiter.refund(key, 1, limiter.clock().now());
    else if constexpr (ask == Ask::penalty)
      d = limiter.penalty(key, 1);
    else
      d = limiter.reserve(key, 1).decision;
    lat.add(std::chrono::steady_clock::now() - t0);
    admitted += d.allowed;
  }
  cpu.report(state, static_cast<double>(state.iterations()));
  state.SetItemsProcessed(state.iterations());
  state.counters["admitted"] =
      static_cast<double>(admitted) / static_cast<double>(state.iterations());
  lat.report(state);
  report_degraded(state, storage, degraded_before);
}

// N threads sharing one storage whose pool holds N connections.
template <class A>
void BM_Pool(benchmark::State& state) {
  const auto threads = static_cast<std::size_t>(state.threads());
  const auto options = options_for(threads);
  if (!have_server(state, options)) return;
  RedisStorage& storage = shared_storage<A>(threads);
  typename A::template Limiter<SystemClock> limiter(A::config(), storage);
  const auto& k = keys();
  std::minstd_rand rng(static_cast<unsigned>(state.thread_index() + 1));
  Latencies lat(1 << 14);
  const auto degraded_before = storage.stats().degraded_decisions;
  RedisCpu cpu(state, options);
  for (auto _ : state) {
    const auto& key = k[rng() % key_space];
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(limiter.try_acquire(key));
    lat.add(std::chrono::steady_clock::now() - t0);
  }
  cpu.report(state, static_cast<double>(state.iterations()) * static_cast<double>(threads));
  state.SetItemsProcessed(state.iterations());
  lat.report(state);
  if (state.thread_index() == 0) report_degraded(state, storage, degraded_before);
}

// One thread, one connection, `batch` decisions (distinct random keys) per pipelined round trip.
// Latency counters are per round trip; items are decisions.
template <class A>
void BM_Batch(benchmark::State& state) {
  const auto batch_size = static_cast<int>(state.range(0));
  const auto options = options_for(1);
  if (!have_server(state, options)) return;
  RedisStorage& storage = shared_storage<A>(1);
  typename A::template Limiter<SystemClock> limiter(A::config(), storage);
  const auto& k = keys();
  std::minstd_rand rng(7);
  Latencies lat(1 << 14);
  const auto degraded_before = storage.stats().degraded_decisions;
  std::int64_t admitted = 0;
  RedisCpu cpu(state, options);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    ratelimit::RedisBatch batch(storage);
    for (int i = 0; i < batch_size; ++i) batch.add(limiter, k[rng() % key_space]);
    for (const auto& d : batch.run()) admitted += d.allowed;
    lat.add(std::chrono::steady_clock::now() - t0);
  }
  cpu.report(state, static_cast<double>(state.iterations() * batch_size));
  state.SetItemsProcessed(state.iterations() * batch_size);
  state.counters["admitted"] =
      static_cast<double>(admitted) / static_cast<double>(state.iterations() * batch_size);
  lat.report(state);
  report_degraded(state, storage, degraded_before);
}

template <class A>
void register_algorithm() {
  const std::string base = std::string("BM_") + A::name + "_Redis_";
  benchmark::RegisterBenchmark((base + "OneConnection").c_str(), BM_OneConnection<A>)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  // The take carrying the key's parameters (the limiter's own), beside the plain take.
  benchmark::RegisterBenchmark((base + "OneConnectionWithParams").c_str(),
                               BM_OneConnection<A, Ask::with_params>)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  // Refunds and penalties beside the take, each one script call.
  benchmark::RegisterBenchmark((base + "OneConnectionRefund").c_str(),
                               BM_OneConnection<A, Ask::refund>)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark((base + "OneConnectionPenalty").c_str(),
                               BM_OneConnection<A, Ask::penalty>)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  // A reservation beside the take (one script call), on the buckets.
  if constexpr (requires { requires A::reserves; })
    benchmark::RegisterBenchmark((base + "OneConnectionReserve").c_str(),
                                 BM_OneConnection<A, Ask::reserve>)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark((base + "Pool").c_str(), BM_Pool<A>)
      ->Threads(2)
      ->Threads(8)
      ->Threads(32)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark((base + "Batch").c_str(), BM_Batch<A>)
      ->Arg(16)
      ->Arg(64)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
}

}  // namespace

int main(int argc, char** argv) {
  register_algorithm<TokenBucketAlg>();
  register_algorithm<LeakyBucketAlg>();
  register_algorithm<FixedWindowAlg>();
  register_algorithm<SlidingCounterAlg>();
  register_algorithm<SlidingLogAlg>();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
