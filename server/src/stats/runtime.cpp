#include "stats/runtime.hpp"

#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "stats/debug.hpp"
#include "stats/net_sink.hpp"

namespace ratelimit::server::stats {

namespace {

std::shared_ptr<Sink> make_sink(const Options& s, std::shared_ptr<PrometheusSink>& prometheus) {
  if (s.disable_stats) return nullptr;
  if (s.use_prometheus) {
    Mapper mapper = Mapper::reference_default(s.prometheus_response_time_as_ms);
    if (!s.prometheus_mapper_yaml.empty()) {
      std::ifstream in(s.prometheus_mapper_yaml);
      if (!in)
        throw std::invalid_argument("PROMETHEUS_MAPPER_YAML = \"" + s.prometheus_mapper_yaml +
                                    "\": cannot read the file");
      std::ostringstream text;
      text << in.rdbuf();
      mapper = Mapper::parse(text.str(), "PROMETHEUS_MAPPER_YAML " + s.prometheus_mapper_yaml);
    }
    prometheus = std::make_shared<PrometheusSink>(std::move(mapper));
    return prometheus;
  }
  if (s.use_dog_statsd || s.use_statsd) {
    NetSinkOptions o;
    o.host = s.statsd_host;
    o.port = s.statsd_port;
    o.udp = s.statsd_udp;
    o.dog = s.use_dog_statsd;
    for (const Options::Mogrifier& m : s.mogrifiers) {
      Mogrifier mog;
      mog.label = m.label;
      try {
        mog.pattern = std::regex(m.pattern, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        throw std::invalid_argument("DOG_STATSD_MOGRIFIER_" + m.label + "_PATTERN = \"" +
                                    m.pattern + "\": " + e.what());
      }
      mog.name = m.name;
      mog.tags = m.tags;
      o.mogrifiers.push_back(std::move(mog));
    }
    return std::make_shared<NetSink>(std::move(o));
  }
  return nullptr;  // the reference logs its stats instead; nothing is sent here
}

/// "host:port" or ":port" (Go's listen address); an empty host listens on every address.
std::pair<std::string, int> listen_address(const std::string& name, const std::string& v) {
  const auto colon = v.rfind(':');
  int port = -1;
  if (colon != std::string::npos) {
    try {
      std::size_t used = 0;
      port = std::stoi(v.substr(colon + 1), &used);
      if (used != v.size() - colon - 1) port = -1;
    } catch (const std::exception&) {
    }
  }
  if (port < 0 || port > 65535)
    throw std::invalid_argument(name + " = \"" + v + "\": expected host:port or :port");
  std::string host = v.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return {host.empty() ? "0.0.0.0" : host, port};
}

}  // namespace

Options options_from(const Settings& s) {
  Options o;
  o.disable_stats = s.disable_stats;
  o.use_statsd = s.use_statsd;
  o.use_dog_statsd = s.use_dog_statsd;
  o.use_prometheus = s.use_prometheus;
  o.statsd_host = s.statsd_host;
  o.statsd_port = static_cast<int>(s.statsd_port);
  o.statsd_udp = s.statsd_protocol == "udp";
  o.flush_interval = std::chrono::duration_cast<std::chrono::milliseconds>(s.stats_flush_interval);
  o.extra_tags = s.extra_tags;
  for (const Settings::DogMogrifier& m : s.dog_statsd_mogrifier_sets)
    o.mogrifiers.push_back({m.label, m.pattern, m.name, m.tags});
  o.prometheus_addr = s.prometheus_addr;
  o.prometheus_path = s.prometheus_path;
  o.prometheus_mapper_yaml = s.prometheus_mapper_yaml;
  o.prometheus_response_time_as_ms = s.prometheus_response_time_as_ms;
  o.debug_host = s.debug_host;
  o.debug_port = static_cast<int>(s.debug_port);
  o.near_limit_ratio = static_cast<float>(s.near_limit_ratio);
  return o;
}

Runtime::Runtime(Options options) : settings_(std::move(options)) {
  if (settings_.use_prometheus) (void)listen_address("PROMETHEUS_ADDR", settings_.prometheus_addr);
  store_ = std::make_shared<Store>(make_sink(settings_, prometheus_));
  observer_ = std::make_shared<GoStats>(store_, settings_.extra_tags, settings_.near_limit_ratio);
  store_->start(settings_.flush_interval);
}

Runtime::~Runtime() { stop(); }

DescriptorObserver Runtime::descriptor_observer() const {
  if (!has_sink()) return nullptr;
  return stats::descriptor_observer(observer_);
}

void Runtime::start_listeners(std::function<std::shared_ptr<const RulesConfig>()> config) {
  if (prometheus_) {
    const auto [host, port] = listen_address("PROMETHEUS_ADDR", settings_.prometheus_addr);
    prometheus_http_ = std::make_unique<HttpServer>(
        host, port,
        std::vector<HttpRoute>{
            {settings_.prometheus_path, false,
             [p = prometheus_](const std::string&) {
               return HttpReply{200, "text/plain; version=0.0.4; charset=utf-8", p->render()};
             }}},
        "PROMETHEUS_ADDR");
  }
  try {
    debug_http_ =
        std::make_unique<HttpServer>(settings_.debug_host, settings_.debug_port,
                                     debug_routes(std::move(config), store_), "DEBUG_PORT");
    std::cerr << "ratelimit_server: debug listener on " << settings_.debug_host << ":"
              << debug_http_->port()
              << " (/rlconfig, /stats; /debug/pprof/ is answered 404: Go's profiler has no "
                 "counterpart here)\n";
  } catch (const std::exception& e) {
    // As the reference: a debug listener that cannot listen is reported, not fatal.
    std::cerr << "ratelimit_server: failed to open the debug listener: " << e.what() << "\n";
  }
}

void Runtime::stop() {
  if (debug_http_) debug_http_->stop();
  // The last flush goes to the sink before the Prometheus listener stops.
  store_->stop();
  if (prometheus_http_) prometheus_http_->stop();
}

}  // namespace ratelimit::server::stats
