#include "stats/mapper.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include <yaml-cpp/yaml.h>

namespace ratelimit::server::stats {

namespace {

/// The reference service's default mapping, as in envoyproxy/ratelimit's
/// src/stats/prom/default_mapper.yaml (the names and labels its dashboards rely on).
constexpr std::string_view default_yaml =
    R"(# Requires statsd exporter >= v0.6.0 since it uses the "drop" action.
mappings:
  - match: "ratelimit.service.rate_limit.*.*.near_limit"
    name: "ratelimit_service_rate_limit_near_limit"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
  - match: "ratelimit.service.rate_limit.*.*.over_limit"
    name: "ratelimit_service_rate_limit_over_limit"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "ratelimit_service_rate_limit_total_hits"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
  - match: "ratelimit.service.rate_limit.*.*.within_limit"
    name: "ratelimit_service_rate_limit_within_limit"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
  - match: "ratelimit.service.rate_limit.*.*.shadow_mode"
    name: "ratelimit_service_rate_limit_shadow_mode"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"

  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.near_limit"
    match_type: regex
    name: "ratelimit_service_rate_limit_near_limit"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
      key2: "$3"
  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.over_limit"
    match_type: regex
    name: "ratelimit_service_rate_limit_over_limit"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
      key2: "$3"
  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.total_hits"
    match_type: regex
    name: "ratelimit_service_rate_limit_total_hits"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
      key2: "$3"
  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.within_limit"
    match_type: regex
    name: "ratelimit_service_rate_limit_within_limit"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
      key2: "$3"
  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.shadow_mode"
    match_type: regex
    name: "ratelimit_service_rate_limit_shadow_mode"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
      key2: "$3"

  - match: "ratelimit.service.call.should_rate_limit.*"
    name: "ratelimit_service_should_rate_limit_error"
    match_metric_type: counter
    labels:
      err_type: "$1"

  - match: "ratelimit_server.*.total_requests"
    name: "ratelimit_service_total_requests"
    match_metric_type: counter
    labels:
      grpc_method: "$1"
  - match: "ratelimit_server.*.response_time"
    name: "ratelimit_service_response_time_seconds"
    timer_type: histogram
    scale: 0.001
    labels:
      grpc_method: "$1"

  - match: "ratelimit.service.config_load_success"
    name: "ratelimit_service_config_load_success"
    match_metric_type: counter
  - match: "ratelimit.service.config_load_error"
    name: "ratelimit_service_config_load_error"
    match_metric_type: counter
)";

/// client_golang's DefBuckets, statsd_exporter's default histogram buckets (seconds).
const std::vector<double> default_buckets{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10};

std::string regex_of_glob(const std::string& glob) {
  std::string re = "^";
  for (char c : glob) {
    if (c == '*')
      re += "([^.]*)";
    else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')
      re += c;
    else {
      re += '\\';
      re += c;
    }
  }
  re += '$';
  return re;
}

/// `$n` and `${n}` replaced by group n (empty when there is none), as Go's Regexp.Expand and
/// statsd_exporter's glob formatter do for numbered groups.
std::string expand_template(const std::string& tpl, const std::smatch& m) {
  std::string out;
  for (std::size_t i = 0; i < tpl.size(); ++i) {
    if (tpl[i] != '$' || i + 1 >= tpl.size()) {
      out += tpl[i];
      continue;
    }
    std::size_t j = i + 1;
    const bool braced = tpl[j] == '{';
    if (braced) ++j;
    const std::size_t start = j;
    while (j < tpl.size() && std::isdigit(static_cast<unsigned char>(tpl[j]))) ++j;
    if (j == start || (braced && (j >= tpl.size() || tpl[j] != '}'))) {
      out += tpl[i];
      continue;
    }
    const std::string digits = tpl.substr(start, j - start);
    const std::size_t n = digits.size() > 6 ? m.size() : std::stoul(digits);
    if (n < m.size() && m[n].matched) out += m[n].str();
    i = braced ? j : j - 1;
  }
  return out;
}

bool valid_label_name(const std::string& s) {
  // statsd_exporter's labelNameRE: ^[a-zA-Z_][a-zA-Z0-9_]+$
  if (s.size() < 2 || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_'))
    return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

bool valid_name_template(const std::string& s) {
  // metricNameRE: letters, digits, '_' and $n / ${n}; not starting with a digit.
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '{' ||
           c == '}';
  });
}

std::vector<double> read_buckets(const YAML::Node& n, const std::string& where) {
  if (!n.IsSequence() || n.size() == 0)
    throw std::invalid_argument(where + ": expected a list of numbers");
  std::vector<double> out;
  for (const auto& b : n) out.push_back(b.as<double>());
  if (!std::is_sorted(out.begin(), out.end()))
    throw std::invalid_argument(where + ": buckets must be in increasing order");
  return out;
}

bool histogram_of(const std::string& v, const std::string& where) {
  if (v == "histogram") return true;
  if (v == "summary" || v.empty()) return false;
  throw std::invalid_argument(where + " = \"" + v + "\": expected histogram or summary");
}

}  // namespace

std::string_view Mapper::reference_default_yaml() { return default_yaml; }

Mapper Mapper::reference_default(bool response_time_as_ms) {
  std::string text(default_yaml);
  if (response_time_as_ms) {
    // As prometheus_sink.go's mapperConfig: the first "    scale: 0.001\n" removed.
    const std::string scale = "    scale: 0.001\n";
    if (const auto at = text.find(scale); at != std::string::npos) text.erase(at, scale.size());
  }
  return parse(text, "the default mapping");
}

Mapper Mapper::parse(const std::string& yaml, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(source + ": not YAML: " + e.what());
  }
  if (!root.IsMap()) throw std::invalid_argument(source + ": expected a mapping with `mappings`");
  bool default_glob = true;
  bool default_histogram = false;
  std::vector<double> buckets = default_buckets;
  try {
    if (const auto d = root["defaults"]) {
      if (const auto v = d["match_type"]) {
        const auto t = v.as<std::string>();
        if (t != "glob" && t != "regex")
          throw std::invalid_argument(source + ": defaults.match_type = \"" + t +
                                      "\": expected glob or regex");
        default_glob = t == "glob";
      }
      if (const auto v = d["timer_type"] ? d["timer_type"] : d["observer_type"])
        default_histogram = histogram_of(v.as<std::string>(), source + ": defaults.timer_type");
      if (const auto v = d["buckets"]) buckets = read_buckets(v, source + ": defaults.buckets");
      if (const auto v = d["histogram_options"]; v && v["buckets"])
        buckets = read_buckets(v["buckets"], source + ": defaults.histogram_options.buckets");
    }
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(source + ": defaults: " + e.what());
  }
  Mapper out;
  const auto mappings = root["mappings"];
  if (mappings && !mappings.IsSequence())
    throw std::invalid_argument(source + ": mappings: expected a list");
  std::size_t index = 0;
  for (const auto& m : mappings) {
    const std::string where = source + ": mappings[" + std::to_string(index++) + "]";
    try {
      if (!m.IsMap()) throw std::invalid_argument(where + ": expected a mapping");
      for (const auto& kv : m) {
        static const std::vector<std::string> known{"match",
                                                    "match_type",
                                                    "name",
                                                    "labels",
                                                    "match_metric_type",
                                                    "timer_type",
                                                    "observer_type",
                                                    "scale",
                                                    "action",
                                                    "buckets",
                                                    "histogram_options",
                                                    "help",
                                                    "ttl",
                                                    "summary_options",
                                                    "quantiles"};
        const auto key = kv.first.as<std::string>();
        if (std::find(known.begin(), known.end(), key) == known.end())
          throw std::invalid_argument(where + "." + key + ": not a field this server reads");
      }
      Rule r;
      if (!m["match"]) throw std::invalid_argument(where + ".match: missing");
      const std::string match = m["match"].as<std::string>();
      r.glob = default_glob;
      if (const auto v = m["match_type"]) {
        const auto t = v.as<std::string>();
        if (t != "glob" && t != "regex")
          throw std::invalid_argument(where + ".match_type = \"" + t +
                                      "\": expected glob or regex");
        r.glob = t == "glob";
      }
      try {
        r.re = std::regex(r.glob ? regex_of_glob(match) : match, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        throw std::invalid_argument(where + ".match = \"" + match + "\": " + e.what());
      }
      if (const auto v = m["action"]) {
        const auto a = v.as<std::string>();
        if (a != "map" && a != "drop")
          throw std::invalid_argument(where + ".action = \"" + a + "\": expected map or drop");
        r.drop = a == "drop";
      }
      r.name = m["name"] ? m["name"].as<std::string>() : "";
      if (r.name.empty()) throw std::invalid_argument(where + ".name: missing");
      if (!valid_name_template(r.name))
        throw std::invalid_argument(where + ".name = \"" + r.name +
                                    "\": not a Prometheus metric name");
      if (const auto v = m["labels"]) {
        if (!v.IsMap()) throw std::invalid_argument(where + ".labels: expected a mapping");
        for (const auto& kv : v) {
          const auto key = kv.first.as<std::string>();
          if (!valid_label_name(key))
            throw std::invalid_argument(where + ".labels." + key + ": not a label name");
          r.labels.emplace_back(key, kv.second.as<std::string>());
        }
        std::sort(r.labels.begin(), r.labels.end());
      }
      if (const auto v = m["match_metric_type"]) {
        const auto t = v.as<std::string>();
        if (t == "counter")
          r.kind = MetricKind::counter;
        else if (t == "gauge")
          r.kind = MetricKind::gauge;
        else if (t == "observer" || t == "timer")
          r.kind = MetricKind::observer;
        else
          throw std::invalid_argument(where + ".match_metric_type = \"" + t +
                                      "\": expected counter, gauge or observer");
      }
      r.histogram = default_histogram;
      if (const auto v = m["timer_type"] ? m["timer_type"] : m["observer_type"])
        r.histogram = histogram_of(v.as<std::string>(), where + ".timer_type");
      if (const auto v = m["scale"]) r.scale = v.as<double>();
      r.buckets = buckets;
      if (const auto v = m["buckets"]) r.buckets = read_buckets(v, where + ".buckets");
      if (const auto v = m["histogram_options"]; v && v["buckets"])
        r.buckets = read_buckets(v["buckets"], where + ".histogram_options.buckets");
      out.rules_.push_back(std::move(r));
    } catch (const YAML::Exception& e) {
      throw std::invalid_argument(where + ": " + e.what());
    }
  }
  // Globs first, in file order; then regexes, in file order.
  std::stable_partition(out.rules_.begin(), out.rules_.end(), [](const Rule& r) { return r.glob; });
  return out;
}

std::optional<Mapped> Mapper::map(std::string_view metric, MetricKind kind) const {
  const std::string s(metric);
  for (const Rule& r : rules_) {
    if (r.kind && *r.kind != kind) continue;
    std::smatch m;
    if (!std::regex_search(s, m, r.re)) continue;
    Mapped out;
    out.drop = r.drop;
    out.name = expand_template(r.name, m);
    for (const auto& [key, tpl] : r.labels) out.labels.emplace_back(key, expand_template(tpl, m));
    out.histogram = r.histogram;
    out.scale = r.scale;
    out.buckets = r.buckets;
    return out;
  }
  return std::nullopt;
}

std::string Mapper::escape_name(std::string_view metric) {
  std::string out;
  if (!metric.empty() && std::isdigit(static_cast<unsigned char>(metric[0]))) out += '_';
  for (char c : metric) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

}  // namespace ratelimit::server::stats
