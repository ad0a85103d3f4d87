// Replays one bursty day-in-the-life of a client through all five algorithms, each limiting to
// the same nominal 100 requests per minute, and prints what each one let through.
//
// Traffic (one key, time from a ManualClock, so the run is instant and reproducible):
//   steady    1 request per second for a minute (60/min: under the limit)
//   burst     150 requests in 0.75 s, 30 s later
//   boundary  200 requests in 1 s straddling the minute boundary at 3:00 (100 before, 100 after)
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <ratelimit/ratelimit.hpp>

namespace {

using namespace std::chrono_literals;
using std::chrono::nanoseconds;

enum Phase { kSteady, kBurst, kBoundary, kPhases };

struct Request {
  nanoseconds at;
  Phase phase;
};

std::vector<Request> make_traffic() {
  std::vector<Request> traffic;
  for (int i = 0; i < 60; ++i) traffic.push_back({i * 1s, kSteady});
  for (int i = 0; i < 150; ++i) traffic.push_back({90s + i * 5ms, kBurst});
  for (int i = 0; i < 200; ++i) traffic.push_back({179500ms + i * 5ms, kBoundary});
  return traffic;
}

struct Stats {
  int admitted = 0;
  int denied = 0;
  int admitted_in[kPhases] = {};
  int max_admitted_per_second = 0;  // over admission times
  int max_served_per_second = 0;    // over admission time + delay (differs for the leaky bucket)
  nanoseconds mean_delay{0};
};

// The most times in any half-open span [t, t + 1 s).
int max_in_one_second(std::vector<nanoseconds> times) {
  std::sort(times.begin(), times.end());
  int best = 0;
  std::size_t first = 0;
  for (std::size_t last = 0; last < times.size(); ++last) {
    while (times[last] - times[first] >= 1s) ++first;
    best = std::max(best, static_cast<int>(last - first + 1));
  }
  return best;
}

template <class Limiter>
Stats replay(Limiter& limiter, ratelimit::ManualClock& clock, const std::vector<Request>& traffic) {
  Stats s;
  std::vector<nanoseconds> admitted_at, served_at;
  nanoseconds total_delay{0};
  for (const Request& r : traffic) {
    clock.set(r.at);
    const ratelimit::Decision d = limiter.try_acquire("client");
    if (!d.allowed) {
      ++s.denied;
      continue;
    }
    ++s.admitted;
    ++s.admitted_in[r.phase];
    admitted_at.push_back(r.at);
    served_at.push_back(r.at + d.delay);
    total_delay += d.delay;
  }
  s.max_admitted_per_second = max_in_one_second(admitted_at);
  s.max_served_per_second = max_in_one_second(served_at);
  if (s.admitted > 0) s.mean_delay = total_delay / s.admitted;
  return s;
}

void print_row(const char* name, const Stats& s, const std::string& bytes) {
  std::printf("%-16s %8d %6d %7d %6d %9d %10d %9d %11.2f s  %s\n", name, s.admitted, s.denied,
              s.admitted_in[kSteady], s.admitted_in[kBurst], s.admitted_in[kBoundary],
              s.max_admitted_per_second, s.max_served_per_second,
              std::chrono::duration<double>(s.mean_delay).count(), bytes.c_str());
}

}  // namespace

int main() {
  using namespace ratelimit;
  using Clock = ManualClock;
  const std::vector<Request> traffic = make_traffic();
  int offered[kPhases] = {};
  for (const Request& r : traffic) ++offered[r.phase];

  std::printf(
      "Nominal limit: 100 per minute for every algorithm (token bucket: capacity 100,\n"
      "refill 100/min; leaky bucket: queue 100, leak 100/min). Offered: %d steady\n"
      "(1/s for 60 s), %d in a 0.75 s burst at 1:30, %d in the second around 3:00.\n\n",
      offered[kSteady], offered[kBurst], offered[kBoundary]);
  std::printf("%-16s %8s %6s %7s %6s %9s %10s %9s %13s  %s\n", "algorithm", "admitted", "denied",
              "steady", "burst", "boundary", "max/1s in", "max/1s out", "mean delay",
              "state bytes/key");

  // Each limiter gets its own clock and storage, so every run starts from a fresh key at t = 0.
  {
    Clock clock;
    TokenBucket<Clock> limiter({100, per_minute(100)}, {}, clock);
    print_row("token bucket", replay(limiter, clock, traffic),
              std::to_string(sizeof(TokenBucketModel::State)));
  }
  {
    Clock clock;
    LeakyBucket<Clock> limiter({100, per_minute(100)}, {}, clock);
    print_row("leaky bucket", replay(limiter, clock, traffic),
              std::to_string(sizeof(LeakyBucketModel::State)));
  }
  {
    Clock clock;
    FixedWindow<Clock> limiter(per_minute(100), {}, clock);
    print_row("fixed window", replay(limiter, clock, traffic),
              std::to_string(sizeof(FixedWindowModel::State)));
  }
  {
    Clock clock;
    SlidingCounter<Clock> limiter(per_minute(100), {}, clock);
    print_row("sliding counter", replay(limiter, clock, traffic),
              std::to_string(sizeof(SlidingCounterModel::State)));
  }
  {
    Clock clock;
    SlidingLog<Clock> limiter(per_minute(100), {}, clock);
    constexpr std::size_t entry = sizeof(SlidingLogModel::Entry);
    print_row("sliding log", replay(limiter, clock, traffic),
              std::to_string(sizeof(SlidingLogModel::State)) + " + " + std::to_string(entry) +
                  " per entry (<= " + std::to_string(sizeof(SlidingLogModel::State) + 100 * entry) +
                  ")");
  }

  std::printf(
      "\nmax/1s in: most requests admitted within any one second; max/1s out: the same, counted\n"
      "when served (admission + delay). The fixed window admits 2x its limit in the second\n"
      "around 3:00 (the boundary problem); the leaky bucket admits the same requests as the\n"
      "token bucket but delays them to the leak rate. State bytes are sizeof(Model::State); the\n"
      "sliding log also keeps one 16-byte entry per distinct admission time, at most 100 here.\n");
  return 0;
}
