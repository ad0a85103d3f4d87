// ratelimit_server: a drop-in for Envoy's rate limit service (envoyproxy/ratelimit), configured
// like it through environment variables (or the same settings as flags; see settings.hpp and
// server/README.md). SIGTERM or SIGINT shuts it down gracefully: it stops accepting calls,
// answers those in flight, and exits 0.

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <pthread.h>
#include <unistd.h>

#include <ratelimit/metrics.hpp>

#include "config_watcher.hpp"
#include "counters.hpp"
#include "grpc_server.hpp"
#include "http_server.hpp"
#include "service.hpp"
#include "settings.hpp"
#include "stats/runtime.hpp"

extern char** environ;

namespace {

using namespace ratelimit::server;

std::vector<std::string> environment_names() {
  std::vector<std::string> names;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv(*e);
    names.push_back(kv.substr(0, kv.find('=')));
  }
  return names;
}

int run(int argc, char** argv) {
  const Settings settings = read_settings(
      [](const std::string& name) -> std::optional<std::string> {
        const char* v = std::getenv(name.c_str());
        if (v == nullptr) return std::nullopt;
        return std::string(v);
      },
      std::vector<std::string>(argv + 1, argv + argc), environment_names());
  // Block the stop signals in every thread; the main thread waits for them below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  ServiceSettings service_settings;
  service_settings.global_shadow_mode = settings.shadow_mode;
  service_settings.response_headers = settings.response_headers;
  service_settings.limit_header = settings.limit_header;
  service_settings.remaining_header = settings.remaining_header;
  service_settings.reset_header = settings.reset_header;
  service_settings.over_limit_cache_bytes = settings.local_cache_bytes;
  service_settings.all_or_nothing = settings.all_or_nothing;
  service_settings.stop_increment_when_over = settings.stop_increment_when_over;
  auto exporter = std::make_shared<ratelimit::PrometheusExporter>();
  service_settings.listener = exporter;
  stats::Runtime stats(settings);
  service_settings.stats = stats.observer();
  auto service = std::make_shared<Service>(make_counters(settings, exporter), service_settings);

  ConfigWatcher watcher(service, settings.config_dir(), settings.runtime_ignore_dotfiles,
                        settings.merge_domain_config ? ratelimit::DomainMerge::merge
                                                     : ratelimit::DomainMerge::refuse);
  watcher.poll();
  watcher.start(std::chrono::seconds{1});
  const auto healthy = [&] { return !settings.healthy_with_config_only || watcher.loaded(); };

  GrpcServer grpc(service, settings.grpc_host + ":" + std::to_string(settings.grpc_port));
  grpc.set_serving(healthy());
  HttpServer http(service, healthy, settings.http_host, settings.http_port,
                  [exporter] { return exporter->render(); });
  std::cerr << "ratelimit_server: gRPC on " << settings.grpc_host << ":" << grpc.port()
            << ", HTTP on " << settings.http_host << ":" << http.port() << ", rules from "
            << settings.config_dir().string() << "\n";
  stats.start_listeners([service] { return service->config(); });

  int signal = 0;
  timespec tick{1, 0};
  while (true) {
    signal = sigtimedwait(&stop_signals, nullptr, &tick);
    if (signal == SIGTERM || signal == SIGINT) break;
    grpc.set_serving(healthy());
  }
  std::cerr << "ratelimit_server: signal " << signal << ", shutting down\n";
  http.stop();
  grpc.shutdown(settings.shutdown_grace);
  watcher.stop();
  stats.stop();  // the last flush of the counters
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "ratelimit_server: " << e.what() << "\n";
    return 2;
  }
}
