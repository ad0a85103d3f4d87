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
#include "xds/xds_client.hpp"

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
  for (const std::string& note : settings.notes) std::cerr << "ratelimit_server: " << note << "\n";
  const XdsSettings xds_settings = ratelimit::server::xds_settings(settings);
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
  service_settings.over_limit_cache_bytes = static_cast<std::size_t>(settings.local_cache_bytes);
  service_settings.all_or_nothing = settings.all_or_nothing;
  service_settings.stop_increment_when_over = settings.stop_increment_when_over;
  auto exporter = std::make_shared<ratelimit::PrometheusExporter>();
  service_settings.listener = exporter;
  auto service = std::make_shared<Service>(make_counters(settings, exporter), service_settings);

  const auto merge =
      settings.merge_domain_config ? ratelimit::DomainMerge::merge : ratelimit::DomainMerge::refuse;
  // The rules come from the rules directory (CONFIG_TYPE=FILE) or over xDS (GRPC_XDS_SOTW).
  std::unique_ptr<ConfigWatcher> watcher;
  std::unique_ptr<XdsClient> xds;
  if (xds_settings.use_xds) {
    xds = std::make_unique<XdsClient>(service, xds_settings, merge);
    xds->start();
    // As the reference's NewService: without FORCE_START_WITHOUT_INITIAL_CONFIG no listener
    // opens before the first configuration; a stop signal meanwhile still stops.
    const timespec no_wait{0, 0};
    while (!xds_settings.force_start && !xds->wait_first_response(std::chrono::seconds{1})) {
      const int early = sigtimedwait(&stop_signals, nullptr, &no_wait);
      if (early == SIGTERM || early == SIGINT) {
        std::cerr << "ratelimit_server: signal " << early << " before the first configuration\n";
        xds->stop();
        return 0;
      }
    }
  } else {
    watcher = std::make_unique<ConfigWatcher>(service, settings.config_dir(),
                                              settings.runtime_ignore_dotfiles, merge);
    watcher->poll();
    watcher->start(std::chrono::seconds{1});
  }
  const auto healthy = [&] {
    return !settings.healthy_with_config_only || (xds ? xds->loaded() : watcher->loaded());
  };

  GrpcTransport transport = GrpcTransport::from(settings);
  GrpcServer grpc(service, transport);
  grpc.set_serving(healthy());
  // Go listens on IPv6 and IPv4 for 0.0.0.0 (a wildcard); "::" does so here, where the host
  // has IPv6.
  const auto metrics = [exporter] { return exporter->render(); };
  const int http_port = static_cast<int>(settings.http_port);
  std::unique_ptr<HttpServer> http;
  if (settings.http_host == "0.0.0.0") {
    try {
      http = std::make_unique<HttpServer>(service, healthy, "::", http_port, metrics);
    } catch (const std::exception&) {
    }
  }
  if (!http)
    http = std::make_unique<HttpServer>(service, healthy, settings.http_host, http_port, metrics);
  transport.port = grpc.port();
  const std::string http_host = settings.http_host.find(':') != std::string::npos
                                    ? "[" + settings.http_host + "]"
                                    : settings.http_host;
  std::cerr << "ratelimit_server: gRPC on " << transport.address()
            << (transport.tls ? " (TLS)" : "") << ", HTTP on " << http_host << ":" << http->port()
            << ", rules from "
            << (xds ? "xDS at " + xds_settings.server_url : settings.config_dir().string()) << "\n";

  int signal = 0;
  timespec tick{1, 0};
  while (true) {
    signal = sigtimedwait(&stop_signals, nullptr, &tick);
    if (signal == SIGTERM || signal == SIGINT) break;
    grpc.set_serving(healthy());
  }
  std::cerr << "ratelimit_server: signal " << signal << ", shutting down\n";
  http->stop();
  grpc.shutdown(std::chrono::seconds{settings.shutdown_grace_seconds});
  if (watcher) watcher->stop();
  if (xds) xds->stop();
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
