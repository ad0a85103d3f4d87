// End to end: examples/http_gateway processes on loopback, real HTTP. Two gateways sharing one
// Redis (RATELIMIT_TEST_REDIS) enforce one limit between them: exactly the limit is admitted
// whichever instance serves each request. The same traffic on in-process storage shows each
// instance admitting its own limit (the problem the shared store solves). Needs the http_gateway
// binary (RATELIMIT_GATEWAY_EXE) and a Redis (see support/redis_backend.hpp).

#include <catch2/catch.hpp>

#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gateway_process.hpp"
#include "support/redis_backend.hpp"

namespace {

using rltest::Gateway;

// 30 requests per day per API key, as a token bucket: it refills one token per
// 86400 s / 30 = 2880 s, so during the few seconds of a test no capacity comes back and the
// expected counts are exact.
constexpr const char* rules_yaml = R"(domain: e2e
descriptors:
  - key: plan
    descriptors:
      - key: api_key
        rate_limit: {unit: day, requests_per_unit: 30, algorithm: token_bucket, name: e2e}
)";
constexpr int limit = 30;

std::string rules_file() {
  const std::string path = "gateway_e2e_rules.yaml";
  std::ofstream(path) << rules_yaml;
  return path;
}

struct Response {
  int status;
  httplib::Headers headers;
};

Response get(int port, const std::string& api_key) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(std::chrono::seconds{5});
  client.set_read_timeout(std::chrono::seconds{10});
  auto res = client.Get("/api/items", {{"X-API-Key", api_key}});
  REQUIRE(res);
  return {res->status, res->headers};
}

std::string header(const Response& r, const std::string& name) {
  const auto it = r.headers.find(name);
  return it == r.headers.end() ? std::string("(absent)") : it->second;
}

std::string unique_key(const char* tag) {
  return std::string(tag) + "-" + std::to_string(getpid()) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

}  // namespace

TEST_CASE("Two gateways sharing Redis admit exactly the limit between them, with sane headers",
          "[gateway][e2e][redis]") {
  const auto& redis = rltest::redis_endpoint();
  const std::string rules = rules_file();
  const std::string prefix = rltest::unique_prefix("e2e");
  const std::string redis_arg = redis.host + ":" + std::to_string(redis.port);
  const std::string key = unique_key("shared");
  const std::string keys = rltest::write_file("gateway_e2e_keys.txt", key + " free\n");
  Gateway a({"--port", "0", "--rules", rules, "--keys", keys, "--redis", redis_arg, "--key-prefix",
             prefix});
  Gateway b({"--port", "0", "--rules", rules, "--keys", keys, "--redis", redis_arg, "--key-prefix",
             prefix});
  constexpr int requests = 50;  // alternating a, b, a, b, ...
  std::vector<Response> responses;
  int ok = 0, limited = 0;
  for (int i = 0; i < requests; ++i) {
    responses.push_back(get(i % 2 == 0 ? a.port() : b.port(), key));
    (responses.back().status == 200 ? ok : limited)++;
  }
  CHECK(ok == limit);
  CHECK(limited == requests - limit);
  // The first `limit` are the admitted ones: no capacity comes back within the test.
  for (int i = 0; i < requests; ++i) CHECK(responses[i].status == (i < limit ? 200 : 429));

  // First request: a full bucket of 30 spends 1, remaining floor(29.x) = 29.
  const Response& first = responses.front();
  CHECK(header(first, "RateLimit-Policy") == "\"e2e\";q=30;w=86400");
  CHECK(header(first, "X-RateLimit-Limit") == "30");
  CHECK(header(first, "X-RateLimit-Remaining") == "29");
  CHECK(header(first, "Retry-After") == "(absent)");
  CHECK(header(responses[limit - 1], "X-RateLimit-Remaining") == "0");
  // A denial: less than one token left, so it must wait at most one token's refill, 2880 s,
  // and at least 1 s (rounded up); the bucket is full again within 30 * 2880 s = 86400 s.
  const Response& denied = responses.back();
  CHECK(header(denied, "X-RateLimit-Remaining") == "0");
  const int retry = std::stoi(header(denied, "Retry-After"));
  CHECK(retry >= 1);
  CHECK(retry <= 2880);
  CHECK(header(denied, "RateLimit") == "\"e2e\";r=0;t=" + std::to_string(retry));
  const int reset = std::stoi(header(denied, "X-RateLimit-Reset"));
  CHECK(reset >= retry);
  CHECK(reset <= 86400);

  CHECK(a.stop() == 0);  // SIGTERM: a clean shutdown
  CHECK(b.stop() == 0);
}

TEST_CASE("Two gateways on in-process storage each admit their own limit", "[gateway][e2e]") {
  const std::string rules = rules_file();
  const std::string key = unique_key("local");
  const std::string keys = rltest::write_file("gateway_e2e_local_keys.txt", key + " free\n");
  Gateway a({"--port", "0", "--rules", rules, "--keys", keys});
  Gateway b({"--port", "0", "--rules", rules, "--keys", keys});
  constexpr int requests = 80;  // 40 to each instance
  int ok_a = 0, ok_b = 0, limited = 0;
  for (int i = 0; i < requests; ++i) {
    const bool to_a = i % 2 == 0;
    const Response r = get(to_a ? a.port() : b.port(), key);
    if (r.status == 200)
      ++(to_a ? ok_a : ok_b);
    else
      ++limited;
  }
  // Each instance has its own bucket of 30: together they admit twice the limit.
  CHECK(ok_a == limit);
  CHECK(ok_b == limit);
  CHECK(limited == requests - 2 * limit);
  CHECK(a.stop() == 0);
  CHECK(b.stop() == 0);
}

namespace gateway_shed_e2e {

/// Status of GET /api/hello with `X-Priority: priority` (no header when empty).
int get_with_priority(int port, const std::string& priority) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(std::chrono::seconds{5});
  client.set_read_timeout(std::chrono::seconds{10});
  httplib::Headers h;
  if (!priority.empty()) h.emplace("X-Priority", priority);
  auto res = client.Get("/api/hello", h);
  REQUIRE(res);
  return res->status;
}

/// How many of `n` requests of `priority` got 200.
int admitted_of(int port, const std::string& priority, int n) {
  int ok = 0;
  for (int i = 0; i < n; ++i) ok += get_with_priority(port, priority) == 200 ? 1 : 0;
  return ok;
}

}  // namespace gateway_shed_e2e

TEST_CASE("The gateway sheds by X-Priority, lowest first, as the reserves say", "[gateway][e2e]") {
  using gateway_shed_e2e::admitted_of;
  // A bucket of 10 refilled at 1 per hour: nothing comes back during the test. Reserves:
  // normal ceil(10 x 0.1) = 1, sheddable ceil(10 x 0.4) = 4 tokens. Rules off (--no-limit).
  Gateway g({"--port", "0", "--no-limit", "--shed-capacity", "10", "--shed-rate", "1/h",
             "--shed-reserves", "0.1,0.4"});
  // Sheddable while 4 are left after it: 10 - 4 = 6 of 10.
  CHECK(admitted_of(g.port(), "sheddable", 10) == 6);
  // No header is normal: while 1 is left after it: 9 - 6 = 3 more.
  CHECK(admitted_of(g.port(), "", 5) == 3);
  CHECK(admitted_of(g.port(), "normal", 5) == 0);
  // Critical takes the last token, then is denied too.
  CHECK(admitted_of(g.port(), "critical", 5) == 1);
  // An unknown priority is a bad request, not a guess.
  CHECK(gateway_shed_e2e::get_with_priority(g.port(), "urgent") == 400);
  CHECK(g.stop() == 0);
}

TEST_CASE("Two gateways sharing Redis shed from one bucket by X-Priority",
          "[gateway][e2e][redis]") {
  using gateway_shed_e2e::get_with_priority;
  const auto& redis = rltest::redis_endpoint();
  const std::string prefix = rltest::unique_prefix("e2e-shed");
  const std::string redis_arg = redis.host + ":" + std::to_string(redis.port);
  const std::vector<std::string> args{
      "--port", "0",       "--no-limit", "--shed-capacity", "10",  "--shed-rate",
      "1/h",    "--redis", redis_arg,    "--key-prefix",    prefix};
  Gateway a(args), b(args);
  // One bucket of 10 between them (reserves 0.1 and 0.4 by default): alternating instances,
  // 6 sheddable, then 3 normal, then 1 critical, exactly as from one instance.
  int sheddable = 0, normal = 0, critical = 0;
  for (int i = 0; i < 10; ++i)
    sheddable += get_with_priority(i % 2 == 0 ? a.port() : b.port(), "sheddable") == 200;
  for (int i = 0; i < 6; ++i)
    normal += get_with_priority(i % 2 == 0 ? a.port() : b.port(), "normal") == 200;
  for (int i = 0; i < 4; ++i)
    critical += get_with_priority(i % 2 == 0 ? a.port() : b.port(), "critical") == 200;
  CHECK(sheddable == 6);
  CHECK(normal == 3);
  CHECK(critical == 1);
  CHECK(a.stop() == 0);
  CHECK(b.stop() == 0);
}
