// The server's health and start-up as the reference keeps them: the Health component
// (src/server/health.go), its gRPC and HTTP faces, the start-up wait for the storage
// (src/redis/driver_impl.go, newClientImpl) and the settings that drive them
// (src/settings/settings.go). Expected values are derived from those Go definitions.

#include <chrono>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <httplib.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "counters.hpp"
#include "grpc_server.hpp"
#include "health.grpc.pb.h"
#include "health.hpp"
#include "http_server.hpp"
#include "service.hpp"
#include "settings.hpp"
#include "startup.hpp"

namespace {

namespace rs = ratelimit::server;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

}  // namespace

TEST_CASE("Health: serving only when every component is, as the reference's HealthChecker",
          "[server][health]") {
  // NewHealthChecker: redis false, config false (only with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_
  // LOADED), sigterm true; Ok makes the whole healthy when all are; Fail makes it unhealthy.
  rs::Health plain(false);
  std::vector<bool> published;
  plain.on_change([&](bool s) { published.push_back(s); });
  CHECK_FALSE(plain.serving());           // redis not confirmed yet
  plain.ok(rs::HealthComponent::config);  // not a component here: ignored
  CHECK_FALSE(plain.serving());
  plain.ok(rs::HealthComponent::redis);
  CHECK(plain.serving());
  plain.fail(rs::HealthComponent::sigterm);
  CHECK_FALSE(plain.serving());
  plain.ok(rs::HealthComponent::redis);  // sigterm still failed
  CHECK_FALSE(plain.serving());
  // Published at on_change (false), then on each ok or fail of a component it has: redis ok
  // (true), sigterm failed (false), redis ok again (false: sigterm still failed). The ignored
  // config publishes nothing.
  CHECK(published == std::vector<bool>{false, true, false, false});

  rs::Health with_config(true);
  with_config.ok(rs::HealthComponent::redis);
  CHECK_FALSE(with_config.serving());  // no configuration loaded yet
  with_config.ok(rs::HealthComponent::config);
  CHECK(with_config.serving());
  with_config.fail(rs::HealthComponent::config);  // SetConfig of an empty configuration
  CHECK_FALSE(with_config.serving());
}

TEST_CASE("Health reaches gRPC for \"ratelimit\" and /healthcheck as 200 OK or 500",
          "[server][health]") {
  // health.go ServeHTTP: "OK" when healthy, else WriteHeader(500) with no body.
  auto health = std::make_shared<rs::Health>(false);
  auto service = std::make_shared<rs::Service>(rs::make_memory_counters(), rs::ServiceSettings{});
  rs::GrpcServer grpc(service, "127.0.0.1:0");
  health->on_change([&grpc](bool s) { grpc.set_serving(s); });
  rs::HttpServer http(
      service, [health] { return health->serving(); }, "127.0.0.1", 0);
  httplib::Client client("127.0.0.1", http.port());
  const auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(grpc.port()), grpc::InsecureChannelCredentials()));
  const auto status = [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds{10});
    grpc::health::v1::HealthCheckRequest req;
    req.set_service("ratelimit");
    grpc::health::v1::HealthCheckResponse res;
    REQUIRE(stub->Check(&ctx, req, &res).ok());
    return res.status();
  };
  auto res = client.Get("/healthcheck");
  REQUIRE(res);
  CHECK(res->status == 500);
  CHECK(res->body.empty());
  CHECK(status() == grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  health->ok(rs::HealthComponent::redis);
  res = client.Get("/healthcheck");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->body == "OK");
  CHECK(status() == grpc::health::v1::HealthCheckResponse::SERVING);
  // SIGTERM: the sigterm component fails first, while the server still answers (then drains).
  health->fail(rs::HealthComponent::sigterm);
  CHECK(client.Get("/healthcheck")->status == 500);
  CHECK(status() == grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  health->on_change(nullptr);
}

TEST_CASE("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: the storage's events move the redis component",
          "[server][health]") {
  // driver_impl.go poolTrace: a connection created makes redis healthy, losing the last one
  // unhealthy. Events are forwarded to the next listener.
  auto health = std::make_shared<rs::Health>(false);
  struct Counting : ratelimit::Listener {
    int round_trips = 0;
    void on_round_trip(const ratelimit::RoundTripEvent&) override { ++round_trips; }
  };
  auto next = std::make_shared<Counting>();
  rs::StorageHealthListener listener(health, next);
  listener.on_connect(ratelimit::ConnectEvent{});
  CHECK(health->serving());
  listener.on_round_trip(ratelimit::RoundTripEvent{"127.0.0.1:6379", nanoseconds{0}, false});
  CHECK_FALSE(health->serving());
  listener.on_round_trip(ratelimit::RoundTripEvent{"127.0.0.1:6379", nanoseconds{0}, true});
  CHECK(health->serving());
  listener.on_storage_error(ratelimit::StorageErrorEvent{"connect", "refused"});
  CHECK_FALSE(health->serving());
  CHECK(next->round_trips == 2);
}

TEST_CASE("Start-up backoff: jpillora/backoff with factor 2 and jitter between min and max",
          "[server][startup]") {
  // ForAttempt: d = min * 2^attempt; jitter: unit * (d - min) + min; capped at max; max when
  // min >= max. Go's defaults: REDIS_STARTUP_INITIAL_INTERVAL 1s, _MAX_INTERVAL 30s.
  const rs::StartupSettings s;
  CHECK(rs::backoff_wait(s, 0, 0.7) == seconds{1});          // d = 1 s: 0.7 * 0 + 1
  CHECK(rs::backoff_wait(s, 3, 0.5) == milliseconds{4500});  // d = 8 s: 0.5 * 7 + 1 = 4.5
  CHECK(rs::backoff_wait(s, 5, 0.99) == seconds{30});        // 0.99 * 31 + 1 = 31.69 > 30
  CHECK(rs::backoff_wait(s, 200, 0.5) == seconds{30});       // 2^200 s: max
  rs::StartupSettings flat;
  flat.initial_interval = seconds{5};
  flat.max_interval = seconds{5};
  CHECK(rs::backoff_wait(flat, 0, 0.3) == seconds{5});  // min >= max: max
}

TEST_CASE(
    "Start-up wait: retries until the storage answers, gives up after the max elapsed "
    "time, stops on SIGTERM",
    "[server][startup]") {
  nanoseconds now{0};
  int failures_left = 3;
  std::vector<nanoseconds> waits;
  std::vector<std::string> lines;
  rs::StartupHooks hooks{[&] {
                           if (failures_left-- > 0) throw std::runtime_error("refused");
                         },
                         [&] { return now; },
                         [&](nanoseconds d) {
                           waits.push_back(d);
                           now += d;
                           return true;
                         },
                         [] { return 1.0; },  // the top of the jitter: d = min * 2^attempt
                         [&](const std::string& l) { lines.push_back(l); }};
  rs::StartupSettings s;  // 1 s, 30 s, no limit
  rs::wait_for_storage("127.0.0.1:6379", s, hooks);
  // Three failures, waits of 1, 2 and 4 s (1 * 2^0, 2^1, 2^2), then the fourth answers.
  CHECK(waits == std::vector<nanoseconds>{seconds{1}, seconds{2}, seconds{4}});
  REQUIRE(lines.size() == 3);
  CHECK(lines[2] == "Retrying Redis connection to 127.0.0.1:6379 in 4s (elapsed: 3s): refused");

  // REDIS_STARTUP_MAX_ELAPSED_TIME 5 s: failures at 0, 1 and 3 s (waits 1, 2), then at 7 s
  // (wait 4): 7 >= 5, the reference's panic message.
  now = nanoseconds{0};
  failures_left = 100;
  waits.clear();
  s.max_elapsed = seconds{5};
  CHECK_THROWS_WITH(rs::wait_for_storage("127.0.0.1:6379", s, hooks),
                    "timed out waiting for Redis connection to 127.0.0.1:6379 after 7s: refused");
  CHECK(waits.size() == 3);

  // SIGTERM while waiting: the reference's context is cancelled.
  hooks.sleep = [](nanoseconds) { return false; };
  CHECK_THROWS_WITH(rs::wait_for_storage("x", s, hooks),
                    "context cancelled while waiting for Redis connection to x: context canceled");
}

TEST_CASE("Durations print as Go prints them", "[server][startup]") {
  // time.Duration.String on the elapsed time rounded to milliseconds.
  CHECK(rs::go_duration_text(nanoseconds{0}) == "0s");
  CHECK(rs::go_duration_text(milliseconds{250}) == "250ms");
  CHECK(rs::go_duration_text(milliseconds{1500}) == "1.5s");
  CHECK(rs::go_duration_text(seconds{90}) == "1m30s");
  CHECK(rs::go_duration_text(seconds{3600}) == "1h0m0s");
}

TEST_CASE("The Go names of the answer and health settings are read", "[server][startup]") {
  // src/settings/settings.go: LIMIT_RESPONSE_HEADERS_ENABLED, LIMIT_*_HEADER,
  // RESPONSE_DYNAMIC_METADATA, QUOTA_MODE, NEAR_LIMIT_RATIO, REDIS_HEALTH_CHECK_ACTIVE_CONNECTION
  // and REDIS_STARTUP_* (Go durations).
  const std::vector<std::pair<std::string, std::string>> env{
      {"LIMIT_RESPONSE_HEADERS_ENABLED", "true"},
      {"LIMIT_LIMIT_HEADER", "X-L"},
      {"LIMIT_REMAINING_HEADER", "X-R"},
      {"LIMIT_RESET_HEADER", "X-T"},
      {"RESPONSE_DYNAMIC_METADATA", "true"},
      {"QUOTA_MODE", "true"},
      {"NEAR_LIMIT_RATIO", "0.5"},
      {"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true"},
      {"REDIS_STARTUP_INITIAL_INTERVAL", "150us"},
      {"REDIS_STARTUP_MAX_INTERVAL", "1h30m"},
      {"REDIS_STARTUP_MAX_ELAPSED_TIME", "1.5s"}};
  std::vector<std::string> names;
  for (const auto& [k, v] : env) names.push_back(k);
  const rs::Settings s = rs::read_settings(
      [&](const std::string& n) -> std::optional<std::string> {
        for (const auto& [k, v] : env)
          if (k == n) return v;
        return std::nullopt;
      },
      {}, names);
  CHECK(s.response_headers);
  CHECK(s.limit_header == "X-L");
  CHECK(s.remaining_header == "X-R");
  CHECK(s.reset_header == "X-T");
  CHECK(s.response_dynamic_metadata);
  CHECK(s.quota_mode);
  CHECK(s.near_limit_ratio == 0.5F);
  CHECK(s.redis_health_check_active_connection);
  CHECK(s.startup.initial_interval == std::chrono::microseconds{150});
  CHECK(s.startup.max_interval == seconds{5400});  // 1 h 30 min = 3600 + 1800 s
  CHECK(s.startup.max_elapsed == milliseconds{1500});
}

#if defined(RATELIMIT_SERVER_HAVE_REDIS)
TEST_CASE(
    "No listener opens until the storage answers; the binary exits after the max elapsed "
    "time",
    "[server][startup]") {
  // runner.go creates the limiter (which waits for Redis) before srv.Start opens any listener;
  // driver_impl.go panics after REDIS_STARTUP_MAX_ELAPSED_TIME. A port that refuses: bound,
  // never listened on.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const int port = ntohs(addr.sin_port);
  int err[2];
  REQUIRE(::pipe(err) == 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  posix_spawn_file_actions_addclose(&actions, err[0]);
  std::vector<std::string> env{"REDIS_URL=127.0.0.1:" + std::to_string(port),
                               "REDIS_STARTUP_INITIAL_INTERVAL=50ms",
                               "REDIS_STARTUP_MAX_INTERVAL=100ms",
                               "REDIS_STARTUP_MAX_ELAPSED_TIME=300ms",
                               "GRPC_HOST=127.0.0.1",
                               "GRPC_PORT=0",
                               "HOST=127.0.0.1",
                               "PORT=0",
                               "RUNTIME_ROOT=/nonexistent"};
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string binary = RATELIMIT_SERVER_BINARY;
  char* argv[] = {binary.data(), nullptr};
  pid_t pid = 0;
  REQUIRE(::posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv, envp.data()) == 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(err[1]);
  std::string output;
  char buf[4096];
  for (ssize_t n; (n = ::read(err[0], buf, sizeof buf)) > 0;) output.append(buf, n);
  ::close(err[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(fd);
  INFO(output);
  CHECK(output.find("Retrying Redis connection to 127.0.0.1:" + std::to_string(port)) !=
        std::string::npos);
  CHECK(output.find("timed out waiting for Redis connection to 127.0.0.1:" + std::to_string(port) +
                    " after ") != std::string::npos);
  CHECK(output.find("gRPC on") == std::string::npos);  // no listener was opened
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) != 0);
}
#endif
