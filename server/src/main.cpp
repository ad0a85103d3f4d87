// ratelimit_server: a drop-in for Envoy's rate limit service (envoyproxy/ratelimit), configured
// like it through environment variables (or the same settings as flags; see settings.hpp and
// server/README.md). SIGTERM or SIGINT shuts it down gracefully: it stops accepting calls,
// answers those in flight, and exits 0.

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <pthread.h>
#include <unistd.h>

#include <ratelimit/metrics.hpp>

#include "check/forward_auth.hpp"
#include "config_watcher.hpp"
#include "counters.hpp"
#include "grpc_server.hpp"
#include "health.hpp"
#include "http_server.hpp"
#include "service.hpp"
#include "settings.hpp"
#include "startup.hpp"
#include "stats/runtime.hpp"
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

/// The check's actions file, re-read when its modification time changes. A file that fails to
/// load at start stops the server; on a later change it leaves the actions in force (the
/// error goes to stderr), as rules files do. Counts live in the Service, so a reload keeps them.
struct ActionsFile {
  std::string path;
  std::filesystem::file_time_type seen;

  void reload(check::ActionsHolder& holder, bool at_start) {
    if (path.empty()) return;
    std::error_code ec;
    const auto mtime = std::filesystem::last_write_time(path, ec);
    if (!at_start && (ec || mtime == seen)) return;
    seen = mtime;
    try {
      holder.set(std::make_shared<const check::ActionsConfig>(check::ActionsConfig::load(path)));
    } catch (const std::invalid_argument& e) {
      if (at_start)
        throw std::invalid_argument("RATELIMIT_SERVER_CHECK_ACTIONS: " + std::string(e.what()));
      std::cerr << "ratelimit_server: " << e.what() << " (the previous actions stay)\n";
    }
  }
};

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
  service_settings.global_quota_mode = settings.quota_mode;
  service_settings.response_headers = settings.response_headers;
  service_settings.limit_header = settings.limit_header;
  service_settings.remaining_header = settings.remaining_header;
  service_settings.reset_header = settings.reset_header;
  service_settings.response_dynamic_metadata = settings.response_dynamic_metadata;
  service_settings.near_limit_ratio = static_cast<float>(settings.near_limit_ratio);
  service_settings.over_limit_cache_bytes = static_cast<std::size_t>(settings.local_cache_bytes);
  service_settings.all_or_nothing = settings.all_or_nothing;
  service_settings.stop_increment_when_over = settings.stop_increment_when_over;
  // memcached keeps only the Go window: a rule's lockout (block_duration) is refused at load.
  service_settings.lockouts = settings.backend_type != "memcache";
  // Our own /metrics: every counted descriptor's decision and hits, every call's duration,
  // every Redis round trip (the storage's listener below).
  auto exporter = std::make_shared<ratelimit::PrometheusExporter>();
  service_settings.listener = exporter;
  service_settings.call_timer = [exporter](std::chrono::nanoseconds d) {
    exporter->record_call(d);
  };
  stats::Runtime stats(stats::options_from(settings));
  service_settings.stats = stats.observer();
  // The per-descriptor stats (a stat name built per counted descriptor) only when they go
  // somewhere: statsd, DogStatsD or the Prometheus listener.
  service_settings.observer = stats.descriptor_observer();

  // The reference's health components (src/server/health.go): redis unhealthy until the
  // storage answers, config (when asked) until rules load, sigterm until SIGTERM.
  auto health = std::make_shared<Health>(settings.healthy_with_config_only);
  std::shared_ptr<ratelimit::Listener> storage_listener = exporter;
  if (settings.redis_health_check_active_connection)
    storage_listener = std::make_shared<StorageHealthListener>(health, exporter);
  auto counters = make_counters(settings, storage_listener);
  // No listener opens until the storage answers (src/redis/driver_impl.go): a read of a
  // counter of our own, which every storage answers only when it is reachable.
  const auto probe = [counters] {
    const Hit read{"ratelimit_server:startup", "probe", 1, 1, 0, {}, true, {}, false};
    (void)counters->count(std::span<const Hit>(&read, 1), Service::system_now());
  };
  const std::string target = settings.redis_url.empty() ? "this process" : settings.redis_url;
  std::mt19937_64 random(std::random_device{}());
  StartupSettings startup;
  startup.initial_interval = settings.redis_startup_initial_interval;
  startup.max_interval = settings.redis_startup_max_interval;
  startup.max_elapsed = settings.redis_startup_max_elapsed_time;
  wait_for_storage(
      target, startup,
      StartupHooks{
          probe,
          [] {
            return std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::steady_clock::now().time_since_epoch());
          },
          [&stop_signals](std::chrono::nanoseconds d) {
            timespec t{static_cast<time_t>(d.count() / 1'000'000'000),
                       static_cast<long>(d.count() % 1'000'000'000)};
            const int sig = sigtimedwait(&stop_signals, nullptr, &t);
            return sig != SIGTERM && sig != SIGINT;
          },
          [&random] { return std::uniform_real_distribution<double>(0, 1)(random); },
          [](const std::string& line) { std::cerr << "ratelimit_server: " << line << "\n"; }});
  health->ok(HealthComponent::redis);

  auto service = std::make_shared<Service>(counters, service_settings);
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
  // The config component follows the loaded rules (SetConfig: OK once a configuration with
  // a domain loads, failed while none has).
  const auto follow_config = [&] {
    if (xds ? xds->loaded() : watcher->loaded())
      health->ok(HealthComponent::config);
    else
      health->fail(HealthComponent::config);
  };
  follow_config();

  GrpcTransport transport = GrpcTransport::from(settings);
  GrpcServer grpc(service, transport);
  health->on_change([&grpc](bool serving) { grpc.set_serving(serving); });
  grpc.set_serving(health->serving());
  const auto healthy = [health] { return health->serving(); };
  // PORT: /json, /healthcheck, /metrics and the forward-auth check, on one event-driven front.
  std::vector<check::Network> trusted;
  try {
    trusted = check::parse_networks(settings.trusted_proxies);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("RATELIMIT_SERVER_TRUSTED_PROXIES: " + std::string(e.what()));
  }
  auto actions = std::make_shared<check::ActionsHolder>();
  ActionsFile actions_file{settings.check_actions, {}};
  actions_file.reload(*actions, true);
  const auto routes = [&] {
    HttpRoutes r;
    add_service_routes(r, service, healthy, [exporter] { return exporter->render(); });
    check::add_check_routes(r, service, actions, trusted);
    return r;
  };
  HttpFrontOptions front_options;
  front_options.threads = static_cast<unsigned>(settings.http_threads);
  const int http_port = static_cast<int>(settings.http_port);
  // Go listens on IPv6 and IPv4 for 0.0.0.0 (a wildcard); "::" does so here, where the host
  // has IPv6.
  std::unique_ptr<HttpFront> http;
  if (settings.http_host == "0.0.0.0") {
    try {
      http = std::make_unique<HttpFront>(routes(), "::", http_port, front_options);
    } catch (const std::exception&) {
    }
  }
  if (!http)
    http = std::make_unique<HttpFront>(routes(), settings.http_host, http_port, front_options);
  transport.port = grpc.port();
  const std::string http_host = settings.http_host.find(':') != std::string::npos
                                    ? "[" + settings.http_host + "]"
                                    : settings.http_host;
  std::cerr << "ratelimit_server: gRPC on " << transport.address()
            << (transport.tls ? " (TLS)" : "") << ", HTTP on " << http_host << ":" << http->port()
            << ", rules from "
            << (xds ? "xDS at " + xds_settings.server_url : settings.config_dir().string()) << "\n";
  stats.start_listeners([service] { return service->config(); });

  int signal = 0;
  timespec tick{1, 0};
  while (true) {
    signal = sigtimedwait(&stop_signals, nullptr, &tick);
    if (signal == SIGTERM || signal == SIGINT) break;
    follow_config();
    // With REDIS_HEALTH_CHECK_ACTIVE_CONNECTION, a storage found unreachable is asked again
    // (as the reference's pool reconnects by itself), so that health comes back without calls.
    if (settings.redis_health_check_active_connection && !health->healthy(HealthComponent::redis)) {
      try {
        probe();
        health->ok(HealthComponent::redis);
      } catch (const std::exception&) {  // still unreachable: the listener said so
      }
    }
    actions_file.reload(*actions, false);
  }
  // The reference: SIGTERM fails the sigterm component (health NOT_SERVING, /healthcheck
  // 500) while the gRPC server drains; HTTP closes after.
  health->fail(HealthComponent::sigterm);
  std::cerr << "ratelimit_server: signal " << signal << ", shutting down\n";
  health->on_change(nullptr);
  grpc.shutdown(std::chrono::seconds{settings.shutdown_grace_seconds});
  http->stop();
  if (watcher) watcher->stop();
  if (xds) xds->stop();
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
