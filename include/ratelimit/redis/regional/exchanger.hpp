#pragma once
/// @file redis/regional/exchanger.hpp
/// The background exchange of a regional storage: a thread that runs one exchange round every
/// `RegionalOptions::exchange_interval`, dated by the clock policy's reading.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

#include "../../core/clock.hpp"
#include "storage.hpp"

namespace ratelimit {

/// Runs `storage.exchange(clock.now())` every `exchange_interval` of real time until destroyed
/// (then finishes the round under way and stops). A round that fails to reach a region is
/// reported through the storage's listeners and stats and retried at the next interval.
/// Tests need none: they call `RegionalStorage::exchange` on a ManualClock's time.
/// Thread safety: construct and destroy from one thread; it shares the storage (a handle).
template <Clock C = SystemClock>
class RegionalExchanger {
 public:
  explicit RegionalExchanger(RegionalStorage storage, C clock = {})
      : storage_(std::move(storage)), clock_(std::move(clock)), thread_([this] { run(); }) {}
  ~RegionalExchanger() {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  RegionalExchanger(const RegionalExchanger&) = delete;
  RegionalExchanger& operator=(const RegionalExchanger&) = delete;

 private:
  /// Rounds start every S (a fixed rate: a round's own time does not add to the interval,
  /// which the bound U >= N (S + 2d) / W assumes); a round longer than S starts the next at once.
  void run() {
    const auto interval = storage_.options().exchange_interval;
    auto next = std::chrono::steady_clock::now() + interval;
    std::unique_lock lock(mutex_);
    while (!wake_.wait_until(lock, next, [this] { return stop_; })) {
      next = std::max(next + interval, std::chrono::steady_clock::now());
      lock.unlock();
      try {
        (void)storage_.exchange(clock_.now());
      } catch (...) {  // out of memory, say: the next interval tries again
      }
      lock.lock();
    }
  }

  RegionalStorage storage_;
  C clock_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;  ///< last: starts once every member above exists
};

}  // namespace ratelimit
