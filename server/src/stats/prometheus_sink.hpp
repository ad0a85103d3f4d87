#pragma once
/// @file stats/prometheus_sink.hpp
/// The reference service's Prometheus sink (USE_PROMETHEUS, src/stats/prom/prometheus_sink.go):
/// statsd events turned into Prometheus metrics by a statsd_exporter mapping (`Mapper`) and
/// served as Prometheus text on PROMETHEUS_ADDR + PROMETHEUS_PATH.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "stats/mapper.hpp"
#include "stats/store.hpp"

namespace ratelimit::server::stats {

/// Counters (added at each flush) and timers (observed per call) through the mapping; a metric
/// no mapping matches is named by `Mapper::escape_name` (a counter, or a summary of sum and
/// count for a timer); `action: drop` drops it. Bounded: at most `max_series` label sets in
/// all (later ones are dropped and counted), and a mapping's result is cached for at most as
/// many names. An event whose name is already a family of another kind is dropped and counted,
/// as statsd_exporter does with conflicting events. Thread safety: every member safe from
/// many threads.
class PrometheusSink final : public Sink {
 public:
  explicit PrometheusSink(Mapper mapper, std::size_t max_series = 10000);

  void counter(std::string_view name, std::uint64_t value) override;
  void timer(std::string_view name, double milliseconds) override;
  std::vector<std::pair<std::string, std::uint64_t>> own_stats() const override;

  /// Prometheus text exposition (format 0.0.4), families sorted by name.
  std::string render() const;

 private:
  enum class Type { counter, histogram, summary };
  struct Series {
    double value = 0;                 ///< a counter's value
    std::vector<std::uint64_t> hits;  ///< a histogram's count per bucket (not cumulative)
    double sum = 0;
    std::uint64_t count = 0;
  };
  struct Family {
    Type type = Type::counter;
    std::vector<double> buckets;
    std::map<std::string, Series> series;  ///< by rendered label set "{a=\"x\"}"
  };
  const std::optional<Mapped>* mapping(std::string_view name, MetricKind kind);
  void record(std::string_view name, MetricKind kind, double value);

  Mapper mapper_;
  std::size_t max_series_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::optional<Mapped>> cache_[2];
  std::map<std::string, Family> families_;
  std::size_t series_ = 0;
  std::uint64_t dropped_series_ = 0, conflicts_ = 0, dropped_by_mapping_ = 0;
};

}  // namespace ratelimit::server::stats
