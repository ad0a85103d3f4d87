// The forward-auth check behind real gateways: NGINX, Caddy and HAProxy (Debian's packages),
// each run from its binary with its own prefix and the configuration shipped in docs/gateways/
// (byte for byte: only the addresses come from the files or environment the configuration
// names), in front of a real upstream (an HTTP server in this process) and ratelimit_server
// (the executable), with the counters in process and on Redis. And the HTTP front holding
// 1,000 keep-alive connections on its fixed pool of threads.
//
// The gateways are found on PATH, /usr/sbin and /usr/bin; a missing one FAILS the test (Debian:
// `bash scripts/deps.sh test`); a developer may opt out with RATELIMIT_TEST_GATEWAYS_OPTOUT=1
// (exit 77, skipped), except under CI=true.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include <catch2/catch.hpp>

#ifdef RATELIMIT_SERVER_HAVE_REDIS
#include "support/redis_backend.hpp"
#endif

extern char** environ;

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const fs::path docs = fs::path(RATELIMIT_SOURCE_DIR) / "docs" / "gateways";

bool env_is(const char* name, std::string_view value) {
  const char* v = std::getenv(name);
  return v != nullptr && value == v;
}

/// The path of a gateway's binary; fails (or exits 77 when opted out outside CI) without it.
std::string find_binary(const std::string& name) {
  std::vector<fs::path> dirs = {"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"};
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    for (std::size_t start = 0; start <= p.size();) {
      const std::size_t colon = p.find(':', start);
      dirs.emplace_back(p.substr(start, colon - start));
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }
  for (const fs::path& d : dirs)
    if (::access((d / name).c_str(), X_OK) == 0) return (d / name).string();
  if (!env_is("CI", "true") && env_is("RATELIMIT_TEST_GATEWAYS_OPTOUT", "1")) {
    std::cerr << "SKIPPED (RATELIMIT_TEST_GATEWAYS_OPTOUT=1): no " << name << "\n";
    std::exit(77);
  }
  FAIL("no " << name
             << " binary: install the test group (bash scripts/deps.sh test), or opt "
                "out with RATELIMIT_TEST_GATEWAYS_OPTOUT=1 (not under CI=true)");
  return {};
}

/// A fresh directory, removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("ratelimit-gw-" + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// A free loopback port for a gateway, which must be told its port: bound then released, and
/// taken outside Linux's ephemeral range (32768 and up by default), so that no other process's
/// outgoing connection or port-0 listener picks it up between our release and the gateway's
/// bind (other tests run beside this one).
int free_port() {
  static std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int> pick(20000, 32000);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = pick(rng);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (ok) return port;
  }
  FAIL("no free port between 20000 and 32000");
  return 0;
}

/// A connected socket from `source` (a loopback address) to 127.0.0.1:port, or -1.
int connect_from(const std::string& source, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  ::inet_pton(AF_INET, source.c_str(), &src.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
    ::close(fd);
    return -1;
  }
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(static_cast<uint16_t>(port));
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// Waits (generously: the sanitizer builds are slow) until 127.0.0.1:port accepts.
void wait_listening(int port, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    const int fd = connect_from("127.0.0.1", port);
    if (fd >= 0) {
      ::close(fd);
      return;
    }
    std::this_thread::sleep_for(20ms);  // polling a condition, not timing anything
  }
  FAIL(what << " does not listen on port " << port);
}

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  const std::string& header(const std::string& n) const {
    static const std::string none;
    const auto it = headers.find(n);
    return it == headers.end() ? none : it->second;
  }
};

Response parse_response(const std::string& raw) {
  Response r;
  const std::size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) return r;
  std::size_t pos = raw.find("\r\n");
  const std::string status_line = raw.substr(0, pos);
  if (status_line.size() > 12) r.status = std::atoi(status_line.c_str() + 9);
  while (pos < head_end) {
    const std::size_t next = raw.find("\r\n", pos + 2);
    const std::string line = raw.substr(pos + 2, next - pos - 2);
    const std::size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::size_t v = colon + 1;
      while (v < line.size() && line[v] == ' ') ++v;
      r.headers[name] = line.substr(v);
    }
    pos = next;
  }
  r.body = raw.substr(head_end + 4);
  return r;
}

/// One GET through a gateway from the loopback address `source`, with extra header lines.
Response get(const std::string& source, int port, const std::string& path,
             const std::string& extra_headers = "") {
  const int fd = connect_from(source, port);
  REQUIRE(fd >= 0);
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: shop.example\r\n" +
                              extra_headers + "Connection: close\r\n\r\n";
  REQUIRE(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size()));
  std::string raw;
  char buf[4096];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return parse_response(raw);
}

/// A child process with its output in a log file; stopped (SIGTERM, then waited for) at the
/// end.
class Process {
 public:
  Process(std::vector<std::string> argv, std::map<std::string, std::string> env_add,
          const fs::path& log, const fs::path& cwd = {})
      : log_(log) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv(*e);
      if (env_add.count(kv.substr(0, kv.find('='))) == 0) env.push_back(kv);
    }
    for (const auto& [k, v] : env_add) env.push_back(k + "=" + v);
    std::vector<char*> envp, args;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    for (auto& s : argv) args.push_back(s.data());
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
    const int rc = ::posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE(rc == 0);
  }
  ~Process() { stop(); }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  /// Whether it has not exited yet.
  bool running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == 0) return true;
    pid_ = 0;
    return false;
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
  }
  std::string log() const { return read(log_); }

 private:
  fs::path log_;
  pid_t pid_ = 0;
};

/// The upstream application: answers every GET with a body the test recognises.
struct App {
  httplib::Server server;
  std::thread thread;
  int port = 0;
  App() {
    server.Get(".*", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("hello from the application\n", "text/plain");
    });
    port = server.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { server.listen_after_bind(); });
    wait_listening(port, "the application");
  }
  ~App() {
    server.stop();
    thread.join();
  }
};

/// Three admissions per client address, then denials: a token bucket of 3 per day refills one
/// token every 86400 / 3 = 28800 s, so no token comes back while the test runs (a fixed window
/// could roll over mid-test and admit more).
constexpr const char* rules_yaml = R"(domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: day, requests_per_unit: 3, algorithm: token_bucket}
)";
constexpr const char* actions_yaml = R"(domains:
  - domain: edge
    rate_limits:
      - actions:
          - remote_address: {}
)";

/// ratelimit_server (the executable) on free ports, the counters on `redis` when given.
struct Limiter {
  int port = 0;
  std::unique_ptr<Process> process;
  Limiter(const TempDir& dir, const std::string& name, const std::string& redis,
          std::map<std::string, std::string> extra = {}) {
    write(dir.path / name / "config" / "edge.yaml", rules_yaml);
    write(dir.path / (name + "-actions.yaml"), actions_yaml);
    std::map<std::string, std::string> env = {
        {"RUNTIME_ROOT", (dir.path / name).string()},
        {"HOST", "127.0.0.1"},
        {"PORT", "0"},
        {"GRPC_HOST", "127.0.0.1"},
        {"GRPC_PORT", "0"},
        {"RATELIMIT_SERVER_CHECK_ACTIONS", (dir.path / (name + "-actions.yaml")).string()},
        // The gateways reach the check from 127.0.0.1; the clients come from other loopback
        // addresses (127.x.y.z), so a client is never taken for the proxy.
        {"RATELIMIT_SERVER_TRUSTED_PROXIES", "127.0.0.1"}};
    if (redis.empty()) {
      env["RATELIMIT_SERVER_STORAGE"] = "memory";
    } else {
      env["REDIS_URL"] = redis;
      env["REDIS_SOCKET_TYPE"] = "tcp";
    }
    for (auto& [k, v] : extra) env[k] = v;
    process = std::make_unique<Process>(std::vector<std::string>{RATELIMIT_SERVER_BINARY}, env,
                                        dir.path / (name + ".log"));
    // PORT=0: the server takes a free port and names it on its first line ("... HTTP on
    // 127.0.0.1:N, ..."), so no other process can take it first.
    const std::string marker = "HTTP on 127.0.0.1:";
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (port == 0 && std::chrono::steady_clock::now() < deadline) {
      const std::string log = process->log();
      if (const auto at = log.find(marker); at != std::string::npos)
        port = std::atoi(log.c_str() + at + marker.size());
      else if (!process->running())
        FAIL("ratelimit_server (" << name << ") exited: " << log);
      else
        std::this_thread::sleep_for(20ms);  // polling a condition, not timing anything
    }
    REQUIRE(port > 0);
  }
};

struct Gateway {
  std::string name;
  int port = free_port();
  std::unique_ptr<Process> process;
};

/// NGINX with docs/gateways/nginx/ratelimit.conf included in a minimal nginx.conf of its own
/// prefix; the addresses in the ratelimit/*.addr files the shipped configuration includes.
Gateway start_nginx(const TempDir& dir, int check_port, int app_port) {
  Gateway g;
  g.name = "nginx";
  const fs::path prefix = dir.path / ("nginx-" + std::to_string(g.port));
  write(prefix / "ratelimit" / "check.addr",
        "server 127.0.0.1:" + std::to_string(check_port) + ";\n");
  write(prefix / "ratelimit" / "app.addr", "server 127.0.0.1:" + std::to_string(app_port) + ";\n");
  write(prefix / "ratelimit" / "listen.addr", "listen 127.0.0.1:" + std::to_string(g.port) + ";\n");
  fs::create_directories(prefix / "tmp");
  const std::string p = prefix.string();
  // `user root`: when the test runs as root, the workers read the prefix as root (NGINX warns
  // and ignores it otherwise).
  write(prefix / "nginx.conf",
        "daemon off;\nuser root;\nworker_processes 1;\npid " + p + "/nginx.pid;\n" +
            "error_log stderr;\nevents { worker_connections 1024; }\nhttp {\n" +
            "  access_log off;\n  client_body_temp_path " + p + "/tmp/body;\n" +
            "  proxy_temp_path " + p + "/tmp/proxy;\n  fastcgi_temp_path " + p +
            "/tmp/fastcgi;\n  uwsgi_temp_path " + p + "/tmp/uwsgi;\n  scgi_temp_path " + p +
            "/tmp/scgi;\n  include " + (docs / "nginx" / "ratelimit.conf").string() + ";\n}\n");
  g.process =
      std::make_unique<Process>(std::vector<std::string>{find_binary("nginx"), "-p", p, "-c",
                                                         p + "/nginx.conf", "-e", "stderr"},
                                std::map<std::string, std::string>{}, prefix / "nginx.log");
  wait_listening(g.port, "nginx");
  REQUIRE(g.process->running());
  return g;
}

/// Caddy on docs/gateways/caddy/Caddyfile; the addresses in its environment variables.
Gateway start_caddy(const TempDir& dir, int check_port, int app_port) {
  Gateway g;
  g.name = "caddy";
  const fs::path home = dir.path / ("caddy-" + std::to_string(g.port));
  fs::create_directories(home);
  g.process = std::make_unique<Process>(
      std::vector<std::string>{find_binary("caddy"), "run", "--config",
                               (docs / "caddy" / "Caddyfile").string(), "--adapter", "caddyfile"},
      std::map<std::string, std::string>{
          {"HOME", home.string()},
          {"XDG_DATA_HOME", home.string()},
          {"XDG_CONFIG_HOME", home.string()},
          {"GATEWAY_BIND", "127.0.0.1"},
          {"GATEWAY_PORT", std::to_string(g.port)},
          {"RATELIMIT_CHECK_ADDRESS", "127.0.0.1:" + std::to_string(check_port)},
          {"APP_ADDRESS", "127.0.0.1:" + std::to_string(app_port)}},
      home / "caddy.log");
  wait_listening(g.port, "caddy");
  REQUIRE(g.process->running());
  return g;
}

/// HAProxy on docs/gateways/haproxy/haproxy.cfg (run from its folder, which holds the Lua); the
/// addresses in its environment variables.
Gateway start_haproxy(const TempDir& dir, int check_port, int app_port) {
  Gateway g;
  g.name = "haproxy";
  g.process = std::make_unique<Process>(
      std::vector<std::string>{find_binary("haproxy"), "-db", "-f", "haproxy.cfg"},
      std::map<std::string, std::string>{
          {"GATEWAY_ADDRESS", "127.0.0.1:" + std::to_string(g.port)},
          {"RATELIMIT_CHECK_ADDRESS", "127.0.0.1:" + std::to_string(check_port)},
          {"APP_ADDRESS", "127.0.0.1:" + std::to_string(app_port)}},
      dir.path / ("haproxy-" + std::to_string(g.port) + ".log"), docs / "haproxy");
  wait_listening(g.port, "haproxy");
  REQUIRE(g.process->running());
  return g;
}

/// A loopback address no other scenario of this process (or a recent run on the same Redis)
/// uses: 127.A.B.C with random A, B, C, never 127.0.0.1 (the trusted gateways' address).
std::string fresh_client() {
  static std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int> octet(2, 254);
  return "127." + std::to_string(octet(rng)) + "." + std::to_string(octet(rng)) + "." +
         std::to_string(octet(rng));
}

/// The limit of rules_yaml: 3 requests per day.
constexpr int limit = 3;

/// Sends limit + 2 requests from one client through `gateways` in turn (each request with a
/// different forged X-Forwarded-For), and checks: exactly `limit` admissions, by the
/// application, each with the remaining count falling 2, 1, 0; then 429 with Retry-After and
/// the RateLimit headers.
void expect_limit(const std::vector<const Gateway*>& gateways) {
  const std::string client = fresh_client();
  INFO("client " << client);
  for (int i = 0; i < limit + 2; ++i) {
    const Gateway& g = *gateways[static_cast<std::size_t>(i) % gateways.size()];
    INFO("request " << i + 1 << " through " << g.name);
    // A client that claims another address each time: the key must stay its own.
    const Response r = get(client, g.port, "/shop/items?page=" + std::to_string(i),
                           "X-Forwarded-For: 203.0.113." + std::to_string(i + 1) + "\r\n");
    // The policy: q = 3 requests, w = the day's 86400 s; the policy is named after the
    // descriptor the check built from the client's own address.
    CHECK(r.header("ratelimit-policy") == "\"edge.remote_address_" + client + "\";q=3;w=86400");
    CHECK(r.header("x-ratelimit-limit") == "3");
    if (i < limit) {
      CHECK(r.status == 200);
      CHECK_THAT(r.body, Catch::Contains("hello from the application"));
      // Request i + 1 leaves 3 - (i + 1) tokens.
      CHECK(r.header("x-ratelimit-remaining") == std::to_string(limit - (i + 1)));
      CHECK(r.header("retry-after").empty());
    } else {
      CHECK(r.status == 429);
      CHECK(r.header("x-ratelimit-remaining") == "0");
      // The next token comes 86400 / 3 = 28800 s after the first was spent, less the
      // seconds the test has run: between 1 and 28800 s.
      const int retry = std::atoi(r.header("retry-after").c_str());
      CHECK(retry >= 1);
      CHECK(retry <= 28800);
      CHECK(r.header("ratelimit") ==
            "\"edge.remote_address_" + client + "\";r=0;t=" + r.header("retry-after"));
    }
  }
}

/// The limiter stopped: each gateway's documented failure behaviour (docs/gateways/*).
void expect_failure_behaviour(const Gateway& g) {
  INFO(g.name << " with the limiter stopped");
  const Response r = get(fresh_client(), g.port, "/shop/items");
  if (g.name == "nginx") {  // fails open: the application answers
    CHECK(r.status == 200);
    CHECK_THAT(r.body, Catch::Contains("hello from the application"));
  } else if (g.name == "caddy") {  // fails closed: forward_auth's 502
    CHECK(r.status == 502);
  } else {  // haproxy fails closed: core.httpclient's 503 turned into the configured 503
    CHECK(r.status == 503);
    CHECK(r.body == "Rate limiter unavailable");
  }
}

void run_gateways(const std::string& redis) {
  TempDir dir;
  App app;
  Limiter a(dir, "a", redis);
  std::optional<Limiter> b;  // a second server on the same Redis, behind Caddy
  if (!redis.empty()) b.emplace(dir, "b", redis);
  const int caddy_check = b ? b->port : a.port;
  Gateway nginx = start_nginx(dir, a.port, app.port);
  Gateway caddy = start_caddy(dir, caddy_check, app.port);
  Gateway haproxy = start_haproxy(dir, a.port, app.port);
  // Each gateway: exactly the limit's admissions, then 429; a forged X-Forwarded-For does
  // not change the key (each request of expect_limit forges another).
  for (const Gateway* g : {&nginx, &caddy, &haproxy}) expect_limit({g});
  // NGINX and Caddy, on two servers sharing one Redis, share one limit.
  if (b) expect_limit({&nginx, &caddy});
  // The limiter stopped: each gateway's documented failure behaviour.
  a.process->stop();
  if (b) b->process->stop();
  for (const Gateway* g : {&nginx, &caddy, &haproxy}) expect_failure_behaviour(*g);
}

}  // namespace

TEST_CASE(
    "Gateways: NGINX, Caddy and HAProxy with the shipped configurations, counters in "
    "process",
    "[gateways]") {
  run_gateways("");
}

#ifdef RATELIMIT_SERVER_HAVE_REDIS
TEST_CASE(
    "Gateways: NGINX, Caddy and HAProxy with the shipped configurations, counters on "
    "Redis; two servers on one Redis share one limit",
    "[gateways]") {
  const auto& e = rltest::redis_endpoint();
  run_gateways(e.host + ":" + std::to_string(e.port));
}
#endif

TEST_CASE(
    "The HTTP front answers 1,000 concurrent keep-alive connections on its fixed pool "
    "of threads",
    "[gateways]") {
  // Each connection needs a descriptor on both sides: raise the soft limit to the hard one
  // (the server inherits it).
  rlimit nofile{};
  ::getrlimit(RLIMIT_NOFILE, &nofile);
  nofile.rlim_cur = nofile.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &nofile);
  constexpr int connections = 1000;
  REQUIRE(nofile.rlim_cur >= 2 * connections + 64);

  TempDir dir;
  // DEBUG_PORT=0: the debug listener on a free port, so that it always opens (6070 may be
  // taken by another test's server).
  Limiter server(
      dir, "front", "",
      {{"RATELIMIT_SERVER_HTTP_THREADS", "4"}, {"DEBUG_PORT", "0"}, {"DEBUG_HOST", "127.0.0.1"}});
  // The server's threads (/proc/PID/task), and those of the HTTP fronts among them
  // (libmicrohttpd names its pool's threads "MHD-worker"). gRPC's own pools grow and shrink by
  // themselves, so the total is only bounded; PORT's front must be exactly its pool of 4
  // (RATELIMIT_SERVER_HTTP_THREADS). The debug listener (DEBUG_PORT, on as in Go) runs one
  // thread of its own, which libmicrohttpd names otherwise ("MHD-single"): not counted here.
  constexpr long front_threads = 4;
  const fs::path tasks = "/proc/" + std::to_string(server.process->pid()) + "/task";
  struct Count {
    long all = 0, front = 0;
  };
  const auto threads = [&] {
    Count c;
    for (const auto& t : fs::directory_iterator(tasks)) {
      ++c.all;
      if (read(t.path() / "comm").rfind("MHD-worker", 0) == 0) ++c.front;
    }
    return c;
  };
  // Warm up with one check, so every lazily started thread is there before counting.
  REQUIRE(get("127.0.0.1", server.port, "/check/edge",
              "X-Forwarded-Method: GET\r\nX-Forwarded-Uri: /\r\n")
              .status == 200);
  // The pool's threads name themselves when they first run, which on a loaded machine may
  // come after the first answer: wait for the 4 names (front_threads).
  const auto named = std::chrono::steady_clock::now() + 30s;
  while (threads().front < front_threads && std::chrono::steady_clock::now() < named)
    std::this_thread::sleep_for(20ms);  // polling a condition, not timing anything
  REQUIRE(threads().front == front_threads);

  std::vector<int> fds;
  for (int i = 0; i < connections; ++i) {
    const int fd = connect_from("127.0.0.1", server.port);
    REQUIRE(fd >= 0);
    fds.push_back(fd);
  }
  // One check per connection, each for another client (the server trusts 127.0.0.1, so
  // X-Forwarded-For names the client): the first of each client's 3 a day, so all admitted.
  for (int i = 0; i < connections; ++i) {
    const std::string request =
        "GET /check/edge HTTP/1.1\r\nHost: ratelimit\r\nX-Forwarded-Method: GET\r\n"
        "X-Forwarded-Uri: /items\r\nX-Forwarded-For: 10.0." +
        std::to_string(i / 250) + "." + std::to_string(i % 250) + "\r\n\r\n";
    REQUIRE(::send(fds[static_cast<std::size_t>(i)], request.data(), request.size(),
                   MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()));
  }
  std::vector<std::string> answers(connections);
  // How a connection that gave no answer ended (closed, reset, ...), for the failure message.
  std::vector<std::string> ends(connections);
  std::vector<bool> done(connections, false);
  int remaining = connections;
  Count most = threads();
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (remaining > 0 && std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> pfds;
    std::vector<int> index;
    for (int i = 0; i < connections; ++i)
      if (!done[static_cast<std::size_t>(i)]) {
        pfds.push_back({fds[static_cast<std::size_t>(i)], POLLIN, 0});
        index.push_back(i);
      }
    ::poll(pfds.data(), pfds.size(), 1000);
    for (std::size_t k = 0; k < pfds.size(); ++k) {
      if ((pfds[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const auto i = static_cast<std::size_t>(index[k]);
      char buf[4096];
      const ssize_t n = ::recv(pfds[k].fd, buf, sizeof buf, 0);
      if (n > 0) answers[i].append(buf, static_cast<std::size_t>(n));
      if (n == 0) ends[i] = "closed by the server";
      if (n < 0) ends[i] = std::string("recv: ") + std::strerror(errno);
      // An answer is complete once its body ("OK\n", 3 bytes) follows the head.
      const std::size_t head = answers[i].find("\r\n\r\n");
      if (n <= 0 || (head != std::string::npos && answers[i].size() >= head + 4 + 3)) {
        done[i] = true;
        --remaining;
      }
    }
    const Count now = threads();
    most.all = std::max(most.all, now.all);
    most.front = std::max(most.front, now.front);
  }
  // Every connection is still open (keep-alive) here, all answered.
  const Count during = threads();
  int ok = 0;
  std::map<std::string, int> others;  // what the others began with, for the failure message
  for (std::size_t i = 0; i < answers.size(); ++i) {
    const std::string& a = answers[i];
    if (a.rfind("HTTP/1.1 200", 0) == 0)
      ++ok;
    else if (!a.empty())
      ++others["answered '" + a.substr(0, a.find("\r\n")) + "'"];
    else
      ++others["no answer: " + (done[i] ? ends[i] : "still open at the deadline")];
  }
  // INFO, not UNSCOPED_INFO: the message must reach every failing check below, not only the
  // next assertion (which may pass).
  std::string why;
  for (const auto& [what, n] : others) why += std::to_string(n) + " " + what + "\n";
  if (!others.empty()) why += "the server's log:\n" + server.process->log();
  INFO(why);
  CHECK(remaining == 0);
  CHECK(ok == connections);  // each client's first request of its 3 a day
  CHECK(during.front == front_threads);
  CHECK(most.front == front_threads);
  // Far from a thread per connection: gRPC's pools (a dozen threads at most here) and ours.
  CHECK(most.all < 64);
  for (int fd : fds) ::close(fd);
}

namespace {

/// Connections waiting in the accept queue of the IPv4 listener on loopback port `port` (the
/// receive-queue column of its LISTEN row in /proc/net/tcp), or -1 when there is no such row.
long accept_queue(int port) {
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);  // the column names
  char local[64], remote[64];
  unsigned state = 0;
  unsigned long tx = 0, rx = 0;
  while (std::getline(tcp, line)) {
    if (std::sscanf(line.c_str(), " %*d: %63s %63s %x %lx:%lx", local, remote, &state, &tx, &rx) !=
        5)
      continue;
    const char* colon = std::strchr(local, ':');
    // 0x0A: TCP_LISTEN (include/net/tcp_states.h).
    if (state == 0x0A && colon != nullptr && std::strtol(colon + 1, nullptr, 16) == port)
      return static_cast<long>(rx);
  }
  return -1;
}

}  // namespace

TEST_CASE("The HTTP front answers a burst of requests that reach its thread all at once",
          "[gateways]") {
  TempDir dir;
  // One thread, so that every connection is its; DEBUG_PORT=0 as above.
  Limiter server(
      dir, "burst", "",
      {{"RATELIMIT_SERVER_HTTP_THREADS", "1"}, {"DEBUG_PORT", "0"}, {"DEBUG_HOST", "127.0.0.1"}});
  // 128: the batch in which libmicrohttpd's epoll loop takes ready connections (MAX_EVENTS in
  // src/microhttpd/daemon.c); a burst of exactly one batch was left unread until the idle
  // timeout (120 s) closed it, when the front used that loop.
  constexpr int connections = 128;
  std::vector<int> fds;
  for (int i = 0; i < connections; ++i) {
    const int fd = connect_from("127.0.0.1", server.port);
    REQUIRE(fd >= 0);
    fds.push_back(fd);
  }
  // Every connection accepted (the listener's queue empty), so that the requests below find
  // them all in the front's event loop.
  const auto accepted = std::chrono::steady_clock::now() + 30s;
  while (accept_queue(server.port) != 0 && std::chrono::steady_clock::now() < accepted)
    std::this_thread::sleep_for(20ms);  // polling a condition, not timing anything
  REQUIRE(accept_queue(server.port) == 0);
  // The server stopped while the requests arrive, as a loaded machine may leave its thread
  // unscheduled: when it runs again, all 128 are ready at once.
  const pid_t pid = server.process->pid();
  struct Continue {
    pid_t pid;
    ~Continue() { ::kill(pid, SIGCONT); }
  } resume{pid};
  REQUIRE(::kill(pid, SIGSTOP) == 0);
  for (int i = 0; i < connections; ++i) {
    const std::string request =
        "GET /check/edge HTTP/1.1\r\nHost: ratelimit\r\nX-Forwarded-Method: GET\r\n"
        "X-Forwarded-Uri: /items\r\nX-Forwarded-For: 10.1.0." +
        std::to_string(i) + "\r\n\r\n";
    REQUIRE(::send(fds[static_cast<std::size_t>(i)], request.data(), request.size(),
                   MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()));
  }
  REQUIRE(::kill(pid, SIGCONT) == 0);
  // Each answer read in full ("OK\n", 3 bytes, after the head); the deadline is generous, and
  // below the idle timeout (120 s), after which a request left unread would end closed.
  int ok = 0;
  std::map<std::string, int> others;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (int fd : fds) {
    std::string answer;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 1000) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      answer.append(buf, static_cast<std::size_t>(n));
      const std::size_t head = answer.find("\r\n\r\n");
      if (head != std::string::npos && answer.size() >= head + 4 + 3) break;
    }
    if (answer.rfind("HTTP/1.1 200", 0) == 0)
      ++ok;
    else
      ++others[answer.empty() ? "no answer" : answer.substr(0, answer.find("\r\n"))];
  }
  std::string why;
  for (const auto& [what, n] : others) why += std::to_string(n) + " " + what + "\n";
  INFO(why);
  CHECK(ok == connections);  // each client's first request of its 3 a day
  for (int fd : fds) ::close(fd);
}
