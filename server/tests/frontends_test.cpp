// The server's parts around the decisions: its settings (the reference's environment variables
// and our flags), the reload of a rules directory, the HTTP endpoints, the gRPC health service
// and the shutdown. Each case names the reference behaviour it follows (envoyproxy/ratelimit).

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <ratelimit/metrics.hpp>

#include "config_watcher.hpp"
#ifdef RATELIMIT_SERVER_HAVE_REDIS
#include "support/redis_backend.hpp"
#endif
#include "counters.hpp"
#include "grpc_server.hpp"
#include "health.grpc.pb.h"
#include "http_server.hpp"
#include "rls.grpc.pb.h"
#include "server_algorithms.hpp"
#include "service.hpp"
#include "settings.hpp"

namespace {

namespace rs = ratelimit::server;

/// A fresh directory under the system's temporary directory, removed at the end.
struct TempDir {
  TempDir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() /
           ("ratelimit_server_test_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path / "config");
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path / "config" / name) << text;
  }
  std::filesystem::path path;
};

const std::string one_per_minute = R"(domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
)";

envoy::service::ratelimit::v3::RateLimitRequest request_for(const std::string& domain) {
  envoy::service::ratelimit::v3::RateLimitRequest req;
  req.set_domain(domain);
  auto* e = req.add_descriptors()->add_entries();
  e->set_key("k");
  e->set_value("v");
  return req;
}

}  // namespace

TEST_CASE("A broken rules file on reload keeps the previous configuration", "[server]") {
  // Source: ratelimit.go reloadConfig: a config error is logged and counted, the old
  // configuration stays.
  TempDir dir;
  dir.write("a.yaml", one_per_minute);
  auto service = std::make_shared<rs::Service>(rs::make_memory_counters(), rs::ServiceSettings{});
  rs::ConfigWatcher watcher(service, dir.path / "config", false, ratelimit::DomainMerge::refuse);
  REQUIRE(watcher.poll());
  CHECK(watcher.loaded());
  CHECK_FALSE(watcher.poll());  // nothing changed
  dir.write("a.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n");
  CHECK_FALSE(watcher.poll());
  CHECK_THAT(watcher.last_error(), Catch::Contains("a.yaml"));
  envoy::service::ratelimit::v3::RateLimitResponse res;
  REQUIRE(service->should_rate_limit(request_for("d"), res).ok());
  CHECK(res.statuses(0).current_limit().requests_per_unit() == 1);  // the old rule, in force
  dir.write("b.yaml",
            "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
            "requests_per_unit: 7}\n");
  dir.write("a.yaml", one_per_minute);
  CHECK(watcher.poll());
  CHECK(watcher.last_error().empty());
  envoy::service::ratelimit::v3::RateLimitResponse e;
  REQUIRE(service->should_rate_limit(request_for("e"), e).ok());
  CHECK(e.statuses(0).current_limit().requests_per_unit() == 7);
}

TEST_CASE("HTTP: /json answers the request as JSON, 429 when over; /healthcheck; /metrics",
          "[server]") {
  // Source: the reference's HTTP endpoints (src/server/server_impl.go: /json, /healthcheck).
  // /metrics: ours, the library's Prometheus exporter fed with every counted descriptor and
  // every call's duration.
  auto exporter = std::make_shared<ratelimit::PrometheusExporter>();
  rs::ServiceSettings settings;
  settings.listener = exporter;
  settings.call_timer = [exporter](std::chrono::nanoseconds d) { exporter->record_call(d); };
  auto service = std::make_shared<rs::Service>(rs::make_memory_counters(), settings);
  const ratelimit::RulesSource sources[] = {{"a.yaml", one_per_minute}};
  service->reload(
      ratelimit::RulesConfig::from_strings<ratelimit::server::ServerAlgorithms>(sources));
  bool healthy = true;
  rs::HttpServer http(
      service, [&] { return healthy; }, "127.0.0.1", 0, [exporter] { return exporter->render(); });
  httplib::Client client("127.0.0.1", http.port());
  const std::string body =
      R"({"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]})";
  const auto first = client.Post("/json", body, "application/json");
  REQUIRE(first);
  CHECK(first->status == 200);
  CHECK_THAT(first->body, Catch::Contains("\"overallCode\":\"OK\""));
  const auto second = client.Post("/json", body, "application/json");  // 2 > 1 per minute
  REQUIRE(second);
  CHECK(second->status == 429);
  CHECK_THAT(second->body, Catch::Contains("\"overallCode\":\"OVER_LIMIT\""));
  // A descriptor of 3 hits (its hits_addend): 2 + 3 = 5 > 1, limited.
  const auto third = client.Post(
      "/json",
      R"({"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"hitsAddend":3}]})",
      "application/json");
  REQUIRE(third);
  CHECK(third->status == 429);
  const auto metrics = client.Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->status == 200);
  // Of the rule named "d.k" (domain, then its key): one allowed and two limited decisions;
  // hits, as the reference counts total_hits: allowed 1, limited 1 + 3 = 4.
  CHECK_THAT(metrics->body,
             Catch::Contains("ratelimit_decisions_total{name=\"d.k\",outcome=\"allowed\"} 1"));
  CHECK_THAT(metrics->body,
             Catch::Contains("ratelimit_decisions_total{name=\"d.k\",outcome=\"limited\"} 2"));
  CHECK_THAT(metrics->body,
             Catch::Contains("ratelimit_hits_total{name=\"d.k\",outcome=\"allowed\"} 1\n"));
  CHECK_THAT(metrics->body,
             Catch::Contains("ratelimit_hits_total{name=\"d.k\",outcome=\"limited\"} 4\n"));
  // Every call timed: the three calls.
  CHECK_THAT(metrics->body, Catch::Contains("ratelimit_call_duration_seconds_count 3\n"));
  const auto bad = client.Post("/json", "{not json", "application/json");
  REQUIRE(bad);
  CHECK(bad->status == 400);
  const auto ok = client.Get("/healthcheck");
  REQUIRE(ok);
  CHECK(ok->status == 200);
  healthy = false;
  const auto down = client.Get("/healthcheck");
  REQUIRE(down);
  CHECK(down->status == 500);
}

TEST_CASE(
    "gRPC health: \"ratelimit\" follows the server's health, \"\" is always SERVING, "
    "another name is NOT_FOUND; shutdown stops the calls",
    "[server]") {
  // Source: src/server/health.go (NewHealthChecker registers the name "ratelimit", NOT_SERVING
  // until every component is healthy) on grpc-go's health server, which keeps "" SERVING and
  // answers NOT_FOUND for a name it does not know.
  auto service = std::make_shared<rs::Service>(rs::make_memory_counters(), rs::ServiceSettings{});
  service->reload(ratelimit::RulesConfig{});
  rs::GrpcServer server(service, "127.0.0.1:0");
  const auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port()),
                                           grpc::InsecureChannelCredentials());
  const auto health = grpc::health::v1::Health::NewStub(channel);
  const auto check = [&](const std::string& name) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds{10});
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(name);
    grpc::health::v1::HealthCheckResponse res;
    const grpc::Status st = health->Check(&ctx, req, &res);
    if (!st.ok()) return st.error_code() == grpc::StatusCode::NOT_FOUND ? -1 : -2;
    return static_cast<int>(res.status());
  };
  constexpr int serving = grpc::health::v1::HealthCheckResponse::SERVING;
  constexpr int not_serving = grpc::health::v1::HealthCheckResponse::NOT_SERVING;
  CHECK(check("ratelimit") == not_serving);
  CHECK(check("") == serving);
  CHECK(check("other") == -1);  // NOT_FOUND
  server.set_serving(true);
  CHECK(check("ratelimit") == serving);
  server.set_serving(false);
  CHECK(check("ratelimit") == not_serving);
  CHECK(check("") == serving);
  server.shutdown(std::chrono::milliseconds{100});
  const auto rls = envoy::service::ratelimit::v3::RateLimitService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds{10});
  envoy::service::ratelimit::v3::RateLimitResponse res;
  CHECK(rls->ShouldRateLimit(&ctx, request_for("d"), &res).error_code() ==
        grpc::StatusCode::UNAVAILABLE);
}

TEST_CASE("The binary serves its rules directory and exits 0 on SIGTERM", "[server]") {
  // The reference's deployment: rules under RUNTIME_ROOT/config, ports from the environment.
  TempDir dir;
  dir.write("a.yaml", one_per_minute);
  int err[2];
  REQUIRE(::pipe(err) == 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  posix_spawn_file_actions_addclose(&actions, err[0]);
  std::vector<std::string> env{"RUNTIME_ROOT=" + dir.path.string(),
                               "GRPC_HOST=127.0.0.1",
                               "GRPC_PORT=0",
                               "HOST=127.0.0.1",
                               "PORT=0",
                               "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true"};
#ifdef RATELIMIT_SERVER_HAVE_REDIS
  // Once in process and once on Redis (regression: the executable once refused REDIS_URL
  // while the library part served it).
  if (GENERATE(false, true)) {
    const auto& redis = rltest::redis_endpoint();
    env.push_back("REDIS_SOCKET_TYPE=tcp");
    env.push_back("REDIS_URL=" + redis.host + ":" + std::to_string(redis.port));
  } else {
    env.push_back("RATELIMIT_SERVER_STORAGE=memory");
  }
#else
  env.push_back("RATELIMIT_SERVER_STORAGE=memory");
#endif
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string binary = RATELIMIT_SERVER_BINARY;
  char* argv[] = {binary.data(), nullptr};
  pid_t pid = 0;
  REQUIRE(::posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv, envp.data()) == 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(err[1]);
  // A line names the ports: "ratelimit_server: gRPC on 127.0.0.1:N, HTTP on ..." (after the
  // start-up notes, such as RATELIMIT_SERVER_STORAGE=memory's).
  FILE* out = ::fdopen(err[0], "r");
  char* line = nullptr;
  std::size_t cap = 0;
  std::string first;
  while (::getline(&line, &cap, out) > 0) {
    first = line;
    if (first.find("gRPC on ") != std::string::npos) break;
  }
  std::free(line);
  const auto at = first.find("gRPC on 127.0.0.1:");
  int port = 0;
  if (at != std::string::npos) port = std::atoi(first.c_str() + at + 18);
  INFO(first);
  if (port > 0) {
    auto stub = envoy::service::ratelimit::v3::RateLimitService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds{10});
    envoy::service::ratelimit::v3::RateLimitResponse res;
    CHECK(stub->ShouldRateLimit(&ctx, request_for("d"), &res).ok());
    CHECK(res.statuses(0).current_limit().requests_per_unit() == 1);
    // Healthy once listening: the storage answered (redis), the rules loaded (config, asked
    // for below), no SIGTERM yet (src/server/health.go). gRPC for "ratelimit", HTTP 200 "OK".
    const auto health = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
    grpc::ClientContext hctx;
    hctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds{10});
    grpc::health::v1::HealthCheckRequest hreq;
    hreq.set_service("ratelimit");
    grpc::health::v1::HealthCheckResponse hres;
    CHECK(health->Check(&hctx, hreq, &hres).ok());
    CHECK(hres.status() == grpc::health::v1::HealthCheckResponse::SERVING);
    const auto http_at = first.find("HTTP on 127.0.0.1:");
    REQUIRE(http_at != std::string::npos);
    httplib::Client http("127.0.0.1", std::atoi(first.c_str() + http_at + 18));
    const auto hc = http.Get("/healthcheck");
    REQUIRE(hc);
    CHECK(hc->status == 200);
    CHECK(hc->body == "OK");
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::fclose(out);
  CHECK(port > 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("A rule naming an algorithm the server lacks is refused, naming its file and line",
          "[server]") {
  // calendar_quota is the library's, but not in ServerAlgorithms (its calendar months and
  // weeks would differ from the reference's 30 and 7 days of the same unit names).
  rs::Service service(rs::make_memory_counters(), rs::ServiceSettings{});
  const ratelimit::RulesSource sources[] = {
      {"b.yaml",
       "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, "
       "requests_per_unit: 1, algorithm: calendar_quota}\n"}};
  CHECK_THROWS_WITH(
      ratelimit::RulesConfig::from_strings<ratelimit::server::ServerAlgorithms>(sources),
      Catch::StartsWith("b.yaml:4: rate_limit.algorithm = \"calendar_quota\": unknown algorithm"));
  // A library algorithm keeps the library's units: a week is refused, naming it.
  const ratelimit::RulesSource week[] = {
      {"w.yaml",
       "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: week, "
       "requests_per_unit: 1, algorithm: token_bucket}\n"}};
  CHECK_THROWS_WITH(
      ratelimit::RulesConfig::from_strings<ratelimit::server::ServerAlgorithms>(week),
      Catch::StartsWith("w.yaml:3: rate_limit.algorithm = \"token_bucket\": takes no week"));
  CHECK(service.config() == nullptr);  // nothing was loaded
}
