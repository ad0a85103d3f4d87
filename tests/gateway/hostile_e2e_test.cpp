// The gateway against hostile clients, end to end: the first version of examples/http_gateway
// trusted any API key. A client limited by IP sent a made-up X-API-Key per request and was never
// limited (300 of 300 admitted; 50 of 50 logins with 50 made-up keys); a key starting "pro_" got
// the pro plan; and cpp-httplib cut header values at NUL, so "a\0x" and "a" shared a counter. Here
// real gateway processes on loopback, with the shipped rules.yaml and keys.txt
// (RATELIMIT_GATEWAY_DIR) unless a test says otherwise, refuse each of these. Every request comes
// from 127.0.0.1, so each test starts its own gateway (per-IP counters start empty).

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "gateway_process.hpp"

namespace {

using rltest::Gateway;

const std::string dir = RATELIMIT_GATEWAY_DIR;

Gateway shipped_gateway() {
  return Gateway({"--port", "0", "--rules", dir + "/rules.yaml", "--keys", dir + "/keys.txt"});
}

struct Reply {
  int status;
  httplib::Headers headers;
};

Reply send(int port, const std::string& method, const std::string& path,
           const httplib::Headers& headers) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(std::chrono::seconds{5});
  client.set_read_timeout(std::chrono::seconds{10});
  auto res = method == "POST" ? client.Post(path.c_str(), headers, "{}", "application/json")
                              : client.Get(path.c_str(), headers);
  REQUIRE(res);
  return {res->status, res->headers};
}

/// How many replies had each status.
std::map<int, int> tally(const std::vector<Reply>& replies) {
  std::map<int, int> out;
  for (const Reply& r : replies) ++out[r.status];
  return out;
}

/// The raw status line of a hand-written request (httplib's client would not send a NUL).
std::string raw_status_line(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
  std::string reply;
  char buf[512];
  for (ssize_t n; reply.find("\r\n") == std::string::npos && (n = read(fd, buf, sizeof buf)) > 0;)
    reply.append(buf, static_cast<std::size_t>(n));
  close(fd);
  return reply.substr(0, reply.find("\r\n"));
}

}  // namespace

TEST_CASE("A made-up API key per request buys nothing: 401 while the IP's anonymous limit lasts",
          "[gateway][e2e][hostile][regression]") {
  // First version: 300 of 300 admitted. Now each made-up key is anonymous, limited by IP
  // (anonymous: 20 per minute), and refused with 401 when the limit admits it: 20 x 401, then
  // 280 x 429, none 200.
  Gateway gw = shipped_gateway();
  std::vector<Reply> replies;
  for (int i = 0; i < 300; ++i)
    replies.push_back(
        send(gw.port(), "GET", "/api/items", {{"X-API-Key", "made-up-" + std::to_string(i)}}));
  const auto counts = tally(replies);
  CHECK(counts.count(200) == 0);
  CHECK(counts.at(401) == 20);
  CHECK(counts.at(429) == 280);
  CHECK(gw.stop() == 0);
}

TEST_CASE("Logins with 50 made-up keys never succeed and are capped per IP",
          "[gateway][e2e][hostile][regression]") {
  // First version: 50 of 50 logins admitted. Now: login-per-ip allows 10 attempts a minute from
  // one IP whatever the key (and anonymous 20), so 10 x 401 and 40 x 429.
  Gateway gw = shipped_gateway();
  std::vector<Reply> replies;
  for (int i = 0; i < 50; ++i)
    replies.push_back(
        send(gw.port(), "POST", "/login", {{"X-API-Key", "guess-" + std::to_string(i)}}));
  const auto counts = tally(replies);
  CHECK(counts.count(200) == 0);
  CHECK(counts.at(401) == 10);
  CHECK(counts.at(429) == 40);
  CHECK(gw.stop() == 0);
}

TEST_CASE("A key starting pro_ gets the pro plan only if the key file says so",
          "[gateway][e2e][hostile][regression]") {
  Gateway gw = shipped_gateway();
  CHECK(send(gw.port(), "GET", "/api/items", {{"X-API-Key", "pro_anything"}}).status == 401);
  // keys.txt issues demo-pro-key on the pro plan: its policies name "pro" (1000 per minute) and
  // the per-IP ceiling; demo-free-key gets "free" (100 per minute).
  const Reply pro = send(gw.port(), "GET", "/api/items", {{"X-API-Key", "demo-pro-key"}});
  CHECK(pro.status == 200);
  CHECK(pro.headers.find("RateLimit-Policy")->second.find("\"pro\";q=1000") != std::string::npos);
  const Reply free = send(gw.port(), "GET", "/api/items", {{"X-API-Key", "demo-free-key"}});
  CHECK(free.status == 200);
  CHECK(free.headers.find("RateLimit-Policy")->second.find("\"free\";q=100") != std::string::npos);
  CHECK(gw.stop() == 0);
}

TEST_CASE("A NUL or another control character in a header is refused with 400",
          "[gateway][e2e][hostile][regression]") {
  // First version: "a\0x" was cut to "a", sharing a's counter. Now 400 before any limit.
  Gateway gw = shipped_gateway();
  using namespace std::string_literals;
  const std::string nul_in_key =
      "GET /api/items HTTP/1.1\r\nHost: x\r\nX-API-Key: demo-free-key\0x\r\nConnection: close\r\n\r\n"s;
  CHECK(raw_status_line(gw.port(), nul_in_key) == "HTTP/1.1 400 Bad Request");
  const std::string nul_elsewhere =
      "GET /api/items HTTP/1.1\r\nHost: x\r\nX-Note: a\0b\r\nConnection: close\r\n\r\n"s;
  CHECK(raw_status_line(gw.port(), nul_elsewhere) == "HTTP/1.1 400 Bad Request");
  // The same key without the NUL is fine.
  const std::string clean =
      "GET /api/items HTTP/1.1\r\nHost: x\r\nX-API-Key: demo-free-key\r\nConnection: close\r\n\r\n";
  CHECK(raw_status_line(gw.port(), clean) == "HTTP/1.1 200 OK");
  CHECK(gw.stop() == 0);
}

TEST_CASE("Every request counts against its IP, whichever issued keys it shows",
          "[gateway][e2e][hostile]") {
  // A rules file with a small per-IP ceiling (30 per day, a token bucket: no capacity comes
  // back during the test) and a large per-key limit: two issued keys from one IP, 20 requests
  // each, alternating, get 30 admitted between them (the first 30), then 429.
  const std::string rules = rltest::write_file("gateway_hostile_rules.yaml", R"(domain: hostile
descriptors:
  - key: remote_address
    rate_limit: {unit: day, requests_per_unit: 30, algorithm: token_bucket, name: per-ip}
  - key: plan
    descriptors:
      - key: api_key
        rate_limit: {unit: day, requests_per_unit: 1000, algorithm: token_bucket, name: plan}
)");
  const std::string keys =
      rltest::write_file("gateway_hostile_keys.txt", "key-a free\nkey-b free\n");
  Gateway gw({"--port", "0", "--rules", rules, "--keys", keys});
  int ok = 0;
  for (int i = 0; i < 40; ++i) {
    const Reply r =
        send(gw.port(), "GET", "/api/items", {{"X-API-Key", i % 2 ? "key-b" : "key-a"}});
    CHECK(r.status == (i < 30 ? 200 : 429));
    ok += r.status == 200;
  }
  CHECK(ok == 30);
  CHECK(gw.stop() == 0);
}

TEST_CASE("A bad key file stops the gateway with its line", "[gateway][e2e][hostile]") {
  const std::string keys = rltest::write_file("gateway_bad_keys.txt", "# ok\nkey-a free\nkey-b\n");
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    dup2(null, STDERR_FILENO);
    dup2(null, STDOUT_FILENO);
    execl(RATELIMIT_GATEWAY_EXE, RATELIMIT_GATEWAY_EXE, "--port", "0", "--rules",
          (dir + "/rules.yaml").c_str(), "--keys", keys.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  // Exit 2: a configuration error (the message names gateway_bad_keys.txt:3).
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
}
