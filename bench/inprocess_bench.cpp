/// @file bench/inprocess_bench.cpp
/// In-process costs: the machine's floors, then every algorithm on InMemoryStorage with one key
/// (admitted, denied, two threads) and with 1,000,000 keys, each with the real SteadyClock and
/// with a ManualClock (advanced per iteration) to separate the clock's cost.
///
/// Read every figure as a ratio to the floors of the same run: BM_Floor_SteadyClockNow (one clock
/// read) and BM_Floor_AtomicCas (a clock read and one CAS on one word: the cheapest decision);
/// two threads to BM_Floor_AtomicCasTwoThreads (two threads doing that on one word); the
/// 1,000,000-key runs to BM_Floor_MemoryLatency (one dependent read from memory) and
/// BM_Floor_MemoryLatencyClock (that plus a clock read). The naive references, what a
/// user writes in ten lines: BM_Naive_MutexBucket_NoKey (one bucket of doubles under a
/// std::mutex), BM_Naive_UnorderedMapMutex_OneKey and _MillionKeys (std::unordered_map<
/// std::string, bucket> under one std::mutex, reserved for the keys, std::hash of the key).
/// Two threads on one key run twice where a slot may span two cache lines (40-byte slots):
/// _OneKeyTwoThreads on a key whose slot's written words lie in one line, _TwoLines on one
/// whose lie in two (3 of 8 slot positions; which one a given key gets depends on the process's
/// hash secret, so a fixed key was bimodal from run to run).
/// Counters: `admitted` (the fraction of decisions that admitted), for _OneKeyTwoThreads
/// `floor_ns` (BM_Floor_AtomicCasTwoThreads timed again just before, by the same threads), and
/// for _MillionKeys
/// `state_B_per_key` (sizeof(Model::State), plus the sliding log's entries) and
/// `rss_B_per_key` (the growth of the process's resident memory while the keys were stored,
/// from /proc/self/statm, divided by the number of keys).

#include <benchmark/benchmark.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <ratelimit/ratelimit.hpp>

namespace {

using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::InMemoryStorage;
using ratelimit::ManualClock;
using ratelimit::Rate;
using ratelimit::SteadyClock;

constexpr std::int64_t million = 1'000'000;

// --- the floors ---------------------------------------------------------------------------------

void BM_Floor_SteadyClockNow(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(std::chrono::steady_clock::now());
  state.SetItemsProcessed(state.iterations());
}

// The cheapest possible decision: a one-word GCRA (the time at which the bucket is full again),
// one clock read and one compare-and-swap.
void BM_Floor_AtomicCas(benchmark::State& state) {
  alignas(64) static std::atomic<std::int64_t> tat{0};
  constexpr std::int64_t interval = 1;  // 1 ns per token: always admitted at this rate
  std::int64_t admitted = 0;
  for (auto _ : state) {
    const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count();
    std::int64_t cur = tat.load(std::memory_order_relaxed);
    const std::int64_t next = (cur > now ? cur : now) + interval;
    const bool ok = tat.compare_exchange_strong(cur, next, std::memory_order_acq_rel);
    admitted += ok;
    benchmark::DoNotOptimize(ok);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["admitted"] =
      static_cast<double>(admitted) / static_cast<double>(state.iterations());
}

/// One decision of the CAS floor on `tat`: a clock read, then a CAS retried until it lands.
inline void cas_floor_step(std::atomic<std::int64_t>& tat) {
  constexpr std::int64_t interval = 1;
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  std::int64_t cur = tat.load(std::memory_order_relaxed);
  while (!tat.compare_exchange_weak(cur, (cur > now ? cur : now) + interval,
                                    std::memory_order_acq_rel, std::memory_order_relaxed)) {
  }
}

// The same floor on two threads and one word (the reference for one key on two threads):
// each decision reads the clock and retries its CAS until it lands, as a lock-free decision
// does; the cache line travels between the cores.
void BM_Floor_AtomicCasTwoThreads(benchmark::State& state) {
  alignas(64) static std::atomic<std::int64_t> tat{0};
  for (auto _ : state) cas_floor_step(tat);
  state.SetItemsProcessed(state.iterations());
}

/// BM_Floor_AtomicCasTwoThreads timed again by the two threads of a two-thread benchmark just
/// before its timed loop: wall ns per decision (aggregate), as the benchmark reports its own.
/// This VM switches between a fast and a slow mode for minutes at a time (this floor reads
/// about 25 or 55 ns), so a floor timed a minute apart from the decisions could be in the
/// other mode; reported beside them as the counter `floor_ns`, it is not.
double two_thread_floor_ns() {
  constexpr int steps = 100'000;
  static std::barrier sync(2);
  alignas(64) static std::atomic<std::int64_t> tat{0};
  sync.arrive_and_wait();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) cas_floor_step(tat);
  sync.arrive_and_wait();  // both threads done: the aggregate rate
  const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
  return took.count() / (2.0 * steps);
}

// A random cycle through the cache lines of a 128 MiB array (about the size of a million keys'
// table), built once.
struct alignas(64) CycleLine {
  std::uint32_t next;
};
const CycleLine* memory_cycle() {
  constexpr std::uint32_t lines = (128u << 20) / sizeof(CycleLine);
  static const std::unique_ptr<CycleLine[]> cycle = [] {
    std::vector<std::uint32_t> order(lines);
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin() + 1, order.end(), std::mt19937_64{7});
    auto c = std::make_unique<CycleLine[]>(lines);
    for (std::uint32_t i = 0; i < lines; ++i) c[order[i]].next = order[(i + 1) % lines];
    return c;
  }();
  return cycle.get();
}

// The memory floor for the 1,000,000-key runs: one dependent read of a random cache line of the
// cycle. A decision on a key not in cache costs at least this: its slot's line must come from
// memory.
void BM_Floor_MemoryLatency(benchmark::State& state) {
  const CycleLine* cycle = memory_cycle();
  std::uint32_t at = 0;
  for (auto _ : state) {
    at = cycle[at].next;
    benchmark::DoNotOptimize(at);
  }
  state.SetItemsProcessed(state.iterations());
}

// The floor for the 1,000,000-key runs with the real clock: one uncached read and one
// clock read per decision (the clock's ordering waits for the read, so they add up).
void BM_Floor_MemoryLatencyClock(benchmark::State& state) {
  const CycleLine* cycle = memory_cycle();
  std::uint32_t at = 0;
  for (auto _ : state) {
    at = cycle[at].next;
    benchmark::DoNotOptimize(at);
    benchmark::DoNotOptimize(std::chrono::steady_clock::now());
  }
  state.SetItemsProcessed(state.iterations());
}

// --- the naive references ------------------------------------------------------------

// The bucket a user writes in ten lines: tokens as a double, refilled from the elapsed time.
struct NaiveBucket {
  double tokens;
  std::int64_t last;  // ns

  bool take(double capacity, double per_ns, std::int64_t now) {
    if (now > last) {
      tokens = std::min(capacity, tokens + static_cast<double>(now - last) * per_ns);
      last = now;
    }
    if (tokens < 1) return false;
    tokens -= 1;
    return true;
  }
};

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One bucket under a std::mutex (no key), admitting every call (10^9 per second).
void BM_Naive_MutexBucket_NoKey(benchmark::State& state) {
  std::mutex mutex;
  NaiveBucket bucket{1e9, 0};
  std::int64_t admitted = 0;
  for (auto _ : state) {
    const std::int64_t now = steady_ns();
    std::lock_guard lock(mutex);
    const bool ok = bucket.take(1e9, 1.0, now);
    admitted += ok;
    benchmark::DoNotOptimize(ok);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["admitted"] =
      static_cast<double>(admitted) / static_cast<double>(state.iterations());
}

// std::unordered_map<std::string, NaiveBucket> under one std::mutex, reserved for `keys`.
class NaiveMapLimiter {
 public:
  NaiveMapLimiter(double capacity, double per_ns, std::size_t keys)
      : capacity_(capacity), per_ns_(per_ns) {
    buckets_.reserve(keys);
  }
  bool try_acquire(const std::string& key) {
    const std::int64_t now = steady_ns();
    std::lock_guard lock(mutex_);
    auto [it, inserted] = buckets_.try_emplace(key, NaiveBucket{capacity_, now});
    return it->second.take(capacity_, per_ns_, now);
  }
  std::size_t size() const { return buckets_.size(); }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, NaiveBucket> buckets_;
  double capacity_, per_ns_;
};

// The naive map deciding one hot key with the real clock (every call admitted).
void BM_Naive_UnorderedMapMutex_OneKey(benchmark::State& state) {
  NaiveMapLimiter limiter(1e9, 1.0, 1);
  const std::string key = "client-0000042";
  std::int64_t admitted = 0;
  for (auto _ : state) {
    const bool ok = limiter.try_acquire(key);
    admitted += ok;
    benchmark::DoNotOptimize(ok);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["admitted"] =
      static_cast<double>(admitted) / static_cast<double>(state.iterations());
}

// --- the algorithms and their configurations
// ------------------------------------------------------

// Each algorithm names its limiter, its model and three configurations: `admitting` (generous:
// with the real clock at tens of ns per call every request is admitted), `denying` (one first
// admission, then every request denied) and `many_keys` (each of a million keys admits its few
// requests and stays non-fresh for an hour, so the storage really holds a million keys).
struct TokenBucketAlg {
  static constexpr const char* name = "TokenBucket";
  using Model = ratelimit::TokenBucketModel;
  using Config = ratelimit::TokenBucketConfig;
  template <class C>
  using Limiter = ratelimit::TokenBucket<C, InMemoryStorage>;
  static Config admitting() { return {1'000'000'000, ratelimit::per_second(1'000'000'000)}; }
  static Config denying() { return {1, ratelimit::per_hour(1)}; }
  static Config many_keys() { return {1000, ratelimit::per_hour(1)}; }
  static Model::Params params(const Config& c) { return Model::make_params(c); }
};

struct LeakyBucketAlg {
  static constexpr const char* name = "LeakyBucket";
  using Model = ratelimit::LeakyBucketModel;
  using Config = ratelimit::LeakyBucketConfig;
  template <class C>
  using Limiter = ratelimit::LeakyBucket<C, InMemoryStorage>;
  static Config admitting() { return {1'000'000'000, ratelimit::per_second(1'000'000'000)}; }
  static Config denying() { return {1, ratelimit::per_hour(1)}; }
  static Config many_keys() { return {1000, ratelimit::per_hour(1)}; }
  static Model::Params params(const Config& c) { return Model::make_params(c); }
};

template <class M, template <class, class> class L, const char* Name>
struct WindowAlg {
  static constexpr const char* name = Name;
  using Model = M;
  using Config = Rate;
  template <class C>
  using Limiter = L<C, InMemoryStorage>;
  static Config admitting() { return ratelimit::per_second(1'000'000'000); }
  static Config denying() { return ratelimit::per_hour(1); }
  static Config many_keys() { return ratelimit::per_hour(1000); }
  static typename Model::Params params(const Config& c) {
    return ratelimit::detail::make_window_params(c);
  }
};

constexpr char fixed_window_name[] = "FixedWindow";
constexpr char sliding_counter_name[] = "SlidingCounter";
using FixedWindowAlg =
    WindowAlg<ratelimit::FixedWindowModel, ratelimit::FixedWindow, fixed_window_name>;
using SlidingCounterAlg =
    WindowAlg<ratelimit::SlidingCounterModel, ratelimit::SlidingCounter, sliding_counter_name>;

// The sliding log at limit 100 (its cost grows with the limit). The shortest window the library
// accepts is 1 ms, so with the real clock at tens of ns per call most requests of the "admitted"
// scenario are denied (see the `admitted` counter); the ManualClock variant, advanced W/100 per
// call, is the admitted case proper: every request admitted with 99 live entries in the log.
struct SlidingLogAlg {
  static constexpr const char* name = "SlidingLog";
  using Model = ratelimit::SlidingLogModel;
  using Config = Rate;
  template <class C>
  using Limiter = ratelimit::SlidingLog<C, InMemoryStorage>;
  static Config admitting() { return {100, 1ms}; }
  static Config denying() { return ratelimit::per_hour(100); }
  static Config many_keys() { return ratelimit::per_hour(100); }
  static Model::Params params(const Config& c) { return ratelimit::detail::make_window_params(c); }
};

// How far a ManualClock moves per call in the one-key admitted scenario: for the sliding log the
// window over the limit, so that it runs full and admits every call; for the others any step
// keeps admitting, and 1 us keeps windows and buckets changing as they do in real use.
template <class A>
constexpr std::chrono::nanoseconds admitted_step() {
  if constexpr (std::is_same_v<A, SlidingLogAlg>)
    return std::chrono::nanoseconds{1ms} / 100;
  else
    return 1us;
}

/// The bytes of state one key holds after its first admission: the model's State, plus for the
/// sliding log the heap its entries take (vector capacity x entry size).
template <class A>
std::size_t state_bytes_per_key() {
  using M = typename A::Model;
  typename M::State s{};
  (void)M::apply(A::params(A::many_keys()), s, 1s, ratelimit::Operation{});
  std::size_t bytes = sizeof(s);
  if constexpr (std::is_same_v<A, SlidingLogAlg>)
    bytes += s.entries.capacity() * sizeof(typename M::Entry);
  return bytes;
}

// --- clocks
// ---------------------------------------------------------------------------------------

// A clock the benchmark can step: ManualClock moves by `step` per call (a plain atomic store);
// SteadyClock ignores it.
template <class C>
struct Ticker {
  C clock{};
  std::int64_t t = 0;
  explicit Ticker(std::chrono::nanoseconds, std::chrono::nanoseconds = {}) {}
  void tick() noexcept {}
};

template <>
struct Ticker<ManualClock> {
  ManualClock clock{};
  std::int64_t t;
  std::int64_t step;
  explicit Ticker(std::chrono::nanoseconds s, std::chrono::nanoseconds start = 1h)
      : t(start.count()), step(s.count()) {
    clock.set(std::chrono::nanoseconds{t});
  }
  void tick() {
    t += step;
    clock.set(std::chrono::nanoseconds{t});
  }
};

template <class C>
constexpr const char* clock_suffix() {
  return std::is_same_v<C, ManualClock> ? "_ManualClock" : "";
}

// --- one key
// ----------------------------------------------------------------------------------------

template <class A, class C>
void one_key(benchmark::State& state, typename A::Config config, std::chrono::nanoseconds step,
             const std::string& key = "client-0000042") {
  Ticker<C> ticker(step);
  typename A::template Limiter<C> limiter(config, InMemoryStorage{}, ticker.clock);
  std::int64_t admitted = 0;
  for (auto _ : state) {
    ticker.tick();
    const Decision d = limiter.try_acquire(key);
    admitted += d.allowed;
    benchmark::DoNotOptimize(d);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["admitted"] =
      static_cast<double>(admitted) / static_cast<double>(state.iterations());
}

template <class A, class C>
void BM_OneKeyAdmitted(benchmark::State& state) {
  one_key<A, C>(state, A::admitting(), admitted_step<A>());
}

// BM_OneKeyAdmitted's take carrying the key's parameters (`try_acquire(key, cost, params)`, a
// plan read per request): the limiter's own, so that both decide alike; the difference is what
// the call costs beyond the take (the parameters' range check).
template <class A, class C>
void BM_OneKeyWithParams(benchmark::State& state) {
  Ticker<C> ticker(admitted_step<A>());
  typename A::template Limiter<C> limiter(A::admitting(), InMemoryStorage{}, ticker.clock);
  const auto plan = limiter.params();
  const std::string key = "client-0000042";
  std::int64_t admitted = 0;
  for (auto _ : state) {
    ticker.tick();
    const Decision d = limiter.try_acquire(key, 1, plan);
    admitted += d.allowed;
    benchmark::DoNotOptimize(d);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["admitted"] =
      static_cast<double>(admitted) / static_cast<double>(state.iterations());
}

// One key, a penalty of one unit per step (a unit's worth of time): every penalty writes the
// state, as an admitted take does (the key never reaches the cap of twice its limit).
template <class A, class C>
void BM_OneKeyPenalty(benchmark::State& state) {
  Ticker<C> ticker(admitted_step<A>());
  typename A::template Limiter<C> limiter(A::admitting(), InMemoryStorage{}, ticker.clock);
  for (auto _ : state) {
    ticker.tick();
    benchmark::DoNotOptimize(limiter.penalty("client-0000042", 1));
  }
  state.SetItemsProcessed(state.iterations());
}

// One key, per step a take of two units then a refund of one of them (at the take's time):
// both write the state, and the key spends one unit per step as in OneKeyAdmitted. Items count
// both, so the time per item is their mean (beside OneKeyAdmitted, the take's alone, it shows
// what a refund costs: 2 x this - OneKeyAdmitted). Not a take of one and its whole refund: that
// leaves the key fresh, so the table drops it and the next take inserts it again (under the
// shard's lock): the pair measured the table's drop and insert beside the refund.
template <class A, class C>
void BM_OneKeyTakeRefund(benchmark::State& state) {
  Ticker<C> ticker(admitted_step<A>());
  typename A::template Limiter<C> limiter(A::admitting(), InMemoryStorage{}, ticker.clock);
  const std::string key = "client-0000042";
  for (auto _ : state) {
    ticker.tick();
    const auto now = ticker.clock.now();
    benchmark::DoNotOptimize(limiter.try_acquire(key, 2, now));
    benchmark::DoNotOptimize(limiter.refund(key, 1, now));
  }
  state.SetItemsProcessed(2 * state.iterations());
}

// One key, a reservation of one unit per step (a unit's worth of time): due at once, it writes
// the state as an admitted take does (the buckets only: the windows refuse reservations).
template <class A, class C>
void BM_OneKeyReserve(benchmark::State& state) {
  Ticker<C> ticker(admitted_step<A>());
  typename A::template Limiter<C> limiter(A::admitting(), InMemoryStorage{}, ticker.clock);
  const std::string key = "client-0000042";
  for (auto _ : state) {
    ticker.tick();
    benchmark::DoNotOptimize(
        limiter.reserve(key, 1, ratelimit::Decision::never, ticker.clock.now()));
  }
  state.SetItemsProcessed(state.iterations());
}

// One key, per step a reservation of one unit then its cancel at the same instant (all of it
// goes back): both write the state. Items count both, as OneKeyTakeRefund.
template <class A, class C>
void BM_OneKeyReserveCancel(benchmark::State& state) {
  Ticker<C> ticker(admitted_step<A>());
  typename A::template Limiter<C> limiter(A::admitting(), InMemoryStorage{}, ticker.clock);
  const std::string key = "client-0000042";
  for (auto _ : state) {
    ticker.tick();
    const auto now = ticker.clock.now();
    const auto r = limiter.reserve(key, 1, ratelimit::Decision::never, now);
    benchmark::DoNotOptimize(limiter.cancel(key, r, now));
  }
  state.SetItemsProcessed(2 * state.iterations());
}

// One key bound once (`limiter.bind_key`): the same decision without hashing the key.
template <class A, class C>
void BM_OneKeyBound(benchmark::State& state) {
  Ticker<C> ticker(admitted_step<A>());
  typename A::template Limiter<C> limiter(A::admitting(), InMemoryStorage{}, ticker.clock);
  auto bound = limiter.bind_key("client-0000042");
  std::int64_t admitted = 0;
  for (auto _ : state) {
    ticker.tick();
    const Decision d = bound.try_acquire();
    admitted += d.allowed;
    benchmark::DoNotOptimize(d);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["admitted"] =
      static_cast<double>(admitted) / static_cast<double>(state.iterations());
}

// No key (the empty key: a limiter with a single state), admitted.
template <class A, class C>
void BM_NoKey(benchmark::State& state) {
  one_key<A, C>(state, A::admitting(), admitted_step<A>(), std::string());
}

template <class A, class C>
void BM_OneKeyDenied(benchmark::State& state) {
  one_key<A, C>(state, A::denying(), 1us);
}

/// The first key from "client-0000042" on whose slot a decision writes `lines` cache lines
/// (`Table::lines_written`), each key tried stored by one decision of `limiter`; empty if none
/// of 1,000 does. Where a key's slot sits depends on the process's hash secret, so a fixed key
/// lands in either kind from one run to the next.
template <class L>
std::string key_on_lines(L& limiter, std::size_t lines) {
  char buf[32];
  for (int i = 42; i < 1042; ++i) {
    std::snprintf(buf, sizeof buf, "client-%07d", i);
    benchmark::DoNotOptimize(limiter.try_acquire(buf));
    if (limiter.binding().table->lines_written(buf) == lines) return buf;
  }
  return {};
}

/// Whether some slot of model A's table spans two cache lines: slots follow a 64-byte header,
/// so only sizes that divide 64 never do.
template <class A>
constexpr bool slots_may_span = 64 % ratelimit::detail::Table<typename A::Model>::slot_bytes() != 0;

// Two threads on one key of one storage. Each thread has its own limiter (bound to the same
// storage and name, so to the same key's state) and, for ManualClock, its own clock: the only
// thing the threads share is the key, not a clock word. The key is one whose slot's written
// words (tag and state) lie in `Lines` cache lines: 2 costs twice as much on this VM, as both
// lines move between the cores at each decision (with 40-byte slots, 3 positions of 8).
template <class A, class C, std::size_t Lines>
void BM_OneKeyTwoThreads(benchmark::State& state) {
  static InMemoryStorage storage;  // shared by the threads, one per instantiation
  // The key outlives a run (Google Benchmark calls this several times): each run's ManualClocks
  // start where the latest clock of the previous runs stopped, so time never steps back.
  static std::atomic<std::int64_t> resume_at{std::chrono::nanoseconds(1h).count()};
  Ticker<C> ticker(admitted_step<A>(), std::chrono::nanoseconds{resume_at.load()});
  typename A::template Limiter<C> limiter(A::admitting(), storage, ticker.clock);
  static const std::string key = key_on_lines(limiter, Lines);  // once, for both threads
  if (key.empty()) {
    state.SkipWithError("no key's slot found with the wanted number of cache lines");
    return;
  }
  const double floor_ns = two_thread_floor_ns();
  std::int64_t admitted = 0;
  for (auto _ : state) {
    ticker.tick();
    const Decision d = limiter.try_acquire(key);
    admitted += d.allowed;
    benchmark::DoNotOptimize(d);
  }
  for (std::int64_t seen = resume_at.load(); seen < ticker.t;)
    if (resume_at.compare_exchange_weak(seen, ticker.t)) break;
  state.SetItemsProcessed(state.iterations());
  state.counters["admitted"] =
      benchmark::Counter(static_cast<double>(admitted) / static_cast<double>(state.iterations()),
                         benchmark::Counter::kAvgThreads);
  state.counters["floor_ns"] = benchmark::Counter(floor_ns, benchmark::Counter::kAvgThreads);
}

// --- a million keys -----------------------------------------------------------------------------

/// The keys, built once before any timing: "client-0000000" .. "client-0999999" (14 bytes, the
/// size of an IPv4 address or a short user id; short enough for std::string's inline buffer).
const std::vector<std::string>& million_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    k.reserve(million);
    char buf[32];
    for (std::int64_t i = 0; i < million; ++i) {
      std::snprintf(buf, sizeof buf, "client-%07lld", static_cast<long long>(i));
      k.emplace_back(buf);
    }
    return k;
  }();
  return keys;
}

/// A fixed random order of the keys, for inserting them (so that the table's memory is not laid
/// out in the order the timed loop visits it).
const std::vector<std::uint32_t>& shuffled_order() {
  static const std::vector<std::uint32_t> order = [] {
    std::vector<std::uint32_t> o(million);
    std::iota(o.begin(), o.end(), 0u);
    std::shuffle(o.begin(), o.end(), std::mt19937_64{42});
    return o;
  }();
  return order;
}

/// The process's resident memory in bytes (/proc/self/statm, second field, in pages).
std::int64_t resident_bytes() {
  long pages_total = 0, pages_resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) pages_resident = 0;
    std::fclose(f);
  }
  return static_cast<std::int64_t>(pages_resident) * sysconf(_SC_PAGESIZE);
}

// Fixed iterations (two passes over the keys) so that the million keys are stored once per run.
constexpr std::int64_t million_keys_iterations = 2 * million;

template <class A, class C>
void BM_MillionKeys(benchmark::State& state) {
  const auto& keys = million_keys();
  const auto& order = shuffled_order();
  // Give back what earlier benchmarks freed, so that this one's growth is its own.
  malloc_trim(0);
  const std::int64_t rss_before = resident_bytes();
  Ticker<C> ticker(1us);
  {
    typename A::template Limiter<C> limiter(A::many_keys(), InMemoryStorage{}, ticker.clock);
    std::int64_t populated = 0;
    for (const std::uint32_t i : order) {
      ticker.tick();
      populated += limiter.try_acquire(keys[i]).allowed;
    }
    const std::int64_t rss_after = resident_bytes();
    if (populated != million || limiter.storage().size() != static_cast<std::size_t>(million))
      state.SkipWithError("populating did not store one admitted state per key");
    // The shards grow in step, so most are still migrating their last resize here (1.64 to
    // 1.83 million slots held, 1.48 to 1.52 million once settled): finish that first, as the
    // naive map is reserved for the keys before it is timed. No key is fresh yet (each spent
    // 1 of 1000 tokens refilled per hour, 1 s ago at most), so none is dropped. Unsettled,
    // decisions also moved 64 slots each until the migrations ended: the token bucket took
    // 323 and 362 ns, against 305 and 315 settled, in alternating runs.
    if (limiter.storage().reclaim(ticker.clock.now()) != 0)
      state.SkipWithError("settling the table dropped keys");

    std::int64_t admitted = 0;
    std::size_t i = 0;
    for (auto _ : state) {
      ticker.tick();
      const Decision d = limiter.try_acquire(keys[i]);
      admitted += d.allowed;
      benchmark::DoNotOptimize(d);
      if (++i == keys.size()) i = 0;
    }
    state.SetItemsProcessed(state.iterations());
    state.counters["admitted"] =
        static_cast<double>(admitted) / static_cast<double>(state.iterations());
    state.counters["keys"] = static_cast<double>(limiter.storage().size());
    state.counters["state_B_per_key"] = static_cast<double>(state_bytes_per_key<A>());
    state.counters["rss_B_per_key"] =
        static_cast<double>(rss_after - rss_before) / static_cast<double>(million);
  }
  malloc_trim(0);
}

// The naive map over the same million keys (inserted in the same random order, bucket of 1000
// refilled at 1000 per hour as the library's), for its time and resident memory per key.
void BM_Naive_UnorderedMapMutex_MillionKeys(benchmark::State& state) {
  const auto& keys = million_keys();
  const auto& order = shuffled_order();
  malloc_trim(0);
  const std::int64_t rss_before = resident_bytes();
  {
    NaiveMapLimiter limiter(1000, 1000.0 / 3.6e12, million);
    std::int64_t populated = 0;
    for (const std::uint32_t i : order) populated += limiter.try_acquire(keys[i]);
    const std::int64_t rss_after = resident_bytes();
    if (populated != million || limiter.size() != static_cast<std::size_t>(million))
      state.SkipWithError("populating did not store one admitted state per key");
    std::int64_t admitted = 0;
    std::size_t i = 0;
    for (auto _ : state) {
      const bool ok = limiter.try_acquire(keys[i]);
      admitted += ok;
      benchmark::DoNotOptimize(ok);
      if (++i == keys.size()) i = 0;
    }
    state.SetItemsProcessed(state.iterations());
    state.counters["admitted"] =
        static_cast<double>(admitted) / static_cast<double>(state.iterations());
    state.counters["keys"] = static_cast<double>(limiter.size());
    state.counters["state_B_per_key"] = static_cast<double>(sizeof(NaiveBucket));
    state.counters["rss_B_per_key"] =
        static_cast<double>(rss_after - rss_before) / static_cast<double>(million);
  }
  malloc_trim(0);
}

// --- registration
// -----------------------------------------------------------------------------------

// RATELIMIT_BENCH_ITERATIONS=N fixes the iterations of the one-key benchmarks (bench/callgrind
// runs them twice, with N and 2N, and divides the difference of the instruction counts by N).
std::int64_t fixed_iterations() {
  const char* v = std::getenv("RATELIMIT_BENCH_ITERATIONS");
  return v != nullptr ? std::atoll(v) : 0;
}

benchmark::internal::Benchmark* maybe_fixed(benchmark::internal::Benchmark* b) {
  if (const std::int64_t n = fixed_iterations(); n > 0) b->Iterations(n);
  return b;
}

template <class A, class C>
void register_algorithm() {
  const std::string base = std::string("BM_") + A::name + "_InMemory_";
  const std::string suffix = clock_suffix<C>();
  maybe_fixed(benchmark::RegisterBenchmark((base + "NoKey" + suffix).c_str(), BM_NoKey<A, C>));
  maybe_fixed(benchmark::RegisterBenchmark((base + "OneKeyAdmitted" + suffix).c_str(),
                                           BM_OneKeyAdmitted<A, C>));
  maybe_fixed(benchmark::RegisterBenchmark((base + "OneKeyWithParams" + suffix).c_str(),
                                           BM_OneKeyWithParams<A, C>));
  maybe_fixed(benchmark::RegisterBenchmark((base + "OneKeyPenalty" + suffix).c_str(),
                                           BM_OneKeyPenalty<A, C>));
  maybe_fixed(benchmark::RegisterBenchmark((base + "OneKeyTakeRefund" + suffix).c_str(),
                                           BM_OneKeyTakeRefund<A, C>));
  if constexpr (ratelimit::Reservable<typename A::Model>) {
    maybe_fixed(benchmark::RegisterBenchmark((base + "OneKeyReserve" + suffix).c_str(),
                                             BM_OneKeyReserve<A, C>));
    maybe_fixed(benchmark::RegisterBenchmark((base + "OneKeyReserveCancel" + suffix).c_str(),
                                             BM_OneKeyReserveCancel<A, C>));
  }
  maybe_fixed(
      benchmark::RegisterBenchmark((base + "OneKeyBound" + suffix).c_str(), BM_OneKeyBound<A, C>));
  maybe_fixed(benchmark::RegisterBenchmark((base + "OneKeyDenied" + suffix).c_str(),
                                           BM_OneKeyDenied<A, C>));
  maybe_fixed(benchmark::RegisterBenchmark((base + "OneKeyTwoThreads" + suffix).c_str(),
                                           BM_OneKeyTwoThreads<A, C, 1>))
      ->Threads(2)
      ->UseRealTime();
  if constexpr (slots_may_span<A>)
    maybe_fixed(benchmark::RegisterBenchmark((base + "OneKeyTwoThreadsTwoLines" + suffix).c_str(),
                                             BM_OneKeyTwoThreads<A, C, 2>))
        ->Threads(2)
        ->UseRealTime();
  benchmark::RegisterBenchmark((base + "MillionKeys" + suffix).c_str(), BM_MillionKeys<A, C>)
      ->Iterations(million_keys_iterations)
      ->Unit(benchmark::kNanosecond);
}

template <class C>
void register_all() {
  register_algorithm<TokenBucketAlg, C>();
  register_algorithm<LeakyBucketAlg, C>();
  register_algorithm<FixedWindowAlg, C>();
  register_algorithm<SlidingCounterAlg, C>();
  register_algorithm<SlidingLogAlg, C>();
}

}  // namespace

int main(int argc, char** argv) {
  maybe_fixed(benchmark::RegisterBenchmark("BM_Floor_SteadyClockNow", BM_Floor_SteadyClockNow));
  maybe_fixed(benchmark::RegisterBenchmark("BM_Floor_AtomicCas", BM_Floor_AtomicCas));
  maybe_fixed(
      benchmark::RegisterBenchmark("BM_Floor_AtomicCasTwoThreads", BM_Floor_AtomicCasTwoThreads))
      ->Threads(2)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_Floor_MemoryLatency", BM_Floor_MemoryLatency);
  benchmark::RegisterBenchmark("BM_Floor_MemoryLatencyClock", BM_Floor_MemoryLatencyClock);
  maybe_fixed(
      benchmark::RegisterBenchmark("BM_Naive_MutexBucket_NoKey", BM_Naive_MutexBucket_NoKey));
  maybe_fixed(benchmark::RegisterBenchmark("BM_Naive_UnorderedMapMutex_OneKey",
                                           BM_Naive_UnorderedMapMutex_OneKey));
  benchmark::RegisterBenchmark("BM_Naive_UnorderedMapMutex_MillionKeys",
                               BM_Naive_UnorderedMapMutex_MillionKeys)
      ->Iterations(million_keys_iterations)
      ->Unit(benchmark::kNanosecond);
  register_all<SteadyClock>();
  register_all<ManualClock>();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
