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
/// 3. Latency per decision, one thread: a regional decision (one round trip to the region's own
///    Redis) against a plain RedisStorage decision on that same Redis (the local round trip)
///    and on a Redis behind the delay (the far round trip); a leased decision on the far Redis.
/// 4. Cold start: a fresh leased storage's first decision on the far Redis with an empty script
///    cache, without and with warm_up().
///
///   far_bench --ports P0,P1,P2 [--delay MS] [--quick]     writes markdown to stdout
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
std::vector<ratelimit::RegionalStorage> regions(
    const std::vector<std::vector<std::unique_ptr<rltest::DelayProxy>>>& proxies,
    const std::string& prefix) {
  std::vector<ratelimit::RegionalStorage> out;
  for (std::size_t i = 0; i < 3; ++i) {
    ratelimit::RegionalOptions o;
    o.region = "r" + std::to_string(i);
    o.local = redis_at(ports[i], prefix);
    o.exchange_interval = S;
    o.one_way_delay = std::chrono::milliseconds{delay_ms};
    for (std::size_t j = 0; j < 3; ++j)
      if (j != i)
        o.remotes.push_back({"r" + std::to_string(j), redis_at(proxies[i][j]->port(), prefix)});
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

}  // namespace

int main(int argc, char** argv) {
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
  const std::int64_t U = ratelimit::RegionalBinding<ratelimit::FixedWindowModel>::default_unseen(
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
    auto st = regions(proxies, prefix_of("attack"));
    std::vector<std::unique_ptr<ratelimit::RegionalExchanger<>>> ex;
    for (auto& s : st) ex.push_back(std::make_unique<ratelimit::RegionalExchanger<>>(s));
    std::mutex m;
    std::map<std::int64_t, std::int64_t> per_window;
    align_to_window();
    const std::int64_t end = now_ns() + windows * 1'000'000'000LL;
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
    for (auto& t : threads) t.join();
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
  return 0;
}
