/// @file bench/pipelining_bench.cpp
/// The pipelining goals: the library's token bucket on a RedisStorage in the three shapes of work
/// the goals compare with redis-benchmark, at equal work in flight. `bench/run --pipelining`
/// runs it in rounds interleaved with redis-benchmark on the same server; one run per process,
/// one JSON object on stdout:
///
///   pipelining_bench --port P --mode blocking --threads T --decisions N
///       T threads, each looping a blocking try_acquire (T = 32: goal 1; T = 1: goal 3).
///   pipelining_bench --port P --mode window --window W --decisions N
///       One thread keeps exactly W non-blocking decisions in flight: it submits the next one as
///       soon as a completion frees a slot, waiting while W are out (goal 2, W = 64).
///   pipelining_bench --port P --mode chain --window W --decisions N
///       The same W in flight, each completion submitting the next one itself, on the I/O
///       thread (goal 2 without the caller's hand-off).
///   pipelining_bench --port P --mode ping|ping-handoff|evalsha --decisions N
///       No library (see run_direct): PING round trips made by the calling thread, or through a
///       thread as the I/O thread makes them (what the two thread hand-offs of a blocking
///       decision cost alone); the captured EVALSHA one at a time on plain hiredis (goal 3's
///       reference to the nanosecond).
///   pipelining_bench --port P --capture
///       The EVALSHA command the library sends, one argument per line (read with MONITOR), for
///       a client key spelled `client-__rand_int__`: redis-benchmark sends it with its own keys.
///
/// Keys: `client-%012d` of a uniform draw over 100,000, the shape `__rand_int__` takes with
/// `-r 100000`, so both sides spread their decisions over the same Redis keys. Limits are
/// generous (1000 per key, 1000/s): every decision is admitted and writes, on both sides.
/// Fields: per_second (decisions / wall time of the measured part), p50_us and p99_us (one
/// decision: the call for blocking, submit to completion otherwise), client_cpu_us (this
/// process's CPU per decision), caller_cpu_us (the deciding threads' own CPU per decision: the
/// rest is the storage's I/O thread), redis_cpu_us (redis-server's user + sys per decision,
/// INFO cpu), degraded (decisions the failure policy made, warm-up included: must be 0).
///
/// Compiles against the headers of the blocking-pool design too (commit fbb2f71, which has no
/// non-blocking calls: its window and chain modes say so and fail).

#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

namespace {

using ratelimit::RedisStorage;
using ratelimit::SystemClock;
using Limiter = ratelimit::TokenBucket<SystemClock, RedisStorage>;
using Clock = std::chrono::steady_clock;

constexpr int key_space = 100'000;

struct Args {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string mode = "blocking";
  int threads = 1;
  int window = 64;
  std::int64_t decisions = 20'000;
  std::int64_t warmup = -1;  // -1: a tenth of the decisions, at least 1,000
  std::size_t pool = 0;      // 0: the library's default
  bool capture = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr
      << "pipelining_bench: " << why
      << "\nusage: pipelining_bench --port P [--host H] [--capture | --mode "
         "blocking|window|chain|ping|ping-handoff|evalsha] [--threads T] [--window W] [--decisions "
         "N] [--warmup N] "
         "[--pool S]\n";
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(std::string(arg) + " needs a value");
      return argv[++i];
    };
    if (arg == "--host") {
      a.host = value();
    } else if (arg == "--port") {
      a.port = std::atoi(value().c_str());
    } else if (arg == "--mode") {
      a.mode = value();
    } else if (arg == "--threads") {
      a.threads = std::atoi(value().c_str());
    } else if (arg == "--window") {
      a.window = std::atoi(value().c_str());
    } else if (arg == "--decisions") {
      a.decisions = std::atoll(value().c_str());
    } else if (arg == "--warmup") {
      a.warmup = std::atoll(value().c_str());
    } else if (arg == "--pool") {
      a.pool = static_cast<std::size_t>(std::atoll(value().c_str()));
    } else if (arg == "--capture") {
      a.capture = true;
    } else {
      usage("unknown argument " + std::string(arg));
    }
  }
  if (a.port <= 0) usage("--port is required");
  if (a.threads < 1 || a.window < 1 || a.decisions < 1) usage("counts must be >= 1");
  if (a.warmup < 0) a.warmup = std::max<std::int64_t>(1'000, a.decisions / 10);
  return a;
}

ratelimit::RedisOptions options_for(const Args& a) {
  ratelimit::RedisOptions o;
  o.host = a.host;
  o.port = a.port;
  o.key_prefix = "bench:";
  if (a.pool != 0) o.pool_size = a.pool;
  // Generous: on a loaded machine the run must measure Redis, not the failure policy.
  o.command_timeout = std::chrono::milliseconds{2000};
  o.connect_timeout = std::chrono::milliseconds{2000};
  return o;
}

Limiter make_limiter(RedisStorage& storage) {
  return Limiter({1000, ratelimit::per_second(1000)}, storage);
}

const std::vector<std::string>& keys() {
  static const std::vector<std::string> k = [] {
    std::vector<std::string> v;
    v.reserve(key_space);
    char buf[32];
    for (int i = 0; i < key_space; ++i) {
      std::snprintf(buf, sizeof buf, "client-%012d", i);
      v.emplace_back(buf);
    }
    return v;
  }();
  return k;
}

double cpu_seconds(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::int64_t ns_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

/// A hiredis connection for INFO and MONITOR, beside the storage's own.
struct Admin {
  explicit Admin(const Args& a) : c(redisConnect(a.host.c_str(), a.port)) {
    if (c == nullptr || c->err != 0) {
      std::cerr << "pipelining_bench: cannot connect to " << a.host << ":" << a.port << "\n";
      std::exit(1);
    }
  }
  ~Admin() { redisFree(c); }
  Admin(const Admin&) = delete;
  Admin& operator=(const Admin&) = delete;

  /// redis-server's CPU seconds so far (INFO cpu: used_cpu_user + used_cpu_sys); -1 if unknown.
  double redis_cpu() {
    auto* r = static_cast<redisReply*>(redisCommand(c, "INFO cpu"));
    double total = -1;
    if (r != nullptr && r->type == REDIS_REPLY_STRING) {
      const std::string info(r->str, r->len);
      total = 0;
      for (const char* field : {"used_cpu_user:", "used_cpu_sys:"}) {
        const auto at = info.find(field);
        if (at == std::string::npos) {
          total = -1;
          break;
        }
        total += std::atof(info.c_str() + at + std::strlen(field));
      }
    }
    if (r != nullptr) freeReplyObject(r);
    return total;
  }

  redisContext* c;
};

/// What one measured run saw.
struct Result {
  std::int64_t decisions = 0;
  double seconds = 0;
  std::vector<std::int64_t> latency_ns;
  std::int64_t admitted = 0;
  double process_cpu = 0;  // seconds
  double caller_cpu = 0;   // seconds
};

/// The value at quantile `q` of sorted `v`, in µs.
double quantile_us(const std::vector<std::int64_t>& v, double q) {
  if (v.empty()) return 0;
  return static_cast<double>(v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))]) /
         1000.0;
}

/// The client keys of a run's decisions, drawn before timing (uniform over the key space).
std::vector<std::uint32_t> draw_keys(std::int64_t n, unsigned seed) {
  std::minstd_rand rng(seed);
  std::vector<std::uint32_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<std::uint32_t>(rng() % key_space);
  return v;
}

/// `threads` threads, each looping a blocking decision until `n` are made among them.
Result run_blocking(Limiter& limiter, int threads, std::int64_t n, unsigned seed) {
  const auto draw = draw_keys(n, seed);
  std::atomic<std::int64_t> next{0};
  std::atomic<int> ready{0};
  std::atomic<int> go{0};
  std::vector<std::vector<std::int64_t>> latency(static_cast<std::size_t>(threads));
  std::vector<Clock::time_point> finished(static_cast<std::size_t>(threads));
  std::vector<double> cpu(static_cast<std::size_t>(threads));
  std::vector<std::int64_t> admitted(static_cast<std::size_t>(threads));
  const auto& k = keys();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const auto me = static_cast<std::size_t>(t);
      pthread_setname_np(pthread_self(), "caller");  // apart from the I/O thread in perf
      latency[me].reserve(static_cast<std::size_t>(n / threads + 1024));
      ready.fetch_add(1);
      ready.notify_one();
      go.wait(0);
      const double cpu0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
      for (std::int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
           i = next.fetch_add(1, std::memory_order_relaxed)) {
        const auto t0 = Clock::now();
        const ratelimit::Decision d = limiter.try_acquire(k[draw[static_cast<std::size_t>(i)]]);
        latency[me].push_back(ns_since(t0));
        admitted[me] += d.allowed ? 1 : 0;
      }
      finished[me] = Clock::now();
      cpu[me] = cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    });
  }
  for (int r = ready.load(); r < threads; r = ready.load()) ready.wait(r);
  const double process0 = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
  const auto start = Clock::now();
  go.store(1);
  go.notify_all();
  for (auto& th : pool) th.join();
  Result res;
  res.process_cpu = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - process0;
  const auto end = *std::max_element(finished.begin(), finished.end());
  res.seconds = std::chrono::duration<double>(end - start).count();
  for (std::size_t t = 0; t < latency.size(); ++t) {
    res.latency_ns.insert(res.latency_ns.end(), latency[t].begin(), latency[t].end());
    res.caller_cpu += cpu[t];
    res.admitted += admitted[t];
  }
  res.decisions = static_cast<std::int64_t>(res.latency_ns.size());
  return res;
}

/// One thread keeps `window` non-blocking decisions in flight until `n` are made: the caller
/// submits each as a completion frees a slot (window mode), or each completion submits the next
/// itself, on the I/O thread (chain mode).
template <class L>
Result run_async(L& limiter, bool chain, int window, std::int64_t n, unsigned seed) {
  if constexpr (!requires(L & l) {
                  l.try_acquire_async(std::string_view{}, 1, [](ratelimit::Decision) {});
                }) {
    (void)limiter, (void)chain, (void)window, (void)n, (void)seed;
    std::cerr << "pipelining_bench: these headers have no non-blocking calls\n";
    std::exit(3);
  } else {
    struct Shared {
      L* limiter = nullptr;
      const std::vector<std::string>* keys = nullptr;
      std::vector<std::uint32_t> draw;
      std::vector<std::int64_t> latency;
      std::vector<Clock::time_point> submitted_at;
      std::atomic<std::int64_t> admitted{0};
      int window = 0;
      std::atomic<int> in_flight{0};  // window mode
      // Chain mode: decisions claimed, submitted and completed. A completion submits the next
      // decision before it counts itself, so completed == submitted only once every chain has
      // ended; the caller holds one extra "submitted" until it has started them all.
      std::atomic<std::int64_t> claimed{0}, submitted{0}, completed{0};
      std::int64_t n = 0;

      void submit(std::int64_t i, std::function<void(ratelimit::Decision)> done) {
        const auto at = static_cast<std::size_t>(i);
        submitted_at[at] = Clock::now();
        limiter->try_acquire_async((*keys)[draw[at]], 1, std::move(done));
      }
      void record(std::int64_t i, const ratelimit::Decision& d) {
        const auto at = static_cast<std::size_t>(i);
        latency[at] = ns_since(submitted_at[at]);
        if (d.allowed) admitted.fetch_add(1, std::memory_order_relaxed);
      }
      // A completion's last touch of this object: the caller sees the end (and may wake) before
      // the last completion has left notify, so it waits for this count before returning.
      std::atomic<std::int64_t> exited{0};
      void leave() { exited.fetch_add(1, std::memory_order_release); }
      void wait_exited(std::int64_t count) const {
        while (exited.load(std::memory_order_acquire) != count) std::this_thread::yield();
      }
    };
    Shared s;
    s.limiter = &limiter;
    s.keys = &keys();
    s.draw = draw_keys(n, seed);
    s.latency.assign(static_cast<std::size_t>(n), 0);
    s.submitted_at.resize(static_cast<std::size_t>(n));
    s.window = window;
    s.n = n;

    pthread_setname_np(pthread_self(), "caller");  // apart from the I/O thread in perf
    const double process0 = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
    const double caller0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
    const auto start = Clock::now();
    if (!chain) {
      for (std::int64_t i = 0; i < n; ++i) {
        for (int f = s.in_flight.load(std::memory_order_acquire); f >= window;
             f = s.in_flight.load(std::memory_order_acquire))
          s.in_flight.wait(f, std::memory_order_acquire);
        s.in_flight.fetch_add(1, std::memory_order_relaxed);
        s.submit(i, [sp = &s, i](ratelimit::Decision d) {
          sp->record(i, d);
          // The caller waits only on a full window, or for the last one: no wake-up otherwise.
          const int before = sp->in_flight.fetch_sub(1, std::memory_order_acq_rel);
          if (before == sp->window || before == 1) sp->in_flight.notify_one();
          sp->leave();
        });
      }
      for (int f = s.in_flight.load(std::memory_order_acquire); f > 0;
           f = s.in_flight.load(std::memory_order_acquire))
        s.in_flight.wait(f, std::memory_order_acquire);
      s.wait_exited(n);
    } else {
      struct Chain {
        static void next(Shared* sp) {
          const std::int64_t i = sp->claimed.fetch_add(1, std::memory_order_relaxed);
          if (i >= sp->n) return;
          sp->submitted.fetch_add(1, std::memory_order_acq_rel);
          sp->submit(i, [sp, i](ratelimit::Decision d) {
            sp->record(i, d);
            // A degraded decision may complete inline (circuit open): end the chain rather
            // than recurse; such a run is void anyway (degraded > 0).
            if (!d.degraded) next(sp);
            const auto done = sp->completed.fetch_add(1, std::memory_order_acq_rel) + 1;
            if (done == sp->submitted.load(std::memory_order_acquire)) sp->completed.notify_all();
            sp->leave();
          });
        }
      };
      s.submitted.fetch_add(1, std::memory_order_acq_rel);
      for (int w = 0; w < window; ++w) Chain::next(&s);
      s.submitted.fetch_sub(1, std::memory_order_acq_rel);
      for (auto c = s.completed.load(); c != s.submitted.load(); c = s.completed.load())
        s.completed.wait(c);
      s.wait_exited(s.completed.load());
    }
    const auto end = Clock::now();
    Result res;
    res.seconds = std::chrono::duration<double>(end - start).count();
    res.caller_cpu = cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - caller0;
    res.process_cpu = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - process0;
    res.admitted = s.admitted.load();
    res.decisions = chain ? s.completed.load() : n;
    res.latency_ns = std::move(s.latency);
    res.latency_ns.resize(static_cast<std::size_t>(res.decisions));
    return res;
  }
}

/// Prints one run as a JSON object (see the file comment); `redis_cpu_us` < 0: not measured.
void print(const Args& a, std::size_t pool, Result& r, double redis_cpu_us,
           std::uint64_t degraded) {
  std::sort(r.latency_ns.begin(), r.latency_ns.end());
  const double n = static_cast<double>(r.decisions);
  const bool blocking = a.mode == "blocking";
  std::printf(
      "{\"mode\": \"%s\", \"threads\": %d, \"window\": %d, \"pool\": %zu, \"decisions\": %lld, "
      "\"warmup\": %lld, \"seconds\": %.6f, \"per_second\": %.1f, \"p50_us\": %.2f, "
      "\"p99_us\": %.2f, \"client_cpu_us\": %.3f, \"caller_cpu_us\": %.3f, "
      "\"redis_cpu_us\": %.3f, \"admitted\": %.6f, \"degraded\": %llu}\n",
      a.mode.c_str(), blocking ? a.threads : 1,
      a.mode == "window" || a.mode == "chain" ? a.window : 1, pool,
      static_cast<long long>(r.decisions), static_cast<long long>(a.warmup), r.seconds,
      n / r.seconds, quantile_us(r.latency_ns, 0.50), quantile_us(r.latency_ns, 0.99),
      r.process_cpu * 1e6 / n, r.caller_cpu * 1e6 / n, redis_cpu_us,
      static_cast<double>(r.admitted) / n, static_cast<unsigned long long>(degraded));
}

/// Splits a MONITOR line (`<time> [<db> <client>] "ARG" "ARG" ...`, each argument quoted with
/// sdscatrepr's escapes) into its arguments.
std::vector<std::string> monitor_args(std::string_view line) {
  std::vector<std::string> out;
  const auto bracket = line.find(']');
  std::size_t i = bracket == std::string_view::npos ? 0 : bracket + 1;
  while (i < line.size()) {
    if (line[i] != '"') {
      ++i;
      continue;
    }
    std::string arg;
    for (++i; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] != '\\' || i + 1 >= line.size()) {
        arg += line[i];
        continue;
      }
      const char e = line[++i];
      switch (e) {
        case 'n':
          arg += '\n';
          break;
        case 'r':
          arg += '\r';
          break;
        case 't':
          arg += '\t';
          break;
        case 'a':
          arg += '\a';
          break;
        case 'b':
          arg += '\b';
          break;
        case 'x':
          if (i + 2 < line.size()) {
            arg += static_cast<char>(std::stoi(std::string(line.substr(i + 1, 2)), nullptr, 16));
            i += 2;
          }
          break;
        default:
          arg += e;
      }
    }
    ++i;  // the closing quote
    out.push_back(std::move(arg));
  }
  return out;
}

/// The EVALSHA the library sends for the client key `client-__rand_int__`, read with MONITOR
/// (exits on failure).
std::vector<std::string> captured_command(const Args& a) {
  const auto fail = [](const char* why) {
    std::cerr << "pipelining_bench: " << why << "\n";
    std::exit(1);
  };
  RedisStorage storage(options_for(a));
  Limiter limiter = make_limiter(storage);
  const std::string key = "client-__rand_int__";
  (void)limiter.try_acquire(key);  // loads the script (NOSCRIPT, then EVAL): not the call to copy
  Admin monitor(a);
  timeval timeout{5, 0};
  redisSetTimeout(monitor.c, timeout);
  auto* ok = static_cast<redisReply*>(redisCommand(monitor.c, "MONITOR"));
  if (ok == nullptr) fail("MONITOR failed");
  freeReplyObject(ok);
  if (limiter.try_acquire(key).degraded) fail("the decision was degraded");
  for (int lines = 0; lines < 100; ++lines) {
    void* raw = nullptr;
    if (redisGetReply(monitor.c, &raw) != REDIS_OK || raw == nullptr) break;
    auto* r = static_cast<redisReply*>(raw);
    std::vector<std::string> args;
    if (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING)
      args = monitor_args(std::string_view(r->str, r->len));
    freeReplyObject(r);
    if (args.empty() || (args[0] != "EVALSHA" && args[0] != "evalsha")) continue;
    for (const auto& arg : args)
      if (arg.find('\n') != std::string::npos) fail("an argument holds a newline");
    if (args.size() < 4 || args[3].find("__rand_int__") == std::string::npos)
      fail("no client key in the captured command");
    return args;
  }
  fail("MONITOR showed no EVALSHA");
  return {};
}

/// One round trip to Redis per iteration on a plain hiredis connection, no library: `command`
/// (the captured EVALSHA, its `__rand_int__` replaced by the run's keys) or PING when null.
/// Made by the calling thread itself (`via_thread` false: a client doing its own I/O, as
/// redis-benchmark and the blocking-pool design do), or handed to a thread asleep in ppoll
/// through an eventfd, which makes the round trip and wakes the caller waiting on an atomic
/// (`via_thread`: the two hand-offs of a blocking decision through the storage's I/O thread,
/// with nothing else of the library). PING through a thread and directly: what the hand-offs
/// cost one decision at a time. EVALSHA directly: redis-benchmark's `-c 1 -P 1` measured to the
/// nanosecond (redis-benchmark's own latencies come in 8 µs buckets).
Result run_direct(const Args& a, bool via_thread, const std::vector<std::string>* command,
                  std::int64_t n, unsigned seed) {
  Admin conn(a);
  std::vector<std::string> args = command ? *command : std::vector<std::string>{"PING"};
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const auto& arg : args) {
    argv.push_back(arg.data());
    lens.push_back(arg.size());
  }
  const auto marker = command ? args[3].find("__rand_int__") : std::string::npos;
  const auto draw = draw_keys(n, seed);
  std::int64_t next = 0;
  const auto call = [&] {
    if (marker != std::string::npos) {  // the next key, in redis-benchmark's 12-digit form
      char digits[16];
      std::snprintf(digits, sizeof digits, "%012u",
                    static_cast<unsigned>(draw[static_cast<std::size_t>(next++)]));
      std::memcpy(args[3].data() + marker, digits, 12);
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(conn.c, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (r == nullptr || r->type == REDIS_REPLY_ERROR) {
      std::cerr << "pipelining_bench: " << args[0] << " failed\n";
      std::exit(1);
    }
    freeReplyObject(r);
  };
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) {
    std::cerr << "pipelining_bench: eventfd failed\n";
    std::exit(1);
  }
  std::atomic<int> answered{0};
  std::atomic<bool> stop{false};
  std::thread helper([&] {
    pollfd p{fd, POLLIN, 0};
    while (!stop.load(std::memory_order_acquire)) {
      if (::ppoll(&p, 1, nullptr, nullptr) <= 0) continue;
      std::uint64_t count = 0;
      if (::read(fd, &count, sizeof count) != static_cast<ssize_t>(sizeof count)) continue;
      if (stop.load(std::memory_order_acquire)) break;
      call();
      answered.store(1, std::memory_order_release);
      answered.notify_one();
    }
  });
  Result res;
  res.latency_ns.reserve(static_cast<std::size_t>(n));
  const std::uint64_t one = 1;
  const double process0 = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
  const double caller0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
  const auto start = Clock::now();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    if (via_thread) {
      if (::write(fd, &one, sizeof one) != static_cast<ssize_t>(sizeof one)) break;
      answered.wait(0, std::memory_order_acquire);
      answered.store(0, std::memory_order_relaxed);
    } else {
      call();
    }
    res.latency_ns.push_back(ns_since(t0));
  }
  res.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  res.caller_cpu = cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - caller0;
  res.process_cpu = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - process0;
  stop.store(true, std::memory_order_release);
  [[maybe_unused]] const auto w = ::write(fd, &one, sizeof one);
  helper.join();
  ::close(fd);
  res.decisions = static_cast<std::int64_t>(res.latency_ns.size());
  res.admitted = res.decisions;
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  if (a.capture) {
    for (const auto& arg : captured_command(a)) std::cout << arg << "\n";
    return 0;
  }
  if (a.mode == "ping" || a.mode == "ping-handoff" || a.mode == "evalsha") {
    const bool via_thread = a.mode == "ping-handoff";
    std::vector<std::string> command;
    if (a.mode == "evalsha") command = captured_command(a);
    const auto* cmd = command.empty() ? nullptr : &command;
    (void)run_direct(a, via_thread, cmd, a.warmup, 1);
    Result r = run_direct(a, via_thread, cmd, a.decisions, 2);
    print(a, 0, r, -1.0, 0);
    return r.decisions == a.decisions ? 0 : 1;
  }
  const bool blocking = a.mode == "blocking";
  if (!blocking && a.mode != "window" && a.mode != "chain") usage("unknown mode " + a.mode);
  (void)keys();
  RedisStorage storage(options_for(a));
  Limiter limiter = make_limiter(storage);
  Admin admin(a);
  unsigned seed = 1;
  const auto run = [&](std::int64_t n) {
    return blocking ? run_blocking(limiter, a.threads, n, seed++)
                    : run_async(limiter, a.mode == "chain", a.window, n, seed++);
  };
  (void)run(a.warmup);  // connections open, the script is loaded, caches are warm
  const double redis0 = admin.redis_cpu();
  Result r = run(a.decisions);
  const double redis1 = admin.redis_cpu();
  const double n = static_cast<double>(r.decisions);
  print(a, storage.options().pool_size, r,
        redis0 >= 0 && redis1 >= 0 ? (redis1 - redis0) * 1e6 / n : -1.0,
        storage.stats().degraded_decisions);
  return r.decisions == a.decisions ? 0 : 1;
}
