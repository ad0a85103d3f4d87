// The xDS config source against a real management server: a Node.js program on Envoy's own
// discovery protos (tests/xds/management_server.js, npm packages installed by scripts/test.sh
// into a build folder and named by RATELIMIT_TEST_XDS_NODE_MODULES), over gRPC with mutual TLS
// on the certificates of scripts/tls_certs.sh (RATELIMIT_TEST_TLS_CERTS). The ACK (or NACK)
// the management server receives is the synchronization: once it has it, the next call is
// decided by the configuration in force. No wall-clock bound is asserted.

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <catch2/catch.hpp>

#ifdef RATELIMIT_SERVER_HAVE_REDIS
#include "support/redis_backend.hpp"
#endif
#include "counters.hpp"
#include "envoy_gateway_statsd_conf.hpp"
#include "rls.grpc.pb.h"
#include "service.hpp"
#include "settings.hpp"
#include "xds/xds_client.hpp"
#include "xds/xds_rules.hpp"
#include "xds/xds_settings.hpp"

extern char** environ;

namespace {

namespace rs = ratelimit::server;
namespace rls = envoy::service::ratelimit::v3;
using namespace std::chrono_literals;
using Fields = std::vector<std::string>;

/// Generous: a deadline only a hung test reaches.
constexpr auto patience = 60s;

std::string required_env(const char* name, const char* how) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0')
    throw std::runtime_error(std::string(name) + " is not set: " + how);
  return v;
}

std::string certs() {
  return required_env("RATELIMIT_TEST_TLS_CERTS",
                      "run scripts/tls_certs.sh DIR and set RATELIMIT_TEST_TLS_CERTS=DIR");
}

Fields split_tabs(const std::string& line) {
  Fields out;
  std::string::size_type start = 0;
  while (true) {
    const auto tab = line.find('\t', start);
    out.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) return out;
    start = tab + 1;
  }
}

/// A child process with its stdout (and optionally stderr) read line by line on a thread.
class Child {
 public:
  Child(std::vector<std::string> argv, const std::vector<std::string>& extra_env,
        bool read_stderr) {
    int in[2];
    int out[2];
    if (::pipe(in) != 0 || ::pipe(out) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], read_stderr ? 2 : 1);
    posix_spawn_file_actions_addclose(&actions, in[1]);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    const int rc = ::posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    ::close(in[0]);
    ::close(out[1]);
    if (rc != 0) throw std::runtime_error("cannot start " + argv[0]);
    in_ = in[1];
    reader_ = std::thread([this, fd = out[0]] {
      std::string pending;
      char buf[4096];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof buf)) > 0) {
        pending.append(buf, static_cast<std::size_t>(n));
        std::string::size_type nl;
        while ((nl = pending.find('\n')) != std::string::npos) {
          {
            const std::lock_guard lock(mutex_);
            lines_.push_back(pending.substr(0, nl));
          }
          changed_.notify_all();
          pending.erase(0, nl + 1);
        }
      }
      ::close(fd);
      const std::lock_guard lock(mutex_);
      closed_ = true;
      changed_.notify_all();
    });
  }
  ~Child() { kill(SIGKILL); }

  void write_line(const std::string& line) {
    const std::string text = line + "\n";
    REQUIRE(::write(in_, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  }
  /// The first line (from `from` on) that `match` accepts, split at tabs; fails the test past
  /// the deadline or when the child's output ends. `at` receives its index.
  Fields wait_line(const std::function<bool(const Fields&)>& match, std::size_t from = 0,
                   std::size_t* at = nullptr) {
    std::unique_lock lock(mutex_);
    std::optional<Fields> found;
    const bool ok = changed_.wait_for(lock, patience, [&] {
      for (std::size_t i = from; i < lines_.size(); ++i) {
        Fields f = split_tabs(lines_[i]);
        if (match(f)) {
          if (at != nullptr) *at = i;
          found = std::move(f);
          return true;
        }
      }
      return closed_;
    });
    if (!ok || !found) {
      std::string seen;
      for (const auto& l : lines_) seen += l + "\n";
      FAIL("no expected line; the child wrote:\n" << seen);
    }
    return *found;
  }
  std::vector<std::string> lines() const {
    const std::lock_guard lock(mutex_);
    return lines_;
  }
  void kill(int sig) {
    if (pid_ > 0) {
      ::kill(pid_, sig);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
      exit_status_ = status;
    }
    if (in_ >= 0) ::close(in_);
    in_ = -1;
    if (reader_.joinable()) reader_.join();
  }
  int exit_status() const { return exit_status_; }

 private:
  pid_t pid_ = -1;
  int in_ = -1;
  int exit_status_ = -1;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> lines_;
  bool closed_ = false;
  std::thread reader_;
};

/// The test management server (tests/xds/management_server.js).
class ManagementServer {
 public:
  explicit ManagementServer(int port = 0, const std::string& server_cert = "server")
      : child_({"node", RATELIMIT_XDS_MANAGEMENT_SERVER, std::to_string(port), certs(),
                "--server-cert", server_cert},
               {"NODE_PATH=" + required_env("RATELIMIT_TEST_XDS_NODE_MODULES",
                                            "scripts/test.sh installs the npm packages of "
                                            "server/tests/xds/package.json and sets it")},
               false) {
    port_ = std::stoi(child_.wait_line([](const Fields& f) { return f[0] == "listening"; })[1]);
  }
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  /// Sends `resources` (a JSON list of RateLimitConfig) as version `version`; returns the
  /// nonce of the response that went to stream `stream`.
  std::string push(const std::string& version, const std::string& resources, int stream) {
    const std::size_t from = child_.lines().size();
    std::string flat = resources;  // one command a line
    for (char& c : flat)
      if (c == '\n') c = ' ';
    child_.write_line(R"({"push": {"version": ")" + version + R"(", "resources": )" + flat + "}}");
    return sent(version, stream, from);
  }
  /// The nonce of the response of `version` sent to `stream` (from line `from` on).
  std::string sent(const std::string& version, int stream, std::size_t from = 0) {
    return child_.wait_line(
        [&](const Fields& f) {
          return f[0] == "sent" && f[1] == std::to_string(stream) && f[2] == version;
        },
        from)[3];
  }
  /// The request on `stream` that answers `nonce` ("" for the stream's first request):
  /// fields as management_server.js writes them.
  Fields request(int stream, const std::string& nonce) {
    return child_.wait_line([&](const Fields& f) {
      return f[0] == "request" && f[1] == std::to_string(stream) && f[3] == nonce;
    });
  }
  /// The stream line of `stream` (its x-* headers).
  Fields stream(int stream) {
    return child_.wait_line(
        [&](const Fields& f) { return f[0] == "stream" && f[1] == std::to_string(stream); });
  }
  bool saw_stream() const {
    for (const auto& l : child_.lines())
      if (l.rfind("stream\t", 0) == 0) return true;
    return false;
  }
  void kill() { child_.kill(SIGKILL); }

 private:
  Child child_;
  int port_ = 0;
};

// The fields of a request line.
enum Field {
  kind,
  stream_id,
  version,
  nonce,
  has_error,
  error_message,
  node_id,
  type_url,
  names,
  metadata
};

rs::XdsSettings client_settings(const ManagementServer& ms) {
  rs::XdsSettings s;
  s.use_xds = true;
  s.server_url = ms.address();
  s.use_tls = true;
  s.server_ca = certs() + "/ca.crt";
  s.client_cert = certs() + "/client.crt";
  s.client_key = certs() + "/client.key";
  s.node_id = "test-node";
  s.node_metadata = {{"zone", "z1"}, {"role", "rls"}};
  s.additional_headers = {{"x-test-header", "present"}};
  s.backoff_initial = 10ms;
  s.connect_retry_interval = 50ms;
  return s;
}

/// A fixed instant (the counters' windows never roll over during a test).
std::chrono::nanoseconds fixed_now() { return std::chrono::seconds{1'800'000'000}; }

rls::RateLimitRequest request_for(const std::string& key, const std::string& domain = "d") {
  rls::RateLimitRequest r;
  r.set_domain(domain);
  auto* e = r.add_descriptors()->add_entries();
  e->set_key(key);
  e->set_value("v");
  return r;
}

rls::RateLimitResponse decide(rs::Service& service, const std::string& key) {
  rls::RateLimitResponse res;
  REQUIRE(service.should_rate_limit(request_for(key), res).ok());
  return res;
}

bool wait_until(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);  // a condition polled, not a timing
  }
  return true;
}

const char* const per_minute_3 =
    R"([{"name": "one", "domain": "d", "descriptors": [
          {"key": "k", "rate_limit": {"unit": "MINUTE", "requests_per_unit": 3}}]}])";
const char* const with_second_limit =
    R"([{"name": "one", "domain": "d", "descriptors": [
          {"key": "k", "rate_limit": {"unit": "MINUTE", "requests_per_unit": 3}},
          {"key": "k2", "rate_limit": {"unit": "SECOND", "requests_per_unit": 1}}]}])";
// No unit on a limited descriptor: the reference refuses "invalid rate limit unit 'UNKNOWN'".
const char* const bad_unit =
    R"([{"name": "one", "domain": "d", "descriptors": [
          {"key": "k", "rate_limit": {"unit": "UNKNOWN", "requests_per_unit": 5}}]}])";
const char* const per_minute_10 =
    R"([{"name": "one", "domain": "d", "descriptors": [
          {"key": "k", "rate_limit": {"unit": "MINUTE", "requests_per_unit": 10}}]}])";

}  // namespace

TEST_CASE(
    "xDS: a config, an update, a bad config (NACK) and a removal, each followed once "
    "ACKed; a restarted management server gets the subscription again",
    "[xds]") {
  ManagementServer ms;
  auto service =
      std::make_shared<rs::Service>(rs::make_memory_counters(), rs::ServiceSettings{}, fixed_now);
  rs::XdsClient client(service, client_settings(ms), ratelimit::DomainMerge::refuse);
  client.start();

  // The subscription as go-control-plane's ADS client sends it: node id and metadata, the type,
  // no resource names, no version and no nonce yet; the extra headers as gRPC metadata.
  const Fields first = ms.request(1, "");
  CHECK(first[version] == "");
  CHECK(first[has_error] == "0");
  CHECK(first[node_id] == "test-node");
  CHECK(first[type_url] == rs::rate_limit_config_type);
  CHECK(first[names] == "0");
  CHECK(first[metadata] == "role=rls;zone=z1");
  CHECK(ms.stream(1)[2] == "x-test-header=present");
  // No configuration yet: the reference's error.
  {
    rls::RateLimitResponse res;
    const auto st = service->should_rate_limit(request_for("k"), res);
    CHECK(st.error_code() == grpc::StatusCode::UNKNOWN);
    CHECK(st.error_message() == "no rate limit configuration loaded");
  }

  // Version 1: k has 3 a minute.
  const std::string n1 = ms.push("1", per_minute_3, 1);
  const Fields ack1 = ms.request(1, n1);
  CHECK(ack1[version] == "1");
  CHECK(ack1[has_error] == "0");
  CHECK(ack1[node_id] == "test-node");
  CHECK(client.wait_first_response(0ms));
  CHECK(client.loaded());
  // Hits 1..3 within 3 (remaining 3 - n); hit 4 over. Every hit is counted: 4.
  for (int n = 1; n <= 3; ++n) {
    const auto res = decide(*service, "k");
    CHECK(res.overall_code() == rls::RateLimitResponse::OK);
    CHECK(res.statuses(0).current_limit().requests_per_unit() == 3);
    CHECK(res.statuses(0).limit_remaining() == static_cast<unsigned>(3 - n));
  }
  CHECK(decide(*service, "k").overall_code() == rls::RateLimitResponse::OVER_LIMIT);

  // Version 2 adds k2 (1 a second); k's limit is unchanged and keeps its 4 hits: hit 5 over.
  const std::string n2 = ms.push("2", with_second_limit, 1);
  const Fields ack2 = ms.request(1, n2);
  CHECK(ack2[version] == "2");
  CHECK(ack2[has_error] == "0");
  CHECK(decide(*service, "k").overall_code() == rls::RateLimitResponse::OVER_LIMIT);
  const auto k2 = decide(*service, "k2");
  CHECK(k2.overall_code() == rls::RateLimitResponse::OK);
  CHECK(k2.statuses(0).current_limit().requests_per_unit() == 1);
  CHECK(k2.statuses(0).limit_remaining() == 0);  // 1 - 1 hit

  // Version 3 does not load: NACKed with the version still 2 and the error; version 2 stays
  // in force (k over at hit 6, k2 over at its hit 2).
  const std::string n3 = ms.push("3", bad_unit, 1);
  const Fields nack3 = ms.request(1, n3);
  CHECK(nack3[version] == "2");
  CHECK(nack3[has_error] == "1");
  CHECK_THAT(nack3[error_message], Catch::Contains("UNKNOWN"));
  CHECK_THAT(client.last_error(), Catch::Contains("UNKNOWN"));
  CHECK(decide(*service, "k").overall_code() == rls::RateLimitResponse::OVER_LIMIT);
  CHECK(decide(*service, "k2").overall_code() == rls::RateLimitResponse::OVER_LIMIT);

  // Version 4 removes every resource: ACKed, and no limit applies (nothing is counted).
  const std::string n4 = ms.push("4", "[]", 1);
  const Fields ack4 = ms.request(1, n4);
  CHECK(ack4[version] == "4");
  CHECK(ack4[has_error] == "0");
  CHECK_FALSE(client.loaded());
  {
    const auto res = decide(*service, "k");
    CHECK(res.overall_code() == rls::RateLimitResponse::OK);
    CHECK_FALSE(res.statuses(0).has_current_limit());
  }

  // The management server dies; version 4 stays in force. A new one on the same port with
  // version 5 (k 10 a minute) gets a new stream whose first request carries version 4 and
  // the last nonce received, as go-control-plane's client resubscribes.
  const int port = ms.port();
  ms.kill();
  {
    const auto res = decide(*service, "k");
    CHECK_FALSE(res.statuses(0).has_current_limit());
  }
  ManagementServer again(port);
  const Fields resubscribe = again.request(1, n4);
  CHECK(resubscribe[version] == "4");
  CHECK(resubscribe[has_error] == "0");
  CHECK(resubscribe[node_id] == "test-node");
  const std::string n5 = again.push("5", per_minute_10, 1);
  const Fields ack5 = again.request(1, n5);
  CHECK(ack5[version] == "5");
  CHECK(client.streams() == 2);
  // k's limit (same descriptor and unit) kept its 6 hits through the removal: hit 7 leaves
  // 10 - 7 = 3.
  const auto res = decide(*service, "k");
  CHECK(res.overall_code() == rls::RateLimitResponse::OK);
  CHECK(res.statuses(0).current_limit().requests_per_unit() == 10);
  CHECK(res.statuses(0).limit_remaining() == 3);
  client.stop();
}

TEST_CASE(
    "xDS: the server's name is checked (or the SAN given), and mutual TLS needs the "
    "client certificate",
    "[xds]") {
  ManagementServer ms;
  auto service =
      std::make_shared<rs::Service>(rs::make_memory_counters(), rs::ServiceSettings{}, fixed_now);
  rs::XdsSettings s = client_settings(ms);
  bool connects = true;
  SECTION("CONFIG_GRPC_XDS_SERVER_TLS_SAN names the certificate's DNS name: connects") {
    s.server_san = "localhost";
  }
  SECTION("a SAN the certificate lacks: refused") {
    s.server_san = "wrong.example";
    connects = false;
  }
  SECTION("no client certificate: refused by the management server") {
    s.client_cert.clear();
    s.client_key.clear();
    connects = false;
  }
  SECTION("a CA that did not sign the server's certificate: refused") {
    s.server_ca = certs() + "/other-ca.crt";
    connects = false;
  }
  rs::XdsClient client(service, s, ratelimit::DomainMerge::refuse);
  client.start();
  if (connects) {
    CHECK(ms.request(1, "")[node_id] == "test-node");
  } else {
    // Two attempts ended (at the handshake, or, in TLS 1.3, when the management server's alert
    // ends a stream the client had started), and none reached the management server.
    REQUIRE(wait_until([&] { return client.connect_failures() + client.streams() >= 2; }));
    CHECK_FALSE(ms.saw_stream());
  }
  client.stop();
}

TEST_CASE(
    "xDS: a response above XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES breaks the stream and is not "
    "loaded",
    "[xds]") {
  ManagementServer ms;
  auto service =
      std::make_shared<rs::Service>(rs::make_memory_counters(), rs::ServiceSettings{}, fixed_now);
  rs::XdsSettings s = client_settings(ms);
  // The response of per_minute_3 is over 100 bytes (its type URL alone is 67).
  s.max_message_bytes = 100;
  rs::XdsClient client(service, s, ratelimit::DomainMerge::refuse);
  client.start();
  ms.request(1, "");
  ms.push("1", per_minute_3, 1);
  // gRPC refuses the message (RESOURCE_EXHAUSTED): the stream ends, and a new one starts after
  // the backoff, which the management server serves the same response again.
  CHECK_FALSE(ms.request(2, "")[node_id].empty());
  CHECK_FALSE(client.wait_first_response(0ms));
  rls::RateLimitResponse res;
  CHECK(service->should_rate_limit(request_for("k"), res).error_code() ==
        grpc::StatusCode::UNKNOWN);
  client.stop();
}

TEST_CASE("xDS settings: the reference's names and defaults, as the client reads them", "[xds]") {
  const auto from = [](std::map<std::string, std::string> env) {
    std::vector<std::string> names;
    for (const auto& [k, v] : env) names.push_back(k);
    return rs::xds_settings(rs::read_settings(
        [env](const std::string& n) -> std::optional<std::string> {
          const auto it = env.find(n);
          if (it == env.end()) return std::nullopt;
          return it->second;
        },
        {}, names));
  };
  // src/settings/settings.go's defaults.
  const rs::XdsSettings d = from({});
  CHECK_FALSE(d.use_xds);
  CHECK_FALSE(d.force_start);
  CHECK(d.node_id == "default");
  CHECK(d.server_url == "localhost:18000");
  CHECK(d.connect_retry_interval == 3s);
  CHECK(d.backoff_initial == 10s);
  CHECK(d.backoff_max == 60s);
  CHECK(d.backoff_factor == 0.5);
  CHECK(d.backoff_jitter);
  CHECK(d.max_message_bytes == 0);
  CHECK_FALSE(d.use_tls);

  const rs::XdsSettings s = from({{"CONFIG_TYPE", "GRPC_XDS_SOTW"},
                                  {"FORCE_START_WITHOUT_INITIAL_CONFIG", "true"},
                                  {"CONFIG_GRPC_XDS_NODE_METADATA", "a=1,b=x=y,skipped,c="},
                                  {"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "X-One:1,x-two:2"},
                                  {"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "xds.example"},
                                  {"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "1m30.5s"},
                                  {"XDS_CLIENT_BACKOFF_JITTER", "false"},
                                  {"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "1048576"}});
  CHECK(s.use_xds);
  CHECK(s.force_start);
  // SplitN(entry, "=", 2): "b=x=y" is b -> "x=y"; an entry without '=' is skipped.
  CHECK(s.node_metadata == std::map<std::string, std::string>{{"a", "1"}, {"b", "x=y"}, {"c", ""}});
  // gRPC metadata names are lower case, as Go's metadata.New makes them.
  CHECK(s.additional_headers == std::map<std::string, std::string>{{"x-one", "1"}, {"x-two", "2"}});
  CHECK(s.server_san == "xds.example");
  // 1 min + 30.5 s = 90.5 s = 90 500 000 000 ns.
  CHECK(s.backoff_initial == std::chrono::nanoseconds{90'500'000'000});
  CHECK_FALSE(s.backoff_jitter);
  CHECK(s.max_message_bytes == 1'048'576);

  CHECK_THROWS_WITH(from({{"CONFIG_TYPE", "FILES"}}), Catch::Contains("CONFIG_TYPE"));
  CHECK_THROWS_WITH(from({{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "a:1,b"}}),
                    Catch::Contains("invalid map item \"b\""));
  CHECK_THROWS_WITH(from({{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "-1"}}),
                    Catch::Contains("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES = -1"));
  CHECK_THROWS_WITH(from({{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "soon"}}),
                    Catch::Contains("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"));
}

TEST_CASE("The reconnect waits are jpillora/backoff's, the connect retries linear with jitter",
          "[xds]") {
  // The reference's defaults: min 10 s, max 60 s, factor 0.5, jitter. 10 s * 0.5^n <= 10 s, and
  // the jittered draw lies between that and 10 s; below the minimum it is raised to it: 10 s.
  rs::GoBackoff defaults(10s, 60s, 0.5, true);
  for (int n = 0; n < 6; ++n)
    for (double r : {0.0, 0.5, 0.999}) CHECK(defaults.for_attempt(n, r) == 10s);
  // min 1 s, max 60 s, factor 2, no jitter: 1, 2, 4, 8, 16, 32 s, then 64 s capped at 60 s.
  rs::GoBackoff doubling(1s, 60s, 2, false);
  const std::chrono::seconds expected[] = {1s, 2s, 4s, 8s, 16s, 32s, 60s, 60s};
  for (auto e : expected) CHECK(doubling.next(0.5) == e);
  // With jitter, attempt 2: 1 s * 2^2 = 4 s, a draw of 0.5 gives 0.5 * (4 - 1) + 1 = 2.5 s.
  CHECK(rs::GoBackoff(1s, 60s, 2, true).for_attempt(2, 0.5) == 2500ms);
  // Zero values read as jpillora's defaults (100 ms, 10 s, factor 2); min >= max waits max.
  CHECK(rs::GoBackoff(0s, 0s, 0, false).for_attempt(0, 0) == 100ms);
  CHECK(rs::GoBackoff(0s, 0s, 0, false).for_attempt(3, 0) == 800ms);  // 100 ms * 2^3
  CHECK(rs::GoBackoff(5s, 2s, 2, false).for_attempt(0, 0) == 2s);
  // BackoffLinearWithJitter(3 s, 0.5): 3 s * (1 + 0.5 * (2r - 1)), r = 0 -> 1.5 s, 0.5 -> 3 s.
  CHECK(rs::linear_with_jitter(3s, 0.0) == 1500ms);
  CHECK(rs::linear_with_jitter(3s, 0.5) == 3s);
}

TEST_CASE("A RateLimitConfig becomes the rules file it stands for", "[xds]") {
  namespace conf = ratelimit::config::ratelimit::v3;
  conf::RateLimitConfig c;
  c.set_name("n");
  c.set_domain("d");
  auto* a = c.add_descriptors();
  a->set_key("k");
  a->set_value("v");
  a->mutable_rate_limit()->set_unit(conf::HOUR);
  a->mutable_rate_limit()->set_requests_per_unit(7);
  a->mutable_rate_limit()->set_name("hourly");
  a->set_shadow_mode(true);
  auto* nested = a->add_descriptors();
  nested->set_key("inner");
  nested->mutable_rate_limit()->set_unlimited(true);
  nested->mutable_rate_limit()->add_replaces()->set_name("hourly");
  (*a->mutable_metadata()->mutable_fields())["team"].set_string_value("x: \"y\"");
  google::protobuf::RepeatedPtrField<google::protobuf::Any> resources;
  resources.Add()->PackFrom(c);
  const auto sources = rs::decode_resources(resources);
  REQUIRE(sources.size() == 1);
  CHECK(sources[0].name == "resource \"n\"");
  const ratelimit::RulesConfig config = rs::rules_config(sources, ratelimit::DomainMerge::refuse);
  REQUIRE(config.find("d") != nullptr);
  // Through the service: k=v has 7 an hour in shadow mode, so over it still says OK.
  auto service =
      std::make_shared<rs::Service>(rs::make_memory_counters(), rs::ServiceSettings{}, fixed_now);
  service->reload(config);
  const auto res = decide(*service, "k");
  CHECK(res.statuses(0).current_limit().requests_per_unit() == 7);
  CHECK(res.statuses(0).current_limit().unit() == rls::RateLimitResponse::RateLimit::HOUR);
  CHECK(res.statuses(0).limit_remaining() == 6);  // 7 - 1

  // Refusals: a resource of another type, and (as the reference) a unit with `unlimited`.
  google::protobuf::RepeatedPtrField<google::protobuf::Any> other;
  other.Add()->set_type_url("type.googleapis.com/google.protobuf.Empty");
  CHECK_THROWS_WITH(
      rs::decode_resources(other),
      Catch::Contains("resource 0: type \"type.googleapis.com/google.protobuf.Empty\""));
  nested->mutable_rate_limit()->set_unit(conf::SECOND);
  resources.Mutable(0)->PackFrom(c);
  CHECK_THROWS_WITH(
      rs::rules_config(rs::decode_resources(resources), ratelimit::DomainMerge::refuse),
      Catch::Contains("unlimited: true takes no unit"));
}

namespace {

/// A port free now on 127.0.0.1 (bound to 0, read, closed).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

bool accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

/// The server binary against `ms`, the xDS settings as a deployment sets them.
Child server_binary(const ManagementServer& ms, int grpc_port, std::vector<std::string> env) {
  const std::string dir = certs();
  std::vector<std::string> base{"CONFIG_TYPE=GRPC_XDS_SOTW",
                                "CONFIG_GRPC_XDS_SERVER_URL=" + ms.address(),
                                "CONFIG_GRPC_XDS_NODE_ID=binary-node",
                                "CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
                                "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=" + dir + "/client.crt",
                                "CONFIG_GRPC_XDS_CLIENT_TLS_KEY=" + dir + "/client.key",
                                "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + dir + "/ca.crt",
                                "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=10ms",
                                "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL=50ms",
                                "GRPC_HOST=127.0.0.1",
                                "GRPC_PORT=" + std::to_string(grpc_port),
                                "HOST=127.0.0.1",
                                "PORT=0",
                                "RATELIMIT_SERVER_STORAGE=memory"};
  base.insert(base.end(), env.begin(), env.end());
  return Child({RATELIMIT_SERVER_BINARY}, base, true);
}

/// ShouldRateLimit on 127.0.0.1:`port`; over TLS when `tls` (trusting the test CA, presenting
/// no client certificate, as Envoy calls Envoy Gateway's rate limit service).
grpc::Status call(int port, const std::string& key, rls::RateLimitResponse& res,
                  const std::string& domain = "d", bool tls = false) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (tls) {
    grpc::SslCredentialsOptions o;
    std::ifstream in(certs() + "/ca.crt");
    o.pem_root_certs.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    credentials = grpc::SslCredentials(o);
  }
  auto stub = rls::RateLimitService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), credentials));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + patience);
  return stub->ShouldRateLimit(&ctx, request_for(key, domain), &res);
}

bool listening_line(const Fields& f) {
  return f[0].find("ratelimit_server: gRPC on 127.0.0.1:") != std::string::npos;
}

}  // namespace

TEST_CASE("The binary: no listener before the first configuration, as the reference waits",
          "[xds]") {
  ManagementServer ms;
  const int port = free_port();
  Child server = server_binary(ms, port, {});
  // Subscribed, and no configuration yet: nothing listens.
  CHECK(ms.request(1, "")[node_id] == "binary-node");
  CHECK_FALSE(accepts(port));
  const std::string n1 = ms.push("1", per_minute_3, 1);
  CHECK(ms.request(1, n1)[version] == "1");
  server.wait_line(listening_line);
  rls::RateLimitResponse res;
  REQUIRE(call(port, "k", res).ok());
  CHECK(res.statuses(0).current_limit().requests_per_unit() == 3);
  CHECK(res.statuses(0).limit_remaining() == 2);  // 3 - 1
  server.kill(SIGTERM);
  CHECK(WIFEXITED(server.exit_status()));
  CHECK(WEXITSTATUS(server.exit_status()) == 0);
}

TEST_CASE(
    "The binary with FORCE_START_WITHOUT_INITIAL_CONFIG: UNKNOWN until a configuration "
    "is in force",
    "[xds]") {
  ManagementServer ms;
  Child server = server_binary(ms, 0, {"FORCE_START_WITHOUT_INITIAL_CONFIG=true"});
  const Fields line = server.wait_line(listening_line);
  const auto at = line[0].find("127.0.0.1:");
  const int port = std::atoi(line[0].c_str() + at + 10);
  REQUIRE(port > 0);
  rls::RateLimitResponse before;
  const grpc::Status st = call(port, "k", before);
  CHECK(st.error_code() == grpc::StatusCode::UNKNOWN);
  CHECK(st.error_message() == "no rate limit configuration loaded");
  ms.request(1, "");
  const std::string n1 = ms.push("1", per_minute_3, 1);
  CHECK(ms.request(1, n1)[has_error] == "0");
  rls::RateLimitResponse res;
  REQUIRE(call(port, "k", res).ok());
  CHECK(res.statuses(0).current_limit().requests_per_unit() == 3);
  server.kill(SIGTERM);
  CHECK(WEXITSTATUS(server.exit_status()) == 0);
}

/// Envoy Gateway's statsd_exporter mapping in a file of the test's, for PROMETHEUS_MAPPER_YAML;
/// removed when the case ends.
struct MappingFile {
  MappingFile() { std::ofstream(path) << ratelimit_test::envoy_gateway_statsd_conf; }
  ~MappingFile() {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  }
  MappingFile(const MappingFile&) = delete;
  MappingFile& operator=(const MappingFile&) = delete;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("ratelimit-eg-statsd-" + std::to_string(::getpid()) + ".yaml"))
                               .string();
};

TEST_CASE("Envoy Gateway's rate limit deployment: its environment against the management server",
          "[xds]") {
  // The container environment of envoyproxy/gateway internal/infrastructure/kubernetes/
  // ratelimit/resource.go (commit 0f0e417dfc346b5ec562be552456981d02d20940,
  // expectedRateLimitContainerEnv) with Redis and Prometheus enabled; its /certs files (one
  // certificate for the gRPC port and the xDS client, ca.crt for both) are the test's, and the
  // management server's address is a loopback port instead of envoy-gateway:18001 (the name
  // resolves only where /etc/hosts maps it). TLS on both sides: to the management server with
  // the client certificate, and on the gRPC port, where the outside client presents none
  // (GRPC_SERVER_TLS_CA_CERT is a name the Go service does not read: no client certificate is
  // asked for).
  const std::string dir = certs();
  ManagementServer ms(0, "xds-server");
  const MappingFile mapping;
  std::vector<std::string> env{
      "RUNTIME_ROOT=/data",
      "RUNTIME_SUBDIRECTORY=ratelimit",
      "RUNTIME_IGNOREDOTFILES=true",
      "RUNTIME_WATCH_ROOT=false",
      "LOG_LEVEL=info",
      "USE_STATSD=false",
      "CONFIG_TYPE=GRPC_XDS_SOTW",
      "CONFIG_GRPC_XDS_SERVER_URL=" + ms.address(),
      "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
      "GRPC_SERVER_USE_TLS=true",
      "GRPC_SERVER_TLS_CERT=" + dir + "/peer.crt",
      "GRPC_SERVER_TLS_KEY=" + dir + "/peer.key",
      "GRPC_SERVER_TLS_CA_CERT=" + dir + "/ca.crt",
      "CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
      "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=" + dir + "/peer.crt",
      "CONFIG_GRPC_XDS_CLIENT_TLS_KEY=" + dir + "/peer.key",
      "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + dir + "/ca.crt",
      "FORCE_START_WITHOUT_INITIAL_CONFIG=true",
      "USE_PROMETHEUS=true",
      // Ours: loopback addresses (the deployment's are :19001, 8081 and 8080, and its mapping
      // file, mounted at /etc/statsd-exporter/conf.yaml, is written where the test can).
      "PROMETHEUS_ADDR=127.0.0.1:0",
      "PROMETHEUS_MAPPER_YAML=" + mapping.path,
      "DEBUG_HOST=127.0.0.1",
      "DEBUG_PORT=0",
      "GRPC_HOST=127.0.0.1",
      "GRPC_PORT=0",
      "HOST=127.0.0.1",
      "PORT=0",
  };
#ifdef RATELIMIT_SERVER_HAVE_REDIS
  const auto& redis = rltest::redis_endpoint();
  env.push_back("REDIS_SOCKET_TYPE=tcp");
  env.push_back("REDIS_URL=" + redis.host + ":" + std::to_string(redis.port));
#else
  env.push_back("RATELIMIT_SERVER_STORAGE=memory");
#endif
  Child server({RATELIMIT_SERVER_BINARY}, env, true);
  const Fields line = server.wait_line(listening_line);
  const int port = std::atoi(line[0].c_str() + line[0].find("127.0.0.1:") + 10);
  // Its subscription: node envoy-ratelimit, every RateLimitConfig.
  const Fields first = ms.request(1, "");
  CHECK(first[node_id] == "envoy-ratelimit");
  CHECK(first[type_url] == rs::rate_limit_config_type);
  // A domain of its own per run: the counters on Redis outlive the run within their window.
  std::random_device rd;
  const std::string domain = "eg-" + std::to_string(rd()) + std::to_string(rd());
  const std::string n1 = ms.push(
      "eg-1", R"([{"name": "default/eg/http", "domain": ")" + domain + R"(", "descriptors": [
                   {"key": "k", "rate_limit": {"unit": "HOUR", "requests_per_unit": 2}}]}])",
      1);
  CHECK(ms.request(1, n1)[has_error] == "0");
  // 2 an hour: hits 1 and 2 within (remaining 1, 0), hit 3 over.
  for (unsigned remaining : {1u, 0u}) {
    rls::RateLimitResponse res;
    REQUIRE(call(port, "k", res, domain, true).ok());
    CHECK(res.overall_code() == rls::RateLimitResponse::OK);
    CHECK(res.statuses(0).current_limit().requests_per_unit() == 2);
    CHECK(res.statuses(0).limit_remaining() == remaining);
  }
  rls::RateLimitResponse over;
  REQUIRE(call(port, "k", over, domain, true).ok());
  // The gRPC port speaks only TLS.
  rls::RateLimitResponse plain;
  CHECK(call(port, "k", plain, domain, false).error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(over.overall_code() == rls::RateLimitResponse::OVER_LIMIT);
  server.kill(SIGTERM);
  CHECK(WEXITSTATUS(server.exit_status()) == 0);
}
