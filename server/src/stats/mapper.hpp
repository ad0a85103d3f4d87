#pragma once
/// @file stats/mapper.hpp
/// statsd_exporter's mapping language (prometheus/statsd_exporter, pkg/mapper), as far as the
/// reference service's default mapping (src/stats/prom/default_mapper.yaml) and Envoy
/// Gateway's (internal/infrastructure/kubernetes/ratelimit/statsd_conf.yaml) use it.

#include <map>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

namespace ratelimit::server::stats {

/// A statsd event's kind, as `match_metric_type` names it.
enum class MetricKind { counter, gauge, observer };

/// What a mapping makes of a metric.
struct Mapped {
  bool drop = false;                                        ///< `action: drop`
  std::string name;                                         ///< the Prometheus name
  std::vector<std::pair<std::string, std::string>> labels;  ///< sorted by name
  bool histogram = false;       ///< `timer_type` / `observer_type: histogram` (else a summary)
  double scale = 1;             ///< `scale`: an observed value is multiplied by it
  std::vector<double> buckets;  ///< a histogram's upper bounds
};

/// A mapping file. Supported per mapping: `match`, `match_type` (`glob`, the default, or
/// `regex`), `name`, `labels` (values with `$n` / `${n}`: a glob's nth `*`, a regex's group),
/// `match_metric_type` (`counter`, `gauge`, `observer` or `timer`), `timer_type` /
/// `observer_type` (`histogram` or `summary`), `scale`, `action` (`map` or `drop`),
/// `histogram_options.buckets` / `buckets`; `help`, `ttl`, `summary_options` and `quantiles`
/// are accepted and ignored; `defaults` takes `match_type`, `timer_type` / `observer_type` and
/// `buckets`. As statsd_exporter: globs (each `*` one dot-free run) are tried first, the first
/// in file order that matches wins; then regexes (a search, not anchored) in file order.
/// Thread safety: `map` is const and safe from many threads.
class Mapper {
 public:
  /// Parses a mapping file's text (yaml-cpp). Throws `std::invalid_argument` naming `source`,
  /// the mapping's index and the field for a bad one.
  static Mapper parse(const std::string& yaml, const std::string& source);
  /// The reference's default mapping, with its response time `scale: 0.001` removed when
  /// `response_time_as_ms` (PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS, as prometheus_sink.go).
  static Mapper reference_default(bool response_time_as_ms);
  /// The text of the reference's default mapping.
  static std::string_view reference_default_yaml();

  /// The mapping of `metric`, or nullopt when none matches (then statsd_exporter names it
  /// after the metric, see `escape_name`).
  std::optional<Mapped> map(std::string_view metric, MetricKind kind) const;

  /// An unmapped metric's Prometheus name: every character outside [a-zA-Z0-9_] becomes '_',
  /// and a leading digit gets a '_' before it (statsd_exporter's escapeMetricName).
  static std::string escape_name(std::string_view metric);

 private:
  struct Rule {
    bool glob = true;
    std::regex re;
    std::optional<MetricKind> kind;
    bool drop = false;
    std::string name;
    std::vector<std::pair<std::string, std::string>> labels;
    bool histogram = false;
    double scale = 1;
    std::vector<double> buckets;
  };
  std::vector<Rule> rules_;
};

}  // namespace ratelimit::server::stats
