#pragma once
/// @file stats/store.hpp
/// Named counters aggregated in process and flushed to a sink every interval and at shutdown,
/// and timers passed to the sink per call: how lyft/gostats (the reference service's stats
/// library) handles them.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ratelimit::server::stats {

/// Where flushed stats go (statsd, DogStatsD, the Prometheus listener). `counter` and `flush`
/// are called by the store's flush thread; `timer` on the calls' threads, so it must never
/// block. Thread safety: every member safe from many threads.
class Sink {
 public:
  virtual ~Sink() = default;
  /// A counter's increase since the last flush (never 0).
  virtual void counter(std::string_view name, std::uint64_t value) = 0;
  /// One timing, in milliseconds.
  virtual void timer(std::string_view name, double milliseconds) = 0;
  /// The end of a flush round: send what is buffered.
  virtual void flush() {}
  /// Shutdown: deliver what is buffered, waiting at most `deadline`.
  virtual void close(std::chrono::milliseconds /*deadline*/) {}
  /// Lines for the debug listener's /stats ("name: value"), e.g. what was dropped.
  virtual std::vector<std::pair<std::string, std::uint64_t>> own_stats() const { return {}; }
};

/// Counters by name. A counter, once made, lives as long as the store; at most `max_counters`
/// are made, later names share one uncounted slot (counted in `counters_refused`), so
/// descriptor values in stat names (detailed_metric) cannot grow memory without bound.
/// Thread safety: every member safe from many threads.
class Store {
 public:
  /// `sink` may be null (stats kept for /stats only).
  explicit Store(std::shared_ptr<Sink> sink, std::size_t max_counters = 20000);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// The counter of `name`, made on first use; the pointer stays valid for the store's life.
  std::atomic<std::uint64_t>* counter(std::string_view name);
  /// Adds to a counter (see `counter`).
  static void add(std::atomic<std::uint64_t>* c, std::uint64_t n) noexcept {
    if (n != 0) c->fetch_add(n, std::memory_order_relaxed);
  }
  /// Passes one timing (milliseconds) to the sink at once.
  void timer(std::string_view name, double milliseconds);

  /// Sends every counter's increase since the last flush (those that changed) to the sink.
  void flush();
  /// Flushes every `interval` on a thread of its own until `stop`.
  void start(std::chrono::milliseconds interval);
  /// Stops the thread, flushes a last time and closes the sink (waiting at most `deadline`).
  void stop(std::chrono::milliseconds deadline = std::chrono::milliseconds{2000});

  /// Every counter's total since start, by name (the debug listener's /stats).
  std::vector<std::pair<std::string, std::uint64_t>> totals() const;
  /// Names refused because `max_counters` were made.
  std::uint64_t counters_refused() const noexcept {
    return refused_.load(std::memory_order_relaxed);
  }
  const std::shared_ptr<Sink>& sink() const noexcept { return sink_; }

 private:
  struct Slot {
    std::atomic<std::uint64_t> value{0};
    std::uint64_t flushed = 0;  ///< value at the last flush (under flush_mutex_)
  };
  std::shared_ptr<Sink> sink_;
  std::size_t max_counters_;
  mutable std::shared_mutex mutex_;
  std::map<std::string, std::unique_ptr<Slot>, std::less<>> slots_;
  Slot overflow_;
  std::atomic<std::uint64_t> refused_{0};
  std::mutex flush_mutex_;
  std::mutex thread_mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace ratelimit::server::stats
