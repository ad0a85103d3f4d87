// The server's stats as the reference service emits them (envoyproxy/ratelimit at f2fb157):
// names from src/stats/manager_impl.go, src/metrics/metrics.go and src/service_cmd/runner/
// runner.go; arithmetic from src/limiter/base_limiter.go; tags from lyft/gostats
// (internal/tags/tags.go). Through the reference statsd daemon (the `statsd` npm package, its TCP
// server, read back with its admin `counters` command; RATELIMIT_TEST_STATSD names its
// stats.js, installed by scripts/test.sh), through PROMETHEUS_ADDR with the reference's
// default mapping and Envoy Gateway's, and the debug listener.
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <httplib.h>

#include <catch2/catch.hpp>

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/rules.hpp>

#include "config_watcher.hpp"
#include "counters.hpp"
#include "envoy_gateway_statsd_conf.hpp"
#include "grpc_server.hpp"
#include "rls.grpc.pb.h"
#include "rls_request.hpp"
#include "server_algorithms.hpp"
#include "service.hpp"
#include "settings.hpp"
#include "stats/debug.hpp"
#include "stats/go_stats.hpp"
#include "stats/mapper.hpp"
#include "stats/net_sink.hpp"
#include "stats/prometheus_sink.hpp"
#include "stats/runtime.hpp"
#include "stats/service_hook.hpp"
#include "stats/store.hpp"

extern char** environ;

// A namespace of its own: the server tests are one unity translation unit.
namespace stats_test {
namespace {

namespace pb = envoy::service::ratelimit::v3;
namespace st = ratelimit::server::stats;
using Counts = std::map<std::string, std::uint64_t>;

// 2023-11-15T00:00:00Z: whole minutes since the epoch, so one minute window holds every call.
constexpr std::int64_t day0_s = 19676LL * 86400;

bool in_ci() {
  const char* v = std::getenv("CI");
  return v != nullptr && std::string_view(v) == "true";
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

struct TempDir {
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("ratelimit-stats-" + std::to_string(::getpid()) + "-" + std::to_string(next++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
  }
  std::filesystem::path path;
  static inline int next = 0;
};

/// The statsd daemon of the `statsd` npm package on free loopback ports: its TCP server (as the
/// reference's default) and its admin interface. Stopped (SIGTERM) on destruction.
struct StatsdDaemon {
  StatsdDaemon() {
    const char* js = std::getenv("RATELIMIT_TEST_STATSD");
    if (js == nullptr || !std::filesystem::exists(js)) {
      if (in_ci()) FAIL("CI=true and RATELIMIT_TEST_STATSD does not name statsd's stats.js");
      WARN(
          "RATELIMIT_TEST_STATSD unset: the statsd daemon cases are not run (scripts/test.sh "
          "installs the npm package)");
      return;
    }
    port = free_port();
    admin = free_port();
    // Counters are read back before the daemon's own flush (which would reset them): its
    // flush interval is as long as node's timers take; names are kept as sent.
    dir.write("config.js", "{ port: " + std::to_string(port) +
                               ", mgmt_port: " + std::to_string(admin) +
                               ", mgmt_address: \"127.0.0.1\", servers: [ { server: "
                               "\"./servers/tcp\", address: \"127.0.0.1\", port: " +
                               std::to_string(port) +
                               " } ], backends: [], flushInterval: 2000000000, "
                               "keyNameSanitize: false }\n");
    const std::string config = (dir.path / "config.js").string();
    const std::string log = (dir.path / "statsd.log").string();
    std::vector<std::string> args{"node", js, config};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    REQUIRE(::posix_spawnp(&pid, "node", &actions, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&actions);
    // Up when the admin interface answers (a generous deadline, no fixed sleep).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{30};
    while (!admin_command("counters")) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds{50});
    }
  }
  ~StatsdDaemon() {
    if (pid > 0) {
      ::kill(pid, SIGCONT);
      ::kill(pid, SIGTERM);
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
  }
  bool up() const { return pid > 0; }

  /// The admin interface's answer to `command` up to its "END" line, or nullopt.
  std::optional<std::string> admin_command(const std::string& command) const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(admin));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      return std::nullopt;
    }
    const std::string line = command + "\n";
    (void)::send(fd, line.data(), line.size(), MSG_NOSIGNAL);
    std::string out;
    char buf[4096];
    while (out.find("\nEND\n") == std::string::npos) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    if (out.find("\nEND\n") == std::string::npos) return std::nullopt;
    return out;
  }

  /// The daemon's counters (its own "statsd.*" left out), parsed from node's util.inspect.
  Counts counters() const {
    Counts out;
    const auto text = admin_command("counters");
    REQUIRE(text);
    static const std::regex line(R"(^\s*'?([^']+?)'?: (\d+),?$)");
    std::istringstream in(*text);
    for (std::string l; std::getline(in, l);) {
      std::smatch m;
      if (std::regex_match(l, m, line) && m[1].str().rfind("statsd.", 0) != 0)
        out[m[1].str()] = std::stoull(m[2].str());
    }
    return out;
  }

  /// Waits (generous deadline) until the counters equal `want`; returns the last read.
  Counts wait_for(const Counts& want) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{20};
    Counts got;
    do {
      got = counters();
      if (got == want) break;
      std::this_thread::sleep_for(std::chrono::milliseconds{50});
    } while (std::chrono::steady_clock::now() < deadline);
    return got;
  }

  TempDir dir;
  pid_t pid = -1;
  int port = 0, admin = 0;
};

using Desc = rltest::RlsDescriptor;

/// The service behind a real gRPC server on a free loopback port, at a manual clock.
struct Server {
  Server(const std::string& yaml, ratelimit::server::ServiceSettings settings) : watcher_dir() {
    clock.set(std::chrono::seconds{day0_s});
    service = std::make_shared<ratelimit::server::Service>(
        ratelimit::server::make_memory_counters(), std::move(settings),
        [c = clock] { return c.now(); });
    watcher_dir.write("rules.yaml", yaml);
    watcher = std::make_unique<ratelimit::server::ConfigWatcher>(service, watcher_dir.path, false,
                                                                 ratelimit::DomainMerge::refuse);
    REQUIRE(watcher->poll());
    grpc = std::make_unique<ratelimit::server::GrpcServer>(service, "127.0.0.1:0");
    stub = pb::RateLimitService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(grpc->port()), grpc::InsecureChannelCredentials()));
  }
  std::pair<grpc::Status, pb::RateLimitResponse> call(const std::string& domain,
                                                      const std::vector<Desc>& descs,
                                                      std::uint32_t hits_addend = 0) {
    return rltest::rls_call(*stub, rltest::rls_request(domain, descs, hits_addend));
  }
  pb::RateLimitResponse::Code code(const std::string& domain, const std::vector<Desc>& descs,
                                   std::uint32_t hits_addend = 0) {
    auto [status, res] = call(domain, descs, hits_addend);
    INFO(status.error_message());
    REQUIRE(status.ok());
    return res.overall_code();
  }
  ratelimit::ManualClock clock;
  TempDir watcher_dir;
  std::shared_ptr<ratelimit::server::Service> service;
  std::unique_ptr<ratelimit::server::ConfigWatcher> watcher;
  std::unique_ptr<ratelimit::server::GrpcServer> grpc;
  std::unique_ptr<pb::RateLimitService::Stub> stub;
};

const std::string stats_rules = R"(domain: stats
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: shadowed
    value: x
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
)";

/// The calls of the statsd case, with the counts they come to in `expected_counts`.
std::size_t make_stats_calls(Server& s) {
  using Code = pb::RateLimitResponse;
  std::size_t calls = 0;
  // user=alice, limit 10 a minute, near threshold floor(10 * 0.8) = 8.
  for (int i = 0; i < 6; ++i, ++calls)  // counts 1..6: within 6
    CHECK(s.code("stats", {{{{"user", "alice"}}}}) == Code::OK);
  // 4 hits, count 6 -> 10: within 4; near: after 10 > 8 and before 6 < 8, so 10 - 8 = 2.
  CHECK(s.code("stats", {{{{"user", "alice"}}}}, 4) == Code::OK);
  ++calls;
  // 3 hits, count 10 -> 13 > 10 with before 10 >= 10: over 3 (all of them).
  CHECK(s.code("stats", {{{{"user", "alice"}}}}, 3) == Code::OVER_LIMIT);
  ++calls;
  // alice is now in the over-limit cache: 1 hit, over 1 and over_limit_with_local_cache 1.
  CHECK(s.code("stats", {{{{"user", "alice"}}}}) == Code::OVER_LIMIT);
  ++calls;
  // user=bob, 12 hits at once, count 0 -> 12: crossing both thresholds from below: over
  // 12 - 10 = 2, near 10 - max(8, 0) = 2, and nothing within (the reference's split).
  CHECK(s.code("stats", {{{{"user", "bob"}}}}, 12) == Code::OVER_LIMIT);
  ++calls;
  // shadowed=x, limit 1 (near floor(1 * 0.8) = 0), 3 hits, count 0 -> 3: over 3 - 1 = 2, near
  // 1 - max(0, 0) = 1, shadow_mode 3 - 1 = 2; answered OK (shadow mode).
  CHECK(s.code("stats", {{{{"shadowed", "x"}}}}, 3) == Code::OK);
  ++calls;
  // path=login with detailed_metric: its own key "stats.path_login", within 1.
  CHECK(s.code("stats", {{{{"path", "login"}}}}) == Code::OK);
  ++calls;
  // An unknown domain: domain_not_found per descriptor, 2.
  CHECK(s.code("nowhere", {{{{"a", "1"}}}, {{{"b", "2"}}}}) == Code::OK);
  ++calls;
  // An empty domain: an error of the service.
  CHECK(s.call("", {{{{"user", "alice"}}}}).first.error_code() == grpc::StatusCode::UNKNOWN);
  ++calls;
  return calls;
}

/// What `make_stats_calls` comes to, each name followed by `tags` (gostats' suffix). Counters
/// that stayed 0 are never sent (gostats flushes only counters that changed).
Counts expected_counts(std::size_t calls, const std::string& tags) {
  const std::string rl = "ratelimit.service.rate_limit.";
  return {
      // total 6 + 4 + 3 + 1 + 12 = 26; within 6 + 4 = 10; near 2 + 2 = 4; over 3 + 1 + 2 = 6.
      {rl + "stats.user.total_hits" + tags, 26},
      {rl + "stats.user.within_limit" + tags, 10},
      {rl + "stats.user.near_limit" + tags, 4},
      {rl + "stats.user.over_limit" + tags, 6},
      {rl + "stats.user.over_limit_with_local_cache" + tags, 1},
      {rl + "stats.shadowed_x.total_hits" + tags, 3},
      {rl + "stats.shadowed_x.over_limit" + tags, 2},
      {rl + "stats.shadowed_x.near_limit" + tags, 1},
      {rl + "stats.shadowed_x.shadow_mode" + tags, 2},
      {rl + "stats.path_login.total_hits" + tags, 1},
      {rl + "stats.path_login.within_limit" + tags, 1},
      {rl + "nowhere.domain_not_found" + tags, 2},
      {"ratelimit.service.call.should_rate_limit.service_error" + tags, 1},
      {"ratelimit.service.config_load_success" + tags, 1},
      {"ratelimit_server.ShouldRateLimit.total_requests" + tags, calls},
  };
}

ratelimit::server::ServiceSettings with_stats(std::shared_ptr<st::StatsObserver> observer) {
  ratelimit::server::ServiceSettings s;
  s.observer = st::descriptor_observer(observer);
  s.stats = std::move(observer);
  s.over_limit_cache_bytes = 1 << 16;  // the over-limit cache, for over_limit_with_local_cache
  return s;
}

std::string http_get(int port, const std::string& path, int* status = nullptr) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(10, 0);
  auto res = c.Get(path.c_str());
  REQUIRE(res);
  if (status != nullptr) *status = res->status;
  return res->body;
}

}  // namespace

TEST_CASE("The reference's arithmetic splits a call's hits between within, near and over limit",
          "[stats]") {
  // limit 10, ratio 0.8: near threshold floor(10 * 0.8) = 8 (base_limiter.go).
  const auto count = [](std::int64_t before, std::int64_t hits, bool shadow = false,
                        bool cached = false) {
    st::DescriptorReport r;
    r.limit = 10;
    r.hits = hits;
    r.before = before;
    r.after = before + hits;
    r.shadow = shadow;
    r.over_limit_with_local_cache = cached;
    return st::count_descriptor(r, 0.8f);
  };
  auto c = count(0, 5);  // 0 -> 5: within 5
  CHECK((c.total_hits == 5 && c.within_limit == 5 && c.near_limit == 0 && c.over_limit == 0));
  c = count(7, 2);  // 7 -> 9: within 2, near 9 - 8 = 1 (before 7 < 8)
  CHECK((c.within_limit == 2 && c.near_limit == 1 && c.over_limit == 0));
  c = count(8, 2);  // 8 -> 10: before 8 >= 8: all 2 near, within 2
  CHECK((c.within_limit == 2 && c.near_limit == 2 && c.over_limit == 0));
  c = count(9, 3);  // 9 -> 12: over 12 - 10 = 2, near 10 - max(8, 9) = 1, within 0
  CHECK((c.within_limit == 0 && c.near_limit == 1 && c.over_limit == 2));
  c = count(12, 3, true);  // already over: over 3, shadow 3
  CHECK((c.over_limit == 3 && c.near_limit == 0 && c.shadow_mode == 3));
  c = count(9, 3, true);  // shadow of a crossing call: 12 - 10 = 2
  CHECK(c.shadow_mode == 2);
  c = count(0, 4, false, true);  // from the over-limit cache: over and its own counter
  CHECK((c.total_hits == 4 && c.over_limit == 4 && c.over_limit_with_local_cache == 4));
  // NEAR_LIMIT_RATIO 0.5: near floor(10 * 0.5) = 5; 4 -> 7: near 7 - 5 = 2.
  st::DescriptorReport r{"d", "d.k", 10, 3, 4, 7, false, false};
  CHECK(st::count_descriptor(r, 0.5f).near_limit == 2);
}

TEST_CASE("Stat names are sanitized and tagged as the reference and gostats write them",
          "[stats]") {
  // utils.go SanitizeStatName: ':' and '|' to '_', an IPv4 address's dots to '_'.
  CHECK(st::sanitize_stat_name("d.remote_address_10.0.0.1:80|x") ==
        "d.remote_address_10_0_0_1_80_x");
  CHECK(st::sanitize_stat_name("d.path_/a.b") == "d.path_/a.b");
  // tags.go Serialize: ".__k=v" in key order, '.', ':' and '|' in values to '_'.
  CHECK(st::serialize_tags({{"zone", "us.east:1"}, {"app", "rl"}, {"empty", ""}}) ==
        ".__app=rl.__zone=us_east_1");
}

TEST_CASE("DogStatsD names: EXTRA_TAGS become tags, mogrifiers rename and tag", "[stats]") {
  // The reference README's mogrifiers DOMAIN and HITS (section DogStatsD).
  std::vector<st::Mogrifier> ms(2);
  ms[0] = {"DOMAIN",
           std::regex(R"(^some\.original\.metric\.(.*)$)"),
           "some.original.metric",
           {{"domain", "$1"}}};
  ms[1] = {"HITS",
           std::regex(R"(^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$)"),
           "ratelimit.service.rate_limit.$3",
           {{"domain", "$1"}, {"descriptor", "$2"}}};
  auto [name, tags] =
      st::NetSink::mogrify("ratelimit.service.rate_limit.stats.user.total_hits.__env=prod", ms);
  CHECK(name == "ratelimit.service.rate_limit.total_hits");
  CHECK(tags == std::vector<std::string>{"env:prod", "descriptor:user", "domain:stats"});
  std::tie(name, tags) = st::NetSink::mogrify("some.original.metric.TAG", ms);
  CHECK(name == "some.original.metric");
  CHECK(tags == std::vector<std::string>{"domain:TAG"});
  std::tie(name, tags) = st::NetSink::mogrify("other.metric", ms);
  CHECK((name == "other.metric" && tags.empty()));
}

TEST_CASE("Stats settings are the reference's variables", "[stats]") {
  std::map<std::string, std::string> env{{"USE_STATSD", "false"},
                                         {"USE_DOG_STATSD", "true"},
                                         {"USE_DOG_STATSD_MOGRIFIERS", "hits"},
                                         {"DOG_STATSD_MOGRIFIER_HITS_PATTERN", "^a\\.(.*)$"},
                                         {"DOG_STATSD_MOGRIFIER_HITS_NAME", "a"},
                                         {"DOG_STATSD_MOGRIFIER_HITS_TAGS", "k:$1,j:x"},
                                         {"STATS_FLUSH_INTERVAL", "1m30s"},
                                         {"EXTRA_TAGS", "app:rl,zone:z1"},
                                         {"NEAR_LIMIT_RATIO", "0.5"},
                                         {"STATSD_PROTOCOL", "udp"},
                                         {"DEBUG_PORT", "7070"}};
  const auto read = [&] {
    std::vector<std::string> names;
    for (const auto& [k, v] : env) names.push_back(k);
    return ratelimit::server::read_settings(
        [&](const std::string& n) -> std::optional<std::string> {
          const auto it = env.find(n);
          if (it == env.end()) return std::nullopt;
          return it->second;
        },
        {}, names);
  };
  const auto s = read();
  CHECK((s.use_dog_statsd && !s.use_statsd && s.statsd_protocol == "udp" && s.debug_port == 7070));
  CHECK(ratelimit::server::stats::options_from(s).statsd_udp);
  CHECK(s.stats_flush_interval == std::chrono::seconds{90});
  CHECK(s.extra_tags == std::map<std::string, std::string>{{"app", "rl"}, {"zone", "z1"}});
  CHECK(s.near_limit_ratio == 0.5);
  REQUIRE(s.dog_statsd_mogrifier_sets.size() == 1);
  CHECK(s.dog_statsd_mogrifier_sets[0].pattern == "^a\\.(.*)$");
  CHECK(s.dog_statsd_mogrifier_sets[0].tags ==
        std::map<std::string, std::string>{{"k", "$1"}, {"j", "x"}});
  // USE_STATSD is on by default (gostats and the reference): another sink needs it off.
  env.erase("USE_STATSD");
  CHECK_THROWS_WITH(read(), Catch::Contains("more than one stats sink"));
  env["USE_STATSD"] = "false";
  env["STATS_FLUSH_INTERVAL"] = "10 parsecs";
  CHECK_THROWS_WITH(read(), Catch::Contains("STATS_FLUSH_INTERVAL = \"10 parsecs\""));
  env["STATS_FLUSH_INTERVAL"] = "10s";
  env.erase("DOG_STATSD_MOGRIFIER_HITS_NAME");
  CHECK_THROWS_WITH(read(), Catch::Contains("DOG_STATSD_MOGRIFIER_HITS_NAME"));
}

TEST_CASE("The per-descriptor stats hook is installed only when a sink is on", "[stats]") {
  // With no sink nothing would read a descriptor's stat name: no call builds one.
  st::Options off;
  off.use_statsd = false;
  st::Runtime none(off);
  CHECK_FALSE(none.has_sink());
  CHECK_FALSE(none.descriptor_observer());
  st::Options disabled;  // USE_STATSD is on by default; DISABLE_STATS wins
  disabled.disable_stats = true;
  st::Runtime also_none(disabled);
  CHECK_FALSE(also_none.descriptor_observer());
  st::Options on;  // statsd over UDP to a port nobody reads: a sink all the same
  on.statsd_host = "127.0.0.1";
  on.statsd_port = free_port();
  on.statsd_udp = true;
  st::Runtime statsd(on);
  CHECK(statsd.has_sink());
  CHECK(statsd.descriptor_observer());
}

TEST_CASE("Through the statsd daemon: the reference's names with the calls' hit counts",
          "[stats][statsd]") {
  StatsdDaemon daemon;
  if (!daemon.up()) return;
  st::NetSinkOptions o;
  o.host = "127.0.0.1";
  o.port = daemon.port;  // TCP, the reference's default
  auto sink = std::make_shared<st::NetSink>(o);
  auto store = std::make_shared<st::Store>(sink);
  // EXTRA_TAGS env:test.1 -> gostats' ".__env=test_1" on every name.
  auto stats =
      std::make_shared<st::GoStats>(store, std::map<std::string, std::string>{{"env", "test.1"}});
  Server server(stats_rules, with_stats(stats));
  const std::size_t calls = make_stats_calls(server);
  store->flush();
  const Counts want = expected_counts(calls, ".__env=test_1");
  CHECK(daemon.wait_for(want) == want);
  // One timing per call (ratelimit_server.<Method>.response_time, in ms).
  const auto timers = daemon.admin_command("timers");
  REQUIRE(timers);
  CHECK_THAT(*timers,
             Catch::Contains("'ratelimit_server.ShouldRateLimit.response_time.__env=test_1'"));
  // A second flush sends only what changed since: one more call of alice (cached, over 1).
  CHECK(server.code("stats", {{{{"user", "alice"}}}}) == pb::RateLimitResponse::OVER_LIMIT);
  store->flush();
  Counts more = want;
  for (const char* n : {"total_hits", "over_limit", "over_limit_with_local_cache"})
    more["ratelimit.service.rate_limit.stats.user." + std::string(n) + ".__env=test_1"] += 1;
  more["ratelimit_server.ShouldRateLimit.total_requests.__env=test_1"] += 1;
  CHECK(daemon.wait_for(more) == more);
}

TEST_CASE("A stopped statsd daemon costs the stats only: calls complete, the buffer stays bounded",
          "[stats][statsd]") {
  StatsdDaemon daemon;
  if (!daemon.up()) return;
  st::NetSinkOptions o;
  o.host = "127.0.0.1";
  o.port = daemon.port;
  o.max_buffered = 64 * 1024;
  auto sink = std::make_shared<st::NetSink>(o);
  auto store = std::make_shared<st::Store>(sink);
  auto stats = std::make_shared<st::GoStats>(store, std::map<std::string, std::string>{});
  Server server(stats_rules, with_stats(stats));
  // Connected and delivering before the stop.
  CHECK(server.code("stats", {{{{"path", "a"}}}}) == pb::RateLimitResponse::OK);
  store->flush();
  const Counts first{{"ratelimit.service.rate_limit.stats.path_a.total_hits", 1},
                     {"ratelimit.service.rate_limit.stats.path_a.within_limit", 1},
                     {"ratelimit.service.config_load_success", 1},
                     {"ratelimit_server.ShouldRateLimit.total_requests", 1}};
  REQUIRE(daemon.wait_for(first) == first);
  REQUIRE(::kill(daemon.pid, SIGSTOP) == 0);
  // Far more than the socket buffers and the sink's 64 KiB hold: 400 000 timings of about 60
  // bytes (24 MB) straight into the sink, and 300 calls through the server.
  std::size_t most = 0;
  for (int i = 0; i < 400'000; ++i) {
    sink->timer("ratelimit_server.ShouldRateLimit.response_time_filler", 12);
    if (i % 1000 == 0) most = std::max(most, sink->buffered());
  }
  for (int i = 0; i < 300; ++i)
    CHECK(server.code("stats", {{{{"path", "p" + std::to_string(i % 7)}}}}) ==
          pb::RateLimitResponse::OK);
  store->flush();
  most = std::max(most, sink->buffered());
  CHECK(most <= o.max_buffered);
  CHECK(sink->dropped_bytes() > 0);
  // The stats' own memory: 7 descriptor keys whatever the number of calls.
  std::size_t keys = 0;
  for (const auto& [name, value] : store->totals())
    if (name.find(".path_p") != std::string::npos) ++keys;
  CHECK(keys == 7 * 6);  // the six counters of each key (base_limiter.go's RateLimitStats)
  REQUIRE(::kill(daemon.pid, SIGCONT) == 0);
}

namespace {

/// Envoy Gateway's mapping file (envoy_gateway_statsd_conf.hpp).
const std::string envoy_gateway_mapping(ratelimit_test::envoy_gateway_statsd_conf);

const std::string nested_rules = R"(domain: web
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: client
    value: app
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: flag
    value: on
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
)";

/// USE_PROMETHEUS on a free loopback port (DEBUG_PORT too), the given mapping file or none.
st::Options prometheus_settings(const std::string& mapper_yaml) {
  st::Options s;
  s.use_statsd = false;
  s.use_prometheus = true;
  s.prometheus_addr = "127.0.0.1:0";
  s.prometheus_mapper_yaml = mapper_yaml;
  s.debug_host = "127.0.0.1";
  s.debug_port = 0;
  s.flush_interval = std::chrono::hours{1};  // flushed by the test
  return s;
}

/// The calls of the Prometheus cases: user=u 3 times (within 3), client=app/path=/x 3 hits
/// (limit 2, near floor(2 * 0.8) = 1: 0 -> 3 over 1, near 2 - 1 = 1), flag=on 2 hits (limit 1,
/// near 0: over 1, near 1, shadow 1), an unknown domain, an empty domain (service_error).
void make_web_calls(Server& s) {
  for (int i = 0; i < 3; ++i)
    CHECK(s.code("web", {{{{"user", "u"}}}}) == pb::RateLimitResponse::OK);
  CHECK(s.code("web", {{{{"client", "app"}, {"path", "/x"}}}}, 3) ==
        pb::RateLimitResponse::OVER_LIMIT);
  CHECK(s.code("web", {{{{"flag", "on"}}}}, 2) == pb::RateLimitResponse::OK);
  CHECK(s.code("nowhere", {{{{"a", "1"}}}}) == pb::RateLimitResponse::OK);
  CHECK(s.call("", {{{{"user", "u"}}}}).first.error_code() == grpc::StatusCode::UNKNOWN);
}

}  // namespace

TEST_CASE("PROMETHEUS_ADDR with the reference's default mapping: its names and labels",
          "[stats][prometheus]") {
  st::Runtime rt(prometheus_settings(""));
  Server server(nested_rules, with_stats(rt.observer()));
  rt.start_listeners([&] { return server.service->config(); });
  make_web_calls(server);
  rt.store()->flush();
  const std::string text = http_get(rt.prometheus_port(), "/metrics");
  INFO(text);
  // default_mapper.yaml: two-part keys by glob (domain, key1) ...
  CHECK_THAT(text, Catch::Contains("# TYPE ratelimit_service_rate_limit_total_hits counter"));
  CHECK_THAT(
      text,
      Catch::Contains("ratelimit_service_rate_limit_total_hits{domain=\"web\",key1=\"user\"} 3\n"));
  CHECK_THAT(text,
             Catch::Contains(
                 "ratelimit_service_rate_limit_within_limit{domain=\"web\",key1=\"user\"} 3\n"));
  CHECK_THAT(text,
             Catch::Contains(
                 "ratelimit_service_rate_limit_shadow_mode{domain=\"web\",key1=\"flag_on\"} 1\n"));
  // ... three-part keys by regex (domain, key1, key2): "web.client_app.path".
  CHECK_THAT(text, Catch::Contains("ratelimit_service_rate_limit_over_limit{domain=\"web\",key1="
                                   "\"client_app\",key2=\"path\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("ratelimit_service_rate_limit_near_limit{domain=\"web\",key1="
                                   "\"client_app\",key2=\"path\"} 1\n"));
  CHECK_THAT(
      text,
      Catch::Contains("ratelimit_service_should_rate_limit_error{err_type=\"service_error\"} 1\n"));
  CHECK_THAT(text, Catch::Contains(
                       "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 7\n"));
  CHECK_THAT(text, Catch::Contains("ratelimit_service_config_load_success 1\n"));
  // The response time: a histogram in seconds (scale 0.001) with one observation per call.
  CHECK_THAT(text, Catch::Contains("# TYPE ratelimit_service_response_time_seconds histogram"));
  CHECK_THAT(text, Catch::Contains("ratelimit_service_response_time_seconds_bucket{grpc_method="
                                   "\"ShouldRateLimit\",le=\"0.005\"}"));
  CHECK_THAT(
      text,
      Catch::Contains(
          "ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"} 7\n"));
  // Unmapped: named after the statsd name (statsd_exporter's escaping).
  CHECK_THAT(text, Catch::Contains("ratelimit_service_rate_limit_nowhere_domain_not_found 1\n"));
}

TEST_CASE("PROMETHEUS_MAPPER_YAML with Envoy Gateway's mapping: its names, labels and drops",
          "[stats][prometheus]") {
  TempDir dir;
  dir.write("statsd_conf.yaml", envoy_gateway_mapping);
  st::Runtime rt(prometheus_settings((dir.path / "statsd_conf.yaml").string()));
  Server server(nested_rules, with_stats(rt.observer()));
  rt.start_listeners([&] { return server.service->config(); });
  make_web_calls(server);
  rt.store()->flush();
  const std::string text = http_get(rt.prometheus_port(), "/metrics");
  INFO(text);
  CHECK_THAT(
      text,
      Catch::Contains("ratelimit_service_rate_limit_total_hits{domain=\"web\",key1=\"user\"} 3\n"));
  // Three-part keys by the glob "*.*.*".
  CHECK_THAT(text, Catch::Contains("ratelimit_service_rate_limit_total_hits{domain=\"web\",key1="
                                   "\"client_app\",key2=\"path\"} 3\n"));
  CHECK_THAT(text, Catch::Contains("ratelimit_service_rate_limit_over_limit{domain=\"web\",key1="
                                   "\"client_app\",key2=\"path\"} 1\n"));
  CHECK_THAT(text, Catch::Contains(
                       "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 7\n"));
  CHECK_THAT(
      text,
      Catch::Contains(
          "ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"} 7\n"));
  // Its last mapping drops the rest: two-part shadow_mode (only a three-part one is mapped)
  // and the unknown domain.
  CHECK_THAT(text, !Catch::Contains("shadow_mode"));
  CHECK_THAT(text, !Catch::Contains("domain_not_found"));
}

TEST_CASE("A mapping file's errors name the file, the mapping and the field",
          "[stats][prometheus]") {
  CHECK_THROWS_WITH(st::Mapper::parse("mappings:\n  - match: a.*\n    name: \"x-y\"\n", "f.yaml"),
                    Catch::Contains("f.yaml: mappings[0].name = \"x-y\""));
  CHECK_THROWS_WITH(st::Mapper::parse("mappings:\n  - match: \"(\"\n    match_type: regex\n    "
                                      "name: x\n",
                                      "f.yaml"),
                    Catch::Contains("f.yaml: mappings[0].match"));
  CHECK_THROWS_WITH(
      st::Mapper::parse("mappings:\n  - match: a\n    name: x\n    labels: {\"0k\": v}\n", "f"),
      Catch::Contains("mappings[0].labels.0k"));
  // PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS drops the response time's scale (milliseconds).
  const auto m = st::Mapper::reference_default(true).map(
      "ratelimit_server.ShouldRateLimit.response_time", st::MetricKind::observer);
  REQUIRE(m);
  CHECK((m->histogram && m->scale == 1.0 && m->name == "ratelimit_service_response_time_seconds"));
  CHECK(st::Mapper::reference_default(false)
            .map("ratelimit_server.ShouldRateLimit.response_time", st::MetricKind::observer)
            ->scale == 0.001);
  // match_metric_type: counter does not map a timer of that name.
  CHECK_FALSE(st::Mapper::reference_default(false).map("ratelimit_server.X.total_requests",
                                                       st::MetricKind::observer));
}

TEST_CASE("The debug listener: /, /rlconfig in the reference's format, /stats, no pprof",
          "[stats][debug]") {
  st::Options s;
  s.use_statsd = false;
  s.debug_host = "127.0.0.1";
  s.debug_port = 0;
  st::Runtime rt(s);
  Server server(nested_rules, with_stats(rt.observer()));
  rt.start_listeners([&] { return server.service->config(); });
  const int port = rt.debug_port();
  REQUIRE(port > 0);
  CHECK(http_get(port, "/") ==
        "/debug/pprof/: not served by this server (Go's profiler; use perf or gdb)\n"
        "/rlconfig: print out the currently loaded configuration for debugging\n"
        "/stats: print out stats\n");
  // config_impl.go rateLimitDescriptor.dump: "<FullKey>: unit=<UNIT> requests_per_unit=<n>,
  // shadow_mode: <bool>, quota_mode: <bool>", FullKey the path as written.
  CHECK(http_get(port, "/rlconfig") ==
        "web.user: unit=MINUTE requests_per_unit=10, shadow_mode: false, quota_mode: false\n"
        "web.client_app.path: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: "
        "false\n"
        "web.flag_on: unit=MINUTE requests_per_unit=1, shadow_mode: true, quota_mode: false\n");
  CHECK(server.code("web", {{{{"user", "u"}}}}) == pb::RateLimitResponse::OK);
  const std::string stats = http_get(port, "/stats");
  CHECK_THAT(stats, Catch::Contains("ratelimit.service.rate_limit.web.user.total_hits: 1\n"));
  CHECK_THAT(stats, Catch::Contains("ratelimit_server.ShouldRateLimit.total_requests: 1\n"));
  int status = 0;
  CHECK_THAT(http_get(port, "/debug/pprof/profile", &status), Catch::Contains("not served"));
  CHECK(status == 404);
}

}  // namespace stats_test
