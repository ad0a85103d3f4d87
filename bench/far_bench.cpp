/// @file bench/far_bench.cpp
/// Far from Redis, measured (docs/far.md): three regions on loopback, each with its own
/// redis-server, reaching each other through delay proxies (tests/support/delay_proxy.hpp) of
/// `--delay` ms one way (default 20: a 40 ms round trip between regions). Real time and
/// SystemClock throughout: a simulation, not a test.
///
/// 1. Over-admission: one thread per region floods one key of a fixed window (N per 1 s window)
///    with background exchangers every S; the units admitted per window (all regions) against
///    N + (R - 1) U, U the default ceil(N (S + 2d) / W).
/// 2. A client staying in one region, sending N per W evenly: its admitted share of N (goal
///    >= 95 %).
/// 2b. The regional token bucket (C = 100, r = N per s): a flood from every region, the worst
///    interval's units over one exact bucket's C + r D against the bound (R - 1) U, U the
///    default C + ceil(r (S + 2d)); and a client staying in one region (a burst of C, then r
///    per s evenly): its admitted share.
/// 3. Latency per decision, one thread: a regional decision (one round trip to the region's own
///    Redis) against a plain RedisStorage decision on that same Redis (the local round trip)
///    and on a Redis behind the delay (the far round trip); a leased decision on the far Redis.
///    3b. The leased token bucket: three instances flood one key on the far Redis; the worst
///    interval's admissions beyond one exact bucket against r H, and decisions per round trip.
/// 4. Cold start: a fresh leased storage's first decision on the far Redis with an empty script
///    cache, without and with warm_up().
/// 6. Faults and roaming, each with its bound and the measured worst: a client roaming between
///    regions and a client of an idle region (the regional token bucket, against one exact
///    bucket on the same schedule); a flood over every region through a 500 ms pause of the
///    process, a FLUSHALL and a restart of one region's Redis (the fixed window's units per
///    window against N + (R - 1) U, plus N per lost Redis); a 2 s partition of one region (an
///    honest client of a region still talking to the other: its units in the window inside
///    the partition, goal N - U); leases under a flood (decisions per round trip).
/// 5. Cold start of RedisStorage, on the region's own Redis (local) and on the far one: a fresh
///    process (this program again, `--cold-child`) constructs a storage and makes one decision,
///    with an empty script cache, without and with `RedisOptions::warm_up`; the parent times
///    process start to first decision, the child construction to first decision and the first
///    decision alone, beside the round trip (PING) on the same path. Redis counts the commands
///    (INFO commandstats): one script call per start, no NOSCRIPT.
///
///   far_bench --ports P0,P1,P2 [--delay MS] [--quick]     writes markdown to stdout
///   far_bench --cold-child PORT WARM                      one cold start (used by 5.)
#include <hiredis/hiredis.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>
#include <ratelimit/redis/lease/storage.hpp>
#include <ratelimit/redis/regional/exchanger.hpp>

#include "support/delay_proxy.hpp"

using namespace std::chrono_literals;

namespace {

std::vector<int> ports;
int delay_ms = 20;
bool quick = false;
const std::chrono::milliseconds S{100};
constexpr std::int64_t N = 1000;  // per 1 s window

ratelimit::RedisOptions redis_at(int port, const std::string& prefix) {
  ratelimit::RedisOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.key_prefix = prefix;
  o.command_timeout = 2s;
  o.failure_policy = ratelimit::FailurePolicy::fail_closed;
  return o;
}

/// The three regions' storages, links through `proxies[from][to]`.
/// `default_policy`: the region's own Redis keeps the far storages' default failure policy
/// (local_fallback, one instance per region: fallback_divisor 1), else fail_closed.
/// `link_timeout`: each link's command_timeout (a round over a cut link lasts that long).
std::vector<ratelimit::RegionalStorage> regions(
    const std::vector<std::vector<std::unique_ptr<rltest::DelayProxy>>>& proxies,
    const std::string& prefix, bool default_policy = false,
    std::chrono::milliseconds link_timeout = 2s) {
  std::vector<ratelimit::RegionalStorage> out;
  for (std::size_t i = 0; i < 3; ++i) {
    ratelimit::RegionalOptions o;
    o.region = "r" + std::to_string(i);
    const auto policy = o.local.failure_policy;
    o.local = redis_at(ports[i], prefix);
    if (default_policy) o.local.failure_policy = policy;
    o.exchange_interval = S;
    o.one_way_delay = std::chrono::milliseconds{delay_ms};
    for (std::size_t j = 0; j < 3; ++j)
      if (j != i)
        o.remotes.push_back({"r" + std::to_string(j), redis_at(proxies[i][j]->port(), prefix)});
    for (auto& r : o.remotes) r.redis.command_timeout = link_timeout;
    out.emplace_back(o);
  }
  return out;
}

std::string prefix_of(const char* tag) {
  return std::string("farbench:") + tag + ":" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + ":";
}

std::int64_t now_ns() { return ratelimit::SystemClock{}.now().count(); }

/// Sleeps until the start of the next whole second (windows are aligned to the epoch).
void align_to_window() {
  const std::int64_t t = now_ns();
  std::this_thread::sleep_for(std::chrono::nanoseconds{1'000'000'000 - t % 1'000'000'000});
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

template <class F>
std::vector<double> latencies_us(int n, F decide) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i) {
    const auto a = std::chrono::steady_clock::now();
    decide(i);
    out.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
  }
  return out;
}

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// One command on a fresh hiredis connection to `port`; the reply's text or integer.
std::string command(int port, const std::vector<std::string>& args) {
  redisContext* c = redisConnect("127.0.0.1", port);
  std::string out;
  if (c != nullptr && c->err == 0) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (r != nullptr && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS))
      out.assign(r->str, r->len);
    if (r != nullptr) freeReplyObject(r);
  }
  if (c != nullptr) redisFree(c);
  return out;
}

/// `calls=` of `cmdstat_<name>:` in an INFO commandstats text (0 if absent).
long long calls_of(const std::string& info, const std::string& name) {
  const auto at = info.find("cmdstat_" + name + ":calls=");
  return at == std::string::npos ? 0 : std::atoll(info.c_str() + at + name.size() + 15);
}

/// The round trip on `port` (a PING on an open connection), median of 21, ms.
double ping_ms(int port) {
  redisContext* c = redisConnect("127.0.0.1", port);
  std::vector<double> v;
  for (int i = 0; c != nullptr && c->err == 0 && i < 21; ++i) {
    const auto a = std::chrono::steady_clock::now();
    if (auto* r = redisCommand(c, "PING")) freeReplyObject(r);
    v.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  if (c != nullptr) redisFree(c);
  return pct(v, 0.5);
}

/// Units admitted per window (key: the window's number; the last, partial window left out) by
/// one flooding thread per region on one fixed-window key, for `seconds`; `fault`, if any, runs
/// once on its own thread `at` after the start. The regions keep the default failure policy
/// when `default_policy`, else fail closed (see `regions`).
std::map<std::int64_t, std::int64_t> flood_windows(
    const std::vector<std::vector<std::unique_ptr<rltest::DelayProxy>>>& proxies, const char* tag,
    int seconds, std::chrono::milliseconds at = {}, const std::function<void()>& fault = {},
    bool default_policy = true) {
  auto st = regions(proxies, prefix_of(tag), default_policy);
  std::vector<std::unique_ptr<ratelimit::RegionalExchanger<>>> ex;
  for (auto& s : st) ex.push_back(std::make_unique<ratelimit::RegionalExchanger<>>(s));
  std::mutex m;
  std::map<std::int64_t, std::int64_t> per_window;
  align_to_window();
  const std::int64_t end = now_ns() + seconds * 1'000'000'000LL;
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      auto b = st[r].bind<ratelimit::FixedWindowModel>("api", {N, 1'000'000'000});
      for (std::int64_t t = now_ns(); t < end; t = now_ns())
        if (b.apply("k", std::chrono::nanoseconds{t}, ratelimit::Operation{1}).allowed) {
          const std::lock_guard lock(m);
          ++per_window[t / 1'000'000'000];
        }
    });
  std::thread faulty([&] {
    if (!fault) return;
    std::this_thread::sleep_for(at);
    fault();
  });
  for (auto& t : threads) t.join();
  faulty.join();
  const std::int64_t last = (end - 1) / 1'000'000'000;
  per_window.erase(last);  // a partial window
  return per_window;
}

/// The most units any window admitted.
std::int64_t worst_window(const std::map<std::int64_t, std::int64_t>& per_window) {
  std::int64_t worst = 0;
  for (const auto& [k, n] : per_window) worst = std::max(worst, n);
  return worst;
}

/// Stops this process for `length` (SIGSTOP from a child, SIGCONT after): a GC pause, a frozen VM.
void pause_process(std::chrono::milliseconds length) {
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child == 0) {
    const timespec hold{static_cast<time_t>(length.count() / 1000),
                        static_cast<long>(length.count() % 1000) * 1'000'000};
    ::kill(parent, SIGSTOP);
    ::nanosleep(&hold, nullptr);
    ::kill(parent, SIGCONT);
    ::_exit(0);
  }
  int status = 0;
  if (child > 0) ::waitpid(child, &status, 0);
}

/// Restarts the redis-server on `port` (scripts/redis.sh's, no persistence): SHUTDOWN NOSAVE,
/// then the same command line again; returns once it answers PING.
void restart_redis(int port) {
  (void)command(port, {"SHUTDOWN", "NOSAVE"});
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/ratelimit-redis-" +
                          std::to_string(port);
  const std::string p = std::to_string(port);
  std::vector<std::string> args = {"redis-server",
                                   "--port",
                                   p,
                                   "--bind",
                                   "127.0.0.1",
                                   "--save",
                                   "",
                                   "--appendonly",
                                   "no",
                                   "--dir",
                                   dir,
                                   "--daemonize",
                                   "yes",
                                   "--pidfile",
                                   dir + "/redis.pid",
                                   "--logfile",
                                   dir + "/redis.log",
                                   "--enable-debug-command",
                                   "local"};
  for (int attempt = 0; attempt < 100; ++attempt) {  // the old one may still hold the port
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    int status = 0;
    if (posix_spawnp(&pid, "redis-server", nullptr, nullptr, argv.data(), environ) == 0)
      ::waitpid(pid, &status, 0);
    for (int i = 0; i < 20; ++i) {
      if (command(port, {"PING"}) == "PONG") return;
      std::this_thread::sleep_for(50ms);
    }
  }
  std::fprintf(stderr, "far_bench: redis-server on %d did not come back\n", port);
}

/// The child of 5.: constructs a storage on `port` (warm-up on or off), makes one decision, and
/// prints the steady clock (ns) before construction, after it, and after the decision, and
/// whether the decision was degraded.
int cold_child(int port, bool warm) {
  const std::int64_t t0 = steady_ns();
  auto o = redis_at(port, prefix_of("coldchild"));
  o.warm_up = warm;
  ratelimit::RedisStorage storage(o);
  const std::int64_t t1 = steady_ns();
  ratelimit::FixedWindow<ratelimit::SystemClock, ratelimit::RedisStorage> limiter(
      ratelimit::Rate{1'000'000, 1s}, storage);
  const ratelimit::Decision d = limiter.try_acquire("k");
  const std::int64_t t2 = steady_ns();
  std::printf("%lld %lld %lld %d\n", static_cast<long long>(t0), static_cast<long long>(t1),
              static_cast<long long>(t2), d.degraded ? 1 : 0);
  return 0;
}

/// One cold start of RedisStorage in a fresh process (5.).
struct ColdRun {
  double exec_ms = 0, process_ms = 0, construction_ms = 0, first_ms = 0;
  long long eval = 0, evalsha = 0, loads = 0;
  bool degraded = false;
};

/// Runs `self --cold-child port warm` with `server`'s script cache flushed and its command
/// counters reset first; `port` leads to `server` (directly or through a proxy).
ColdRun cold_run(const char* self, int port, int server, bool warm) {
  (void)command(server, {"SCRIPT", "FLUSH"});
  (void)command(server, {"CONFIG", "RESETSTAT"});
  int out[2];
  ColdRun r;
  if (::pipe(out) != 0) return r;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  std::string p = std::to_string(port), w = warm ? "1" : "0";
  char* args[] = {const_cast<char*>(self), const_cast<char*>("--cold-child"), p.data(), w.data(),
                  nullptr};
  const std::int64_t spawned = steady_ns();
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, self, &fa, nullptr, args, environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  std::string text;
  char buf[256];
  for (ssize_t n; rc == 0 && (n = ::read(out[0], buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<std::size_t>(n));
  ::close(out[0]);
  if (rc == 0) ::waitpid(pid, nullptr, 0);
  long long t0 = 0, t1 = 0, t2 = 0;
  int degraded = 1;
  if (std::sscanf(text.c_str(), "%lld %lld %lld %d", &t0, &t1, &t2, &degraded) != 4) return r;
  r.exec_ms = static_cast<double>(t0 - spawned) / 1e6;
  r.process_ms = static_cast<double>(t2 - spawned) / 1e6;
  r.construction_ms = static_cast<double>(t2 - t0) / 1e6;
  r.first_ms = static_cast<double>(t2 - t1) / 1e6;
  r.degraded = degraded != 0;
  const std::string info = command(server, {"INFO", "commandstats"});
  r.eval = calls_of(info, "eval");
  r.evalsha = calls_of(info, "evalsha");
  r.loads = calls_of(info, "script|load");
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && !std::strcmp(argv[1], "--cold-child"))
    return cold_child(std::atoi(argv[2]), std::atoi(argv[3]) != 0);
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--ports") && i + 1 < argc) {
      for (char* p = std::strtok(argv[++i], ","); p; p = std::strtok(nullptr, ","))
        ports.push_back(std::atoi(p));
    } else if (!std::strcmp(argv[i], "--delay") && i + 1 < argc) {
      delay_ms = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
    }
  }
  if (ports.size() != 3) {
    std::fprintf(stderr, "usage: far_bench --ports P0,P1,P2 [--delay MS] [--quick]\n");
    return 2;
  }
  std::vector<std::vector<std::unique_ptr<rltest::DelayProxy>>> proxies(3);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 3; ++j) {
      proxies[i].push_back(i == j ? nullptr
                                  : std::make_unique<rltest::DelayProxy>("127.0.0.1", ports[j]));
      if (proxies[i][j]) proxies[i][j]->set_delay(std::chrono::milliseconds{delay_ms});
    }
  const int windows = quick ? 2 : 5;
  const double W_s = 1.0;
  const std::int64_t U =
      ratelimit::RegionalWindowBinding<ratelimit::FixedWindowModel>::default_unseen(
          [&] {
            ratelimit::RegionalOptions o;
            o.exchange_interval = S;
            o.one_way_delay = std::chrono::milliseconds{delay_ms};
            return o;
          }(),
          {N, 1'000'000'000});
  std::printf("# Far from Redis: bench/far_bench\n\n");
  std::printf(
      "3 regions on loopback, %d ms one way between them (proxies), S = %lld ms, "
      "N = %lld per 1 s window, U = ceil(N (S + 2d) / W) = %lld.\n\n",
      delay_ms, static_cast<long long>(S.count()), static_cast<long long>(N),
      static_cast<long long>(U));

  // 1. Over-admission under a flood spread over the regions.
  {
    const auto per_window = flood_windows(proxies, "attack", windows, {}, {},
                                          /*default_policy=*/false);
    std::int64_t worst = 0;
    std::printf(
        "## Over-admission: one flooding thread per region\n\n| window | admitted | "
        "over N | bound (R - 1) U |\n|---|---|---|---|\n");
    for (const auto& [k, n] : per_window) {
      worst = std::max(worst, n - N);
      std::printf("| %lld | %lld | %lld | %lld |\n", static_cast<long long>(k % 1000),
                  static_cast<long long>(n), static_cast<long long>(n - N),
                  static_cast<long long>(2 * U));
    }
    std::printf("\nWorst over-admission %lld against the bound %lld: %s.\n\n",
                static_cast<long long>(worst), static_cast<long long>(2 * U),
                worst <= 2 * U ? "within" : "EXCEEDED");
  }

  // 2. A client staying in one region at N per W.
  {
    auto st = regions(proxies, prefix_of("client"));
    std::vector<std::unique_ptr<ratelimit::RegionalExchanger<>>> ex;
    for (auto& s : st) ex.push_back(std::make_unique<ratelimit::RegionalExchanger<>>(s));
    auto b = st[0].bind<ratelimit::FixedWindowModel>("api", {N, 1'000'000'000});
    align_to_window();
    const auto start = std::chrono::steady_clock::now();
    std::int64_t sent = 0, admitted = 0;
    for (std::int64_t i = 0; i < windows * N; ++i) {
      std::this_thread::sleep_until(start + std::chrono::microseconds{i * 1'000'000 / N});
      ++sent;
      admitted +=
          b.apply("k", std::chrono::nanoseconds{now_ns()}, ratelimit::Operation{1}).allowed ? 1 : 0;
    }
    std::printf(
        "## A client staying in region r0 at N per W\n\n%lld of %lld admitted: %.1f %% "
        "(goal >= 95 %%; unseen denials %llu).\n\n",
        static_cast<long long>(admitted), static_cast<long long>(sent),
        100.0 * static_cast<double>(admitted) / static_cast<double>(sent),
        static_cast<unsigned long long>(st[0].stats().unseen_denials));
    (void)W_s;
  }

  // 2b. The regional token bucket: over-admission over any interval, and one region's share.
  {
    constexpr std::int64_t C = 100;
    const auto params = ratelimit::TokenBucketModel::make_params({C, ratelimit::per_second(N)});
    auto st = regions(proxies, prefix_of("bucket"));
    const std::int64_t Ub = st[0].bind<ratelimit::TokenBucketModel>("api", params).unseen_limit();
    std::vector<std::unique_ptr<ratelimit::RegionalExchanger<>>> ex;
    for (auto& s : st) ex.push_back(std::make_unique<ratelimit::RegionalExchanger<>>(s));
    std::mutex m;
    std::vector<std::int64_t> times;  // ns of every admitted unit, all regions
    const std::int64_t end = now_ns() + windows * 1'000'000'000LL;
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < 3; ++r)
      threads.emplace_back([&, r] {
        auto b = st[r].bind<ratelimit::TokenBucketModel>("api", params);
        for (std::int64_t t = now_ns(); t < end; t = now_ns())
          if (b.apply("k", std::chrono::nanoseconds{t}, ratelimit::Operation{1}).allowed) {
            const std::lock_guard lock(m);
            times.push_back(t);
          }
      });
    for (auto& t : threads) t.join();
    std::sort(times.begin(), times.end());
    // The worst interval [t_i, t_j]: (j - i + 1) - r (t_j - t_i) - C = (j + 1 - r t_j) -
    // (i - r t_i) - C, the second term's least value so far (one pass).
    double worst = 0, least = 0;
    for (std::size_t j = 0; j < times.size(); ++j) {
      const double rt = static_cast<double>(N) * static_cast<double>(times[j]) / 1e9;
      const double here = static_cast<double>(j) - rt;
      least = j == 0 ? here : std::min(least, here);
      worst = std::max(worst, static_cast<double>(j + 1) - rt - least - static_cast<double>(C));
    }
    ex.clear();
    auto client_st = regions(proxies, prefix_of("bucketclient"));
    for (auto& s : client_st) ex.push_back(std::make_unique<ratelimit::RegionalExchanger<>>(s));
    auto b = client_st[0].bind<ratelimit::TokenBucketModel>("api", params);
    std::int64_t sent = 0, admitted = 0;
    const auto one = [&] {
      ++sent;
      admitted +=
          b.apply("k", std::chrono::nanoseconds{now_ns()}, ratelimit::Operation{1}).allowed ? 1 : 0;
    };
    for (std::int64_t i = 0; i < C; ++i) one();  // the burst
    const auto start = std::chrono::steady_clock::now();
    for (std::int64_t i = 1; i <= windows * N; ++i) {
      std::this_thread::sleep_until(start + std::chrono::microseconds{i * 1'000'000 / N});
      one();
    }
    std::printf(
        "## Regional token bucket (C = %lld, r = %lld per s, U = C + ceil(r (S + 2d)) = %lld)\n\n"
        "A flood from every region for %d s: %zu admitted; the worst interval over one exact "
        "bucket's C + r D: %.0f, against the bound (R - 1) U = %lld: %s.\n\n"
        "A client staying in region r0 (a burst of C, then r per s): %lld of %lld admitted: "
        "%.1f %% (unseen denials %llu).\n\n",
        static_cast<long long>(C), static_cast<long long>(N), static_cast<long long>(Ub), windows,
        times.size(), worst, static_cast<long long>(2 * Ub),
        worst <= static_cast<double>(2 * Ub) ? "within" : "EXCEEDED",
        static_cast<long long>(admitted), static_cast<long long>(sent),
        100.0 * static_cast<double>(admitted) / static_cast<double>(sent),
        static_cast<unsigned long long>(client_st[0].stats().unseen_denials));
  }

  // 3. Latency per decision, one thread.
  {
    const int n = quick ? 200 : 1000, far_n = quick ? 20 : 100;
    auto st = regions(proxies, prefix_of("latency"));
    auto reg = st[0].bind<ratelimit::FixedWindowModel>("api", {1'000'000, 1'000'000'000});
    ratelimit::RedisStorage near(redis_at(ports[0], prefix_of("near")));
    ratelimit::FixedWindow<ratelimit::SystemClock, ratelimit::RedisStorage> near_lim(
        ratelimit::Rate{1'000'000, 1s}, near);
    ratelimit::RedisStorage far(redis_at(proxies[0][1]->port(), prefix_of("far")));
    ratelimit::FixedWindow<ratelimit::SystemClock, ratelimit::RedisStorage> far_lim(
        ratelimit::Rate{1'000'000, 1s}, far);
    ratelimit::LeaseOptions lo;
    lo.redis = redis_at(proxies[0][1]->port(), prefix_of("lease"));
    ratelimit::LeasedStorage leased(lo);
    auto lease = leased.bind<ratelimit::FixedWindowModel>("api", {1'000'000, 1'000'000'000}, 100);
    const auto op = ratelimit::Operation{1};
    const auto keys = [](int i) { return "k" + std::to_string(i % 16); };
    auto regional = latencies_us(
        n, [&](int i) { (void)reg.apply(keys(i), std::chrono::nanoseconds{now_ns()}, op); });
    auto local = latencies_us(n, [&](int i) { (void)near_lim.try_acquire(keys(i)); });
    auto farl = latencies_us(far_n, [&](int i) { (void)far_lim.try_acquire(keys(i)); });
    auto leasel = latencies_us(
        n, [&](int) { (void)lease.apply("hot", std::chrono::nanoseconds{now_ns()}, op); });
    std::printf(
        "## Latency per decision (one thread, us)\n\n| decision | p50 | p99 | mean |\n"
        "|---|---|---|---|\n");
    const auto row = [](const char* what, const std::vector<double>& v) {
      std::printf("| %s | %.1f | %.1f | %.1f |\n", what, pct(v, 0.5), pct(v, 0.99), mean(v));
    };
    row("RedisStorage, the region's own Redis (reference)", local);
    row("RegionalStorage (3 regions)", regional);
    row("RedisStorage, the Redis of another region (a far round trip)", farl);
    row("LeasedStorage on that far Redis, one hot key, L = 100", leasel);
    std::printf(
        "\nAdded by the regional mode over the local round trip: p50 %+.0f us, p99 %+.0f "
        "us (goal: p99 at most 1000 us above).\n",
        pct(regional, 0.5) - pct(local, 0.5), pct(regional, 0.99) - pct(local, 0.99));
  }
  // 3b. The leased token bucket on the far Redis: three instances (threads, a LeasedStorage
  //     each) flood one key (C = 1000, r = 1000 per second, L = 100, H = 500 ms); the most any
  //     interval admitted beyond one exact bucket's C + r D, against the bound r H = 500, and
  //     the decisions per round trip.
  {
    constexpr std::int64_t C = 1000, per_token_ns = 1'000'000;
    constexpr std::int64_t H_ns = 500'000'000;
    std::vector<ratelimit::LeasedStorage> inst;
    const auto prefix = prefix_of("leasebucket");  // one shared bucket
    for (int i = 0; i < 3; ++i) {
      ratelimit::LeaseOptions lo;
      lo.redis = redis_at(proxies[0][1]->port(), prefix);
      lo.lease_duration = std::chrono::milliseconds{H_ns / 1'000'000};
      inst.emplace_back(lo);
    }
    std::mutex m;
    std::vector<std::int64_t> admitted;  // ns, one token each
    const std::int64_t end = now_ns() + (quick ? 1 : 3) * 1'000'000'000LL;
    std::vector<std::thread> threads;
    for (auto& s : inst) {
      threads.emplace_back(
          [&, b = s.bind<ratelimit::TokenBucketModel>(
                  "api", ratelimit::TokenBucketModel::make_params({C, ratelimit::per_second(C)}),
                  100)] {
            for (std::int64_t t = now_ns(); t < end; t = now_ns())
              if (b.apply("hot", std::chrono::nanoseconds{t}, ratelimit::Operation{1}).allowed) {
                const std::lock_guard lock(m);
                admitted.push_back(t);
              }
          });
    }
    for (auto& t : threads) t.join();
    std::sort(admitted.begin(), admitted.end());
    double worst = 0;  // tokens beyond C + r D over [admitted[i], admitted[j]]
    for (std::size_t i = 0; i < admitted.size(); ++i)
      for (std::size_t j = i; j < admitted.size(); ++j)
        worst = std::max(worst, static_cast<double>(j - i + 1) - static_cast<double>(C) -
                                    static_cast<double>(admitted[j] - admitted[i]) /
                                        static_cast<double>(per_token_ns));
    std::uint64_t local = 0, trips = 0;
    for (const auto& s : inst) {
      local += s.stats().local;
      trips += s.stats().round_trips;
    }
    std::printf(
        "\n## Leased token bucket on that far Redis: three instances flood one key\n\n"
        "C = %lld, r = %lld per second, L = 100, H = %lld ms: %zu admitted; the most any "
        "interval admitted beyond one exact bucket (C + r D) %.1f, bound r H = %lld; %.1f "
        "decisions per round trip (%llu local, %llu round trips).\n",
        static_cast<long long>(C), static_cast<long long>(C),
        static_cast<long long>(H_ns / 1'000'000), admitted.size(), worst,
        static_cast<long long>(C * H_ns / 1'000'000'000),
        static_cast<double>(local + trips) / static_cast<double>(std::max<std::uint64_t>(trips, 1)),
        static_cast<unsigned long long>(local), static_cast<unsigned long long>(trips));
  }
  // 6. Faults and roaming.
  {
    const auto text = [](const char* f, auto... a) {
      char buf[512];
      std::snprintf(buf, sizeof buf, f, a...);
      return std::string(buf);
    };
    std::vector<std::array<std::string, 3>> rows;
    const auto L = [](std::int64_t v) { return static_cast<long long>(v); };
    const int secs = quick ? 3 : 5;
    constexpr std::int64_t C = 100;
    const auto bucket = ratelimit::TokenBucketModel::make_params({C, ratelimit::per_second(N)});
    const auto op = ratelimit::Operation{1};
    // 6a. A client roaming r0 -> r1 -> r2 at 90 % of r, against one exact bucket.
    {
      auto st = regions(proxies, prefix_of("roam"), true);
      std::vector<std::unique_ptr<ratelimit::RegionalExchanger<>>> ex;
      for (auto& s : st) ex.push_back(std::make_unique<ratelimit::RegionalExchanger<>>(s));
      std::vector<decltype(st[0].bind<ratelimit::TokenBucketModel>("api", bucket))> b;
      for (auto& s : st) b.push_back(s.bind<ratelimit::TokenBucketModel>("api", bucket));
      ratelimit::InMemoryStorage mem;
      auto exact = mem.bind<ratelimit::TokenBucketModel>("api", bucket);
      const std::int64_t rate = N * 9 / 10, per_phase = rate * (quick ? 1 : 2);
      std::int64_t got = 0, exact_got = 0;
      const auto start = std::chrono::steady_clock::now();
      for (std::int64_t i = 0; i < 3 * per_phase; ++i) {
        std::this_thread::sleep_until(start + std::chrono::microseconds{i * 1'000'000 / rate});
        const auto t = std::chrono::nanoseconds{now_ns()};
        got += b[static_cast<std::size_t>(i / per_phase)].apply("k", t, op).allowed ? 1 : 0;
        exact_got += exact.apply("k", t, op).allowed ? 1 : 0;
      }
      const double share = 100.0 * static_cast<double>(got) / static_cast<double>(exact_got);
      rows.push_back(
          {text("a client roaming r0, r1, r2 (%lld s each) at 90 %% of r, token "
                "bucket C = %lld, r = %lld per s",
                L(per_phase / rate), L(C), L(N)),
           "goal: >= 95 % of one exact bucket on the same schedule",
           text("%lld of %lld sent, one exact bucket %lld: %.1f %% (%s)", L(got), L(3 * per_phase),
                L(exact_got), share, share >= 95.0 ? "met" : "BELOW")});
    }
    // 6b. An idle region's client after a flood elsewhere.
    {
      auto st = regions(proxies, prefix_of("idle"), true);
      std::vector<std::unique_ptr<ratelimit::RegionalExchanger<>>> ex;
      for (auto& s : st) ex.push_back(std::make_unique<ratelimit::RegionalExchanger<>>(s));
      const std::int64_t flood_end = now_ns() + 2'000'000'000LL;
      std::thread flood([&, b = st[0].bind<ratelimit::TokenBucketModel>("api", bucket)] {
        for (std::int64_t t = now_ns(); t < flood_end; t = now_ns())
          (void)b.apply("k", std::chrono::nanoseconds{t}, op);
      });
      auto client = st[1].bind<ratelimit::TokenBucketModel>("api", bucket);
      std::int64_t sent_after = 0, got_after = 0;
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < 40; ++i) {  // 10 per second for 4 s
        std::this_thread::sleep_until(start + std::chrono::milliseconds{i * 100});
        const std::int64_t t = now_ns();
        const bool ok = client.apply("k", std::chrono::nanoseconds{t}, op).allowed;
        if (t >= flood_end) {
          ++sent_after;
          got_after += ok ? 1 : 0;
        }
      }
      flood.join();
      rows.push_back(
          {"a 10 per s client of r1 in the 2 s after a 2 s flood in r0 stopped "
           "(token bucket as above)",
           "one exact bucket: all (it refills C in 0.1 s)",
           text("%lld of %lld", L(got_after), L(sent_after))});
    }
    const std::int64_t bound = N + 2 * U;
    // 6c. A pause of the whole process (SIGSTOP) for 500 ms under a flood from every region.
    {
      const auto w = flood_windows(proxies, "pause", secs, 1500ms, [] { pause_process(500ms); });
      rows.push_back(
          {"a flood from every region; the process stopped 500 ms at 1.5 s (fixed "
           "window, default policy)",
           text("N + (R - 1) U = %lld per window", L(bound)),
           text("worst window %lld (%s)", L(worst_window(w)),
                worst_window(w) <= bound ? "within" : "EXCEEDED")});
    }
    // 6d. FLUSHALL of r1's Redis under the flood.
    {
      const auto w = flood_windows(proxies, "flushall", secs, 1500ms,
                                   [] { (void)command(ports[1], {"FLUSHALL"}); });
      rows.push_back({"a flood from every region; r1's Redis FLUSHALL at 1.5 s",
                      text("N + (R - 1) U + N = %lld per window", L(bound + N)),
                      text("worst window %lld (%s)", L(worst_window(w)),
                           worst_window(w) <= bound + N ? "within" : "EXCEEDED")});
    }
    // 6e. Restart of r1's Redis (no persistence) under the flood.
    {
      const auto w =
          flood_windows(proxies, "restart", secs, 1500ms, [] { restart_redis(ports[1]); });
      // While it is down r1 decides on its share (local_fallback, f = 1: up to N per window).
      rows.push_back(
          {"a flood from every region; r1's Redis restarted at 1.5 s (down until it "
           "answers again)",
           text("N + (R - 1) U + N (lost) + N (r1's share while down) = %lld", L(bound + 2 * N)),
           text("worst window %lld (%s)", L(worst_window(w)),
                worst_window(w) <= bound + 2 * N ? "within" : "EXCEEDED")});
    }
    // 6f. A 2 s partition of r2 (flooding) while an honest client of r0 sends N per second.
    {
      // Links that give up after 200 ms (5 round trips): a region excludes another two failed
      // rounds after the cut, each as long as that timeout.
      auto st = regions(proxies, prefix_of("partition"), true, 200ms);
      std::vector<std::unique_ptr<ratelimit::RegionalExchanger<>>> ex;
      for (auto& s : st) ex.push_back(std::make_unique<ratelimit::RegionalExchanger<>>(s));
      const auto cut = [&](bool on) {
        for (std::size_t j = 0; j < 2; ++j) {
          proxies[2][j]->set_partitioned(on);
          proxies[j][2]->set_partitioned(on);
        }
      };
      align_to_window();
      const std::int64_t w0 = now_ns() / 1'000'000'000;
      const std::int64_t end = (w0 + 3) * 1'000'000'000LL;
      std::atomic<std::int64_t> flood_inside{0};  // r2's admissions in the window inside
      std::thread flood([&,
                         b = st[2].bind<ratelimit::FixedWindowModel>("api", {N, 1'000'000'000})] {
        for (std::int64_t t = now_ns(); t < end; t = now_ns())
          if (b.apply("k", std::chrono::nanoseconds{t}, op).allowed && t / 1'000'000'000 == w0 + 1)
            flood_inside.fetch_add(1, std::memory_order_relaxed);
      });
      std::thread cutter([&] {
        std::this_thread::sleep_for(500ms);
        cut(true);
        std::this_thread::sleep_for(2s);
        cut(false);
      });
      auto client = st[0].bind<ratelimit::FixedWindowModel>("api", {N, 1'000'000'000});
      std::int64_t inside = 0;
      const auto start = std::chrono::steady_clock::now();
      for (std::int64_t i = 0; i < 3 * N; ++i) {
        std::this_thread::sleep_until(start + std::chrono::microseconds{i * 1'000'000 / N});
        const std::int64_t t = now_ns();
        if (client.apply("k", std::chrono::nanoseconds{t}, op).allowed &&
            t / 1'000'000'000 == w0 + 1)
          ++inside;
      }
      flood.join();
      cutter.join();
      // r0 and r1 exclude r2 after two failed rounds (granted by 2 of 3 regions), so r0's
      // client is held by the limit only; r2 spends its U. The window's total stays within
      // N + (R - 1 + X) U with X = 2 exclusions (docs/far.md).
      const std::int64_t total = inside + flood_inside.load();
      rows.push_back(
          {"r2 (flooding) cut off for 2 s from 0.5 s; an honest client of r0 at N per "
           "s, its units in the window inside the partition (and r2's, and the window's total)",
           text("goal: N - U = %lld; total <= N + (R - 1 + X) U = %lld (X = 2)", L(N - U),
                L(N + 4 * U)),
           text("%lld (%s); r2 %lld; total %lld (%s)", L(inside), inside >= N - U ? "met" : "BELOW",
                L(flood_inside.load()), L(total), total <= N + 4 * U ? "within" : "EXCEEDED")});
    }
    // 6g. Leases under a flood: three instances on the far Redis, one fixed-window key.
    {
      std::vector<ratelimit::LeasedStorage> inst;
      const auto prefix = prefix_of("leaseflood");
      for (int i = 0; i < 3; ++i) {
        ratelimit::LeaseOptions lo;
        lo.redis = redis_at(proxies[0][1]->port(), prefix);
        lo.redis.failure_policy = ratelimit::LeaseOptions{}.redis.failure_policy;
        inst.emplace_back(lo);
      }
      const std::int64_t end = now_ns() + (quick ? 1 : 3) * 1'000'000'000LL;
      std::atomic<std::int64_t> decisions{0};
      std::vector<std::thread> threads;
      for (auto& s : inst)
        threads.emplace_back(
            [&, b = s.bind<ratelimit::FixedWindowModel>("api", {N, 1'000'000'000}, N / 10)] {
              for (std::int64_t t = now_ns(); t < end; t = now_ns()) {
                (void)b.apply("hot", std::chrono::nanoseconds{t}, op);
                decisions.fetch_add(1, std::memory_order_relaxed);
              }
            });
      for (auto& t : threads) t.join();
      std::uint64_t trips = 0, denied_locally = 0;
      for (const auto& s : inst) {
        trips += s.stats().round_trips;
        denied_locally += s.stats().denied_locally;
      }
      const double per_trip = static_cast<double>(decisions.load()) /
                              static_cast<double>(std::max<std::uint64_t>(trips, 1));
      rows.push_back({text("leases under a flood: three instances on the far Redis (%d ms one "
                           "way), fixed window N = %lld per s, L = %lld",
                           delay_ms, L(N), L(N / 10)),
                      "goal: >= 100 decisions per round trip",
                      text("%.0f (%lld decisions, %llu round trips, %llu denied in process; %s)",
                           per_trip, L(decisions.load()), static_cast<unsigned long long>(trips),
                           static_cast<unsigned long long>(denied_locally),
                           per_trip >= 100 ? "met" : "BELOW")});
    }
    std::printf(
        "\n## Faults and roaming (default failure policy: local_fallback)\n\n"
        "| run | bound | measured |\n|---|---|---|\n");
    for (const auto& r : rows)
      std::printf("| %s | %s | %s |\n", r[0].c_str(), r[1].c_str(), r[2].c_str());
  }
  // 4. Cold start on the far Redis: a fresh storage's first decision, with an empty script cache.
  {
    const auto flush_scripts = [] {
      redisContext* c = redisConnect("127.0.0.1", ports[1]);
      if (c != nullptr && c->err == 0) freeReplyObject(redisCommand(c, "SCRIPT FLUSH"));
      if (c != nullptr) redisFree(c);
    };
    const auto ms_since = [](std::chrono::steady_clock::time_point a) {
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a)
          .count();
    };
    const ratelimit::detail::WindowParams p{1'000'000, 1'000'000'000};
    const auto op = ratelimit::Operation{1};
    ratelimit::LeaseOptions lo;
    lo.redis = redis_at(proxies[0][1]->port(), prefix_of("cold"));
    flush_scripts();
    auto start = std::chrono::steady_clock::now();
    double cold = 0;
    {
      ratelimit::LeasedStorage s(lo);
      (void)s.bind<ratelimit::FixedWindowModel>("api", p).apply(
          "k", std::chrono::nanoseconds{now_ns()}, op);
      cold = ms_since(start);
    }
    flush_scripts();
    lo.redis.key_prefix = prefix_of("warm");
    start = std::chrono::steady_clock::now();
    ratelimit::LeasedStorage s(lo);
    (void)s.warm_up();
    const double warm_up = ms_since(start);
    const auto first = std::chrono::steady_clock::now();
    (void)s.bind<ratelimit::FixedWindowModel>("api", p).apply(
        "k", std::chrono::nanoseconds{now_ns()}, op);
    const double after = ms_since(first);
    std::printf(
        "\n## Cold start on a Redis %d ms away (round trip %d ms), empty script cache\n\n"
        "| | ms |\n|---|---|\n| construction to first decision, no warm-up | %.1f |\n"
        "| warm_up() at construction | %.1f |\n| first decision after warm_up | %.1f |\n",
        delay_ms, 2 * delay_ms, cold, warm_up, after);
  }
  // 5. Cold start of RedisStorage in a fresh process, local and far.
  {
    const int runs = quick ? 2 : 5;
    std::printf(
        "\n## Cold start of RedisStorage: a fresh process's first decision\n\n"
        "Each row: the median of %d fresh processes (this program, `--cold-child`), Redis's "
        "script cache flushed before each. Goal: the first decision within one round trip plus "
        "5 ms. The proxy delays data, not the TCP handshake: a real far connect adds one round "
        "trip (two or three with TLS) to the rows without a warm-up.\n\n"
        "Times in ms. *exec*: process start to `main` (exec, dynamic loading: no library "
        "code). *over one round trip*: the first decision's wait less the round trip, where the "
        "wait is from construction without a warm-up (connect and decision) and the decision "
        "alone after one (the warm-up ran at start-up, before traffic); then from process "
        "start, less one more round trip with a warm-up (its SCRIPT LOAD).\n\n"
        "| Redis | warm-up | round trip (PING) | exec | process start to first decision | "
        "construction to first decision | first decision alone | over one round trip | from "
        "process start | EVAL / EVALSHA / SCRIPT LOAD per start | degraded |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n",
        runs);
    struct Path {
      const char* name;
      int port, server;
    };
    const Path paths[] = {{"local", ports[0], ports[0]}, {"far", proxies[0][1]->port(), ports[1]}};
    for (const Path& path : paths) {
      const double rtt = ping_ms(path.port);
      for (const bool warm : {false, true}) {
        std::vector<double> exec, process, construction, first;
        long long eval = 0, evalsha = 0, loads = 0;
        int degraded = 0;
        for (int i = 0; i < runs; ++i) {
          const ColdRun r = cold_run(argv[0], path.port, path.server, warm);
          exec.push_back(r.exec_ms);
          process.push_back(r.process_ms);
          construction.push_back(r.construction_ms);
          first.push_back(r.first_ms);
          eval = std::max(eval, r.eval);
          evalsha = std::max(evalsha, r.evalsha);
          loads = std::max(loads, r.loads);
          degraded += r.degraded ? 1 : 0;
        }
        // Without a warm-up the first decision is the whole cold start; with one, the decision
        // alone is what the user waits for once the storage is built.
        const double decision = warm ? pct(first, 0.5) : pct(construction, 0.5);
        // From process start the warm-up's own round trip (SCRIPT LOAD) counts too.
        const double from_start = pct(process, 0.5) - (warm ? rtt : 0.0);
        std::printf(
            "| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %+.2f (%s) | %+.2f (%s) | %lld / %lld "
            "/ %lld | %d |\n",
            path.name, warm ? "on" : "off", rtt, pct(exec, 0.5), pct(process, 0.5),
            pct(construction, 0.5), pct(first, 0.5), decision - rtt,
            decision - rtt <= 5.0 ? "within 5" : "OVER 5", from_start - rtt,
            from_start - rtt <= 5.0 ? "within 5" : "OVER 5", eval, evalsha, loads, degraded);
      }
    }
  }
  return 0;
}
