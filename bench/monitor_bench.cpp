/// @file bench/monitor_bench.cpp
/// The monitoring goal: an in-process decision with a counting listener attached costs at most
/// 1.15x the same decision without one (the latency is sampled, about 1 in 64 decisions, not
/// read on every decision). Side by side in one binary, the same limiter shape and key:
///
///   BM_Monitor_TokenBucket_<Clock>_NoListener        nothing attached (one atomic load)
///   BM_Monitor_TokenBucket_<Clock>_CountingListener  a listener counting with one relaxed
///                                                    fetch_add per decision
///   BM_Monitor_TokenBucket_<Clock>_Prometheus        the PrometheusExporter (for reference)
///   BM_Monitor_TokenBucket_<Clock>_Shadow            shadow mode, nothing attached
///
/// <Clock> is SteadyClock (the real decision) or ManualClock (advanced 1 us per iteration, to
/// take the clock read out). Run with --benchmark_enable_random_interleaving=true and
/// repetitions (bench/run --monitor does) so that load drifts hit every variant alike.

#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include <ratelimit/metrics/prometheus.hpp>
#include <ratelimit/ratelimit.hpp>

namespace {

using namespace std::chrono_literals;

class CountingListener final : public ratelimit::Listener {
 public:
  void on_decision(const ratelimit::DecisionEvent&) override {
    count_.fetch_add(1, std::memory_order_relaxed);
  }
  std::uint64_t count() const noexcept { return count_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> count_{0};
};

enum class Variant { none, counting, prometheus, shadow };

template <class C>
void run(benchmark::State& state, Variant v) {
  C clock;
  // Never denies: 10^9 tokens refilled at 10^9/s.
  ratelimit::TokenBucket<C> limiter({1'000'000'000, ratelimit::per_second(1'000'000'000)}, {},
                                    clock, "bench");
  auto counting = std::make_shared<CountingListener>();
  if (v == Variant::counting) limiter.attach_listener(counting);
  if (v == Variant::prometheus)
    limiter.attach_listener(std::make_shared<ratelimit::PrometheusExporter>());
  if (v == Variant::shadow) limiter.set_shadow_mode(true);
  std::int64_t admitted = 0;
  for (auto _ : state) {
    if constexpr (std::is_same_v<C, ratelimit::ManualClock>) clock.advance(1us);
    const ratelimit::Decision d = limiter.try_acquire("client-42");
    admitted += d.allowed ? 1 : 0;
    benchmark::DoNotOptimize(d);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["admitted"] = static_cast<double>(admitted) /
                               static_cast<double>(std::max<std::int64_t>(1, state.iterations()));
  if (v == Variant::counting)
    state.counters["heard"] = static_cast<double>(counting->count()) /
                              static_cast<double>(std::max<std::int64_t>(1, state.iterations()));
}

void BM_Monitor_TokenBucket_SteadyClock_NoListener(benchmark::State& s) {
  run<ratelimit::SteadyClock>(s, Variant::none);
}
void BM_Monitor_TokenBucket_SteadyClock_CountingListener(benchmark::State& s) {
  run<ratelimit::SteadyClock>(s, Variant::counting);
}
void BM_Monitor_TokenBucket_SteadyClock_Prometheus(benchmark::State& s) {
  run<ratelimit::SteadyClock>(s, Variant::prometheus);
}
void BM_Monitor_TokenBucket_SteadyClock_Shadow(benchmark::State& s) {
  run<ratelimit::SteadyClock>(s, Variant::shadow);
}
void BM_Monitor_TokenBucket_ManualClock_NoListener(benchmark::State& s) {
  run<ratelimit::ManualClock>(s, Variant::none);
}
void BM_Monitor_TokenBucket_ManualClock_CountingListener(benchmark::State& s) {
  run<ratelimit::ManualClock>(s, Variant::counting);
}
void BM_Monitor_TokenBucket_ManualClock_Prometheus(benchmark::State& s) {
  run<ratelimit::ManualClock>(s, Variant::prometheus);
}
void BM_Monitor_TokenBucket_ManualClock_Shadow(benchmark::State& s) {
  run<ratelimit::ManualClock>(s, Variant::shadow);
}

}  // namespace

BENCHMARK(BM_Monitor_TokenBucket_SteadyClock_NoListener);
BENCHMARK(BM_Monitor_TokenBucket_SteadyClock_CountingListener);
BENCHMARK(BM_Monitor_TokenBucket_SteadyClock_Prometheus);
BENCHMARK(BM_Monitor_TokenBucket_SteadyClock_Shadow);
BENCHMARK(BM_Monitor_TokenBucket_ManualClock_NoListener);
BENCHMARK(BM_Monitor_TokenBucket_ManualClock_CountingListener);
BENCHMARK(BM_Monitor_TokenBucket_ManualClock_Prometheus);
BENCHMARK(BM_Monitor_TokenBucket_ManualClock_Shadow);

BENCHMARK_MAIN();
