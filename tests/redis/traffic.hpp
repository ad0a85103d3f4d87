#pragma once
/// @file traffic.hpp
/// Traffic for the deadline tests: threads deciding continuously while a fault is injected,
/// and the longest single decision they saw.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace rltest {

using namespace std::chrono_literals;

struct Tally {
  std::chrono::nanoseconds worst{0};
  std::int64_t decisions = 0;
  std::int64_t degraded = 0;
};

/// `threads` threads call `decide(thread, i)` (which returns true if degraded), 1 ms apart,
/// for `duration`; the longest single call and the counts.
template <class F>
Tally hammer(int threads, std::chrono::milliseconds duration, F decide) {
  std::atomic<bool> stop{false};
  std::vector<Tally> per(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      Tally& mine = per[static_cast<std::size_t>(t)];
      for (int i = 0; !stop.load(); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        const bool degraded = decide(t, i);
        mine.worst =
            std::max<std::chrono::nanoseconds>(mine.worst, std::chrono::steady_clock::now() - t0);
        ++mine.decisions;
        mine.degraded += degraded ? 1 : 0;
        // A service's requests arrive; they do not spin. Short-circuited decisions take
        // microseconds, and 8 threads spinning on them would starve the machine's 2 cores (and
        // the I/O thread), which is the test's load, not the library's lateness.
        std::this_thread::sleep_for(1ms);
      }
    });
  std::this_thread::sleep_for(duration);  // how long the traffic runs, not a wait for a result
  stop = true;
  for (auto& th : pool) th.join();
  Tally all;
  for (const auto& m : per) {
    all.worst = std::max(all.worst, m.worst);
    all.decisions += m.decisions;
    all.degraded += m.degraded;
  }
  return all;
}

inline double ms(std::chrono::nanoseconds d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace rltest
