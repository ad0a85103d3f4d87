#pragma once
/// @file stats/net_sink.hpp
/// statsd and DogStatsD over the network, never in a call's way: lines are appended to a
/// bounded buffer under a short lock and a thread of its own writes them with non-blocking
/// sockets; when the daemon is stopped, slow or gone, what does not fit is dropped and counted.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "stats/store.hpp"

namespace ratelimit::server::stats {

/// One DogStatsD mogrifier (the reference's DOG_STATSD_MOGRIFIER_<NAME>_{PATTERN,NAME,TAGS},
/// src/godogstats/mogrifier_map.go): a stat whose name the pattern finds (a search, RE2-like
/// syntax as far as ECMAScript shares it) is renamed to `name` and tagged with `tags`, `$n` in
/// either replaced by the pattern's group n.
struct Mogrifier {
  std::string label;  ///< its NAME in USE_DOG_STATSD_MOGRIFIERS, for errors
  std::regex pattern;
  std::string name;
  std::map<std::string, std::string> tags;
};

/// How the sink writes.
struct NetSinkOptions {
  std::string host = "localhost";  ///< STATSD_HOST
  int port = 8125;                 ///< STATSD_PORT
  bool udp = false;                ///< STATSD_PROTOCOL=udp (DogStatsD is always UDP, as datadog-go)
  /// DogStatsD: "name:value|c|#k:v,..." with EXTRA_TAGS moved from the name into tags and the
  /// mogrifiers applied; else statsd with gostats' names as they are.
  bool dog = false;
  std::vector<Mogrifier> mogrifiers;
  /// Bytes waiting to be written at most (appended but not yet handed to the socket, plus
  /// what the socket refused); past it new lines are dropped.
  std::size_t max_buffered = std::size_t{1} << 20;
};

/// A statsd (lyft/gostats' net sink: "name:value|c\n", "name:value|ms\n") or DogStatsD
/// (datadog-go) client. Connects lazily and again after a failure, once a second at most.
/// Thread safety: every member safe from many threads.
class NetSink final : public Sink {
 public:
  explicit NetSink(NetSinkOptions options);
  ~NetSink() override;
  NetSink(const NetSink&) = delete;
  NetSink& operator=(const NetSink&) = delete;

  void counter(std::string_view name, std::uint64_t value) override;
  void timer(std::string_view name, double milliseconds) override;
  void flush() override;
  void close(std::chrono::milliseconds deadline) override;
  std::vector<std::pair<std::string, std::uint64_t>> own_stats() const override;

  /// Bytes buffered now (at most `max_buffered`).
  std::size_t buffered() const;
  std::uint64_t dropped_bytes() const noexcept { return dropped_.load(std::memory_order_relaxed); }
  std::uint64_t sent_bytes() const noexcept { return sent_.load(std::memory_order_relaxed); }

  /// The DogStatsD form of a gostats name: EXTRA_TAGS' ".__k=v" suffixes become tags "k:v",
  /// then the first mogrifier whose pattern finds the name renames it and adds its tags.
  static std::pair<std::string, std::vector<std::string>> mogrify(
      std::string_view name, const std::vector<Mogrifier>& mogrifiers);

 private:
  void append(std::string_view name, std::string_view value, std::string_view type);
  void run();
  bool connect_now();
  void disconnect();
  /// Writes from `out_` without blocking; false when the connection failed.
  bool write_some();

  NetSinkOptions options_;
  mutable std::mutex mutex_;  ///< guards buffer_, stop_, flush_wanted_
  std::condition_variable wake_;
  std::string buffer_;
  bool stop_ = false;
  std::chrono::steady_clock::time_point close_deadline_{};
  bool flush_wanted_ = false;
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint64_t> sent_{0};
  std::atomic<std::size_t> out_size_{0};
  // The writer thread's own.
  std::string out_;
  int fd_ = -1;
  bool mid_line_ = false;  ///< the last write ended inside a line
  std::chrono::steady_clock::time_point next_connect_{};
  bool warned_ = false;
  std::thread thread_;
};

}  // namespace ratelimit::server::stats
