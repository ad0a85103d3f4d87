// The Go window's counters under the Go service's own keys and operations (envoyproxy/ratelimit
// at f2fb157: src/limiter/cache_key.go, src/redis/fixed_cache_impl.go,
// src/memcached/cache_impl.go; its memcache client bradfitz/gomemcache at 24af94b,
// memcache/selector.go): a second writer does what a Go replica does (INCRBY + EXPIRE on Redis,
// incr / add / incr on memcached) and the server and that writer share every count both ways.
// Time is a ManualClock; expected numbers are derived in the comments.

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include <ratelimit/metrics/prometheus.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/rules.hpp>

#include "counters.hpp"
#if defined(RATELIMIT_SERVER_HAVE_REDIS)
#include <ratelimit/redis/detail/cluster_client.hpp>
#include "support/cluster_backend.hpp"
#include "support/redis_backend.hpp"
#endif
#include "rls.pb.h"
#include "rls_request.hpp"
#include "server_algorithms.hpp"
#include "service.hpp"
#include "settings.hpp"

// Named, since the test sources are built as one unity translation unit.
namespace gk {
namespace {

namespace pb = envoy::service::ratelimit::v3;
using Entries = std::vector<std::pair<std::string, std::string>>;
using Code = pb::RateLimitResponse;

// 2023-11-15T00:00:00Z: a whole number of days since the epoch (19676 * 86400 s), so every
// minute, hour and day window starts here.
constexpr std::int64_t day0_s = 19676LL * 86400;

/// A key prefix of its own for each case (CACHE_KEY_PREFIX), so that runs never share keys.
std::string fresh_prefix() {
  static int n = 0;
  return "gokeys" + std::to_string(::getpid()) + "." +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + "." +
         std::to_string(n++) + ":";
}

using Desc = rltest::RlsDescriptor;

/// A Service on `counters` at a ManualClock, called as the gRPC server calls it (the
/// non-blocking path, waited on).
struct Server {
  Server(std::shared_ptr<ratelimit::server::Counters> counters, const std::string& yaml,
         ratelimit::server::ServiceSettings settings = {}) {
    clock.set(std::chrono::seconds{day0_s});
    service = std::make_shared<ratelimit::server::Service>(std::move(counters), settings,
                                                           [c = clock] { return c.now(); });
    const ratelimit::RulesSource sources[] = {{"test.yaml", yaml}};
    service->reload(
        ratelimit::RulesConfig::from_strings<ratelimit::server::ServerAlgorithms>(sources));
  }

  pb::RateLimitResponse call(const std::string& domain, const std::vector<Desc>& descs) {
    pb::RateLimitResponse res;
    const auto status = rltest::rls_call_async(*service, rltest::rls_request(domain, descs), res);
    REQUIRE(status.has_value());
    INFO(status->error_message());
    REQUIRE(status->ok());
    REQUIRE(res.statuses_size() == static_cast<int>(descs.size()));
    return res;
  }

  ratelimit::ManualClock clock;
  std::shared_ptr<ratelimit::server::Service> service;
};

/// What a Go replica does to a key: count hits with its expiry, and read it.
class GoWriter {
 public:
  virtual ~GoWriter() = default;
  /// Adds `hits` as the Go service does and returns the count after them.
  virtual std::int64_t add(const std::string& key, std::int64_t hits, std::int64_t expiry_s) = 0;
  /// The count, or nullopt when the key does not exist.
  virtual std::optional<std::int64_t> read(const std::string& key) = 0;
};

#if defined(RATELIMIT_SERVER_HAVE_REDIS)
/// A Go replica on Redis: INCRBY and EXPIRE in one pipeline (fixed_cache_impl.go
/// pipelineAppend); on a cluster each key on its slot's node, following MOVED.
class RedisWriter final : public GoWriter {
 public:
  explicit RedisWriter(std::string node) : node_(std::move(node)) {}

  std::int64_t add(const std::string& key, std::int64_t hits, std::int64_t expiry_s) override {
    auto r = run(
        key, {{"INCRBY", key, std::to_string(hits)}, {"EXPIRE", key, std::to_string(expiry_s)}});
    REQUIRE(r.front()->type == REDIS_REPLY_INTEGER);
    return r.front()->integer;
  }
  std::optional<std::int64_t> read(const std::string& key) override {
    auto r = run(key, {{"GET", key}});
    if (r.front()->type == REDIS_REPLY_NIL) return std::nullopt;
    REQUIRE(r.front()->type == REDIS_REPLY_STRING);
    return std::stoll(std::string(r.front()->str, r.front()->len));
  }
  std::int64_t ttl(const std::string& key) {
    auto r = run(key, {{"TTL", key}});
    REQUIRE(r.front()->type == REDIS_REPLY_INTEGER);
    return r.front()->integer;
  }

 private:
  std::vector<ratelimit::detail::RedisReplyPtr> run(
      const std::string& key, const std::vector<std::vector<std::string>>& commands) {
    std::string node = node_;
    for (int hop = 0; hop < 5; ++hop) {
      ratelimit::detail::RedisConnectionSettings s;
      s.connect_timeout = std::chrono::seconds{2};
      s.command_timeout = std::chrono::seconds{5};
      auto c = rltest::BlockingConnection::open(
          ratelimit::detail::parse_redis_node(node, "writer node"), s);
      auto replies = c.pipeline(commands);
      const auto* first = replies.front().get();
      // "MOVED <slot> <host:port>": the key's slot lives on another node.
      if (first->type == REDIS_REPLY_ERROR && std::string_view(first->str, 6) == "MOVED ") {
        const std::string e(first->str, first->len);
        node = e.substr(e.rfind(' ') + 1);
        continue;
      }
      return replies;
    }
    FAIL("too many MOVED for " << key);
    return {};
  }

  std::string node_;
};

bool on_cluster() {
  const char* v = std::getenv("RATELIMIT_SERVER_TEST_ON_CLUSTER");
  return v != nullptr && std::string_view(v) == "1";
}

std::string redis_node() {
  const auto& e = rltest::redis_endpoint();
  return e.host + ":" + std::to_string(e.port);
}

/// The counters and a Go writer on the same Redis: the test Redis, or the test cluster in the
/// cluster run.
std::pair<std::shared_ptr<ratelimit::server::Counters>, std::shared_ptr<RedisWriter>> on_redis(
    const ratelimit::server::GoKeyOptions& go) {
  if (on_cluster())
    return {ratelimit::server::make_redis_cluster_counters(rltest::test_cluster_options("gk"),
                                                           nullptr, go),
            std::make_shared<RedisWriter>(rltest::cluster_seed())};
  return {ratelimit::server::make_redis_counters(rltest::test_redis_options("gk"), nullptr, go),
          std::make_shared<RedisWriter>(redis_node())};
}
#endif

const std::string users = R"(
domain: go
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
)";

}  // namespace

#if defined(RATELIMIT_SERVER_HAVE_REDIS)
TEST_CASE("Go keys: the Go service's INCRBY and the server's hits share one counter on Redis",
          "[server][go_keys]") {
  const ratelimit::server::GoKeyOptions go{fresh_prefix(), 5};
  auto [counters, writer] = on_redis(go);
  Server s(counters, users);
  s.clock.advance(std::chrono::seconds{90});
  // cache_key.go: prefix + domain "_" + key "_" value "_" + (now / 60) * 60 = day0 + 60.
  const std::string alice = go.prefix + "go_user_alice_" + std::to_string(day0_s + 60);
  CHECK(writer->add(alice, 4, 60) == 4);
  // The server's hit counts on the Go key: 4 + 1 = 5 > 3.
  const auto over = s.call("go", {{{{"user", "alice"}}}});
  CHECK(over.overall_code() == Code::OVER_LIMIT);
  CHECK(over.statuses(0).limit_remaining() == 0);
  CHECK(over.statuses(0).duration_until_reset().seconds() == 30);  // 60 - 90 % 60
  CHECK(writer->read(alice) == 5);
  // EXPIRE divider + jitter in [0, 5): at most 64 s, and at least 60 less the real seconds
  // since (generously 10).
  const auto ttl = writer->ttl(alice);
  CHECK(ttl <= 64);
  CHECK(ttl >= 50);
  // The other way: two hits through the server, one through Go, then the server sees 4 > 3.
  const std::string bob = go.prefix + "go_user_bob_" + std::to_string(day0_s + 60);
  CHECK(s.call("go", {{{{"user", "bob"}}}}).statuses(0).limit_remaining() == 2);  // 3 - 1
  CHECK(s.call("go", {{{{"user", "bob"}}}}).statuses(0).limit_remaining() == 1);  // 3 - 2
  CHECK(writer->add(bob, 1, 60) == 3);
  CHECK(s.call("go", {{{{"user", "bob"}}}}).overall_code() == Code::OVER_LIMIT);  // 4 > 3
  // The next minute is a new key (day0 + 120), as Go's.
  s.clock.advance(std::chrono::seconds{30});
  CHECK(s.call("go", {{{{"user", "bob"}}}}).statuses(0).limit_remaining() == 2);
  CHECK(writer->read(go.prefix + "go_user_bob_" + std::to_string(day0_s + 120)) == 1);
}

TEST_CASE("Go keys: a share_threshold wildcard counts under its pattern, as Go's key",
          "[server][go_keys]") {
  const ratelimit::server::GoKeyOptions go{fresh_prefix(), 0};
  auto [counters, writer] = on_redis(go);
  Server s(counters, R"(
domain: go
descriptors:
  - key: path
    value: "/api/*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
)");
  s.call("go", {{{{"path", "/api/a"}}}});
  s.call("go", {{{{"path", "/api/b"}}}});
  // cache_key.go writes ShareThresholdKeyPattern for the value: one key for every match,
  // window start (day0 / 3600) * 3600 = day0.
  CHECK(writer->read(go.prefix + "go_path_/api/*_" + std::to_string(day0_s)) == 2);
}
#endif

TEST_CASE("Go keys: a limit override of the rule's unit shares the rule's count, on every storage",
          "[server][go_keys]") {
  const ratelimit::server::GoKeyOptions go{fresh_prefix(), 0};
  std::shared_ptr<ratelimit::server::Counters> counters;
#if defined(RATELIMIT_SERVER_HAVE_REDIS)
  const bool redis = on_cluster() || GENERATE(false, true);
  if (redis) counters = on_redis(go).first;
#endif
  if (!counters) counters = ratelimit::server::make_memory_counters(go);
  Server s(counters, R"(
domain: go
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
)");
  s.clock.advance(std::chrono::seconds{90});
  for (int i = 0; i < 3; ++i) s.call("go", {{{{"user", "a"}}}});
  Desc five{{{"user", "a"}}, 5, 2};  // 5 per MINUTE
  // Go's key has no limit in it: the override counts on the rule's key, 3 + 1 = 4, 5 - 4 = 1.
  CHECK(s.call("go", {five}).statuses(0).limit_remaining() == 1);
  CHECK(s.call("go", {{{{"user", "a"}}}}).statuses(0).limit_remaining() == 5);  // 10 - 5
  // An override of another unit has another window start (hour: day0, minute: day0 + 60).
  Desc hourly{{{"user", "a"}}, 100, 3};
  CHECK(s.call("go", {hourly}).statuses(0).limit_remaining() == 99);  // 100 - 1
  // Nor the unit: at day0 + 15 s the minute and the hour both start at day0, one Go key, so
  // the hour override sees the minute rule's 2 hits: 100 - 3 = 97 (Go's quirk, kept).
  s.clock.set(std::chrono::seconds{day0_s + 15});
  s.call("go", {{{{"user", "b"}}}});
  s.call("go", {{{{"user", "b"}}}});
  Desc hourly_b{{{"user", "b"}}, 100, 3};
  CHECK(s.call("go", {hourly_b}).statuses(0).limit_remaining() == 97);
}

#if defined(RATELIMIT_SERVER_HAVE_REDIS)
TEST_CASE("Go keys: per-second limits go to the per-second Redis, the others to the main one",
          "[server][go_keys][no_cluster]") {
  const char* v = std::getenv("RATELIMIT_TEST_REDIS_PERSECOND");
  if (v == nullptr || *v == '\0')
    FAIL(
        "RATELIMIT_TEST_REDIS_PERSECOND is not set: run through scripts/test.sh, which starts "
        "a second Redis");
  const ratelimit::server::GoKeyOptions go{fresh_prefix(), 0};
  ratelimit::server::PerSecondRedis per_second;
  const auto node = ratelimit::detail::parse_redis_node(v, "RATELIMIT_TEST_REDIS_PERSECOND");
  per_second.redis = std::make_shared<ratelimit::RedisOptions>(rltest::test_redis_options("ps"));
  per_second.redis->host = node.host;
  per_second.redis->port = node.port;
  // Our /metrics hears every round trip, the per-second Redis's too.
  auto exporter = std::make_shared<ratelimit::PrometheusExporter>();
  Server s(ratelimit::server::make_redis_counters(rltest::test_redis_options("gk"), exporter, go,
                                                  per_second),
           R"(
domain: go
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 2}
)");
  s.clock.advance(std::chrono::seconds{7});
  RedisWriter main(redis_node()), fast(v);
  // Window starts: second (day0 + 7), minute day0.
  const std::string a = go.prefix + "go_a_x_" + std::to_string(day0_s + 7);
  const std::string b = go.prefix + "go_b_x_" + std::to_string(day0_s);
  s.call("go", {{{{"a", "x"}}}, {{{"b", "x"}}}});
  CHECK(fast.read(a) == 1);
  CHECK(main.read(a) == std::nullopt);
  CHECK(main.read(b) == 1);
  CHECK(fast.read(b) == std::nullopt);
  // A Go replica's per-second hit on the per-second Redis: the server then sees 2 + 1 > 2.
  CHECK(fast.add(a, 1, 1) == 2);
  CHECK(s.call("go", {{{{"a", "x"}}}}).overall_code() == Code::OVER_LIMIT);
  // Round trips: the first call one pipeline to each Redis (2), the second one to the
  // per-second Redis (1): 3.
  CHECK_THAT(exporter->render(), Catch::Contains("\nratelimit_redis_round_trip_seconds_count 3\n"));
}
#endif

namespace {

/// The two memcached of RATELIMIT_TEST_MEMCACHED (host:port,host:port), in their listed order.
std::vector<std::string> memcached_servers() {
  const char* v = std::getenv("RATELIMIT_TEST_MEMCACHED");
  if (v == nullptr || *v == '\0')
    FAIL(
        "RATELIMIT_TEST_MEMCACHED is not set: run through scripts/test.sh, which starts two "
        "memcached");
  std::vector<std::string> out;
  std::string s = v;
  for (std::size_t start = 0;;) {
    const auto comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? comma : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  REQUIRE(out.size() == 2);
  return out;
}

/// One text-protocol round trip to the memcached at "host:port": sends `request` and reads its
/// reply (a get's up to END, any other's one line).
std::string memcached_round_trip(const std::string& server, const std::string& request) {
  const auto colon = server.rfind(':');
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  REQUIRE(::getaddrinfo(server.substr(0, colon).c_str(), server.substr(colon + 1).c_str(), &hints,
                        &found) == 0);
  const int fd = ::socket(found->ai_family, found->ai_socktype, 0);
  REQUIRE(fd >= 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const bool connected = ::connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  ::freeaddrinfo(found);
  REQUIRE(connected);
  REQUIRE(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size()));
  std::string reply;
  char buf[4096];
  // Every reply used here ends with "\r\n" after a final line: END, a number, STORED,
  // NOT_STORED or NOT_FOUND.
  const auto complete = [&] {
    if (reply.size() < 2 || reply.compare(reply.size() - 2, 2, "\r\n") != 0) return false;
    if (reply.rfind("VALUE", 0) == 0) return reply.find("\r\nEND\r\n") != std::string::npos;
    return true;
  };
  while (!complete()) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    reply.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return reply;
}

/// A Go replica on memcached (cache_impl.go increaseAsync with gomemcache): the key's server is
/// CRC-32 (IEEE) of the key modulo the number of servers (selector.go PickServer); incr, on
/// NOT_FOUND add, on NOT_STORED incr again.
class MemcacheWriter final : public GoWriter {
 public:
  explicit MemcacheWriter(std::vector<std::string> servers) : servers_(std::move(servers)) {}

  std::size_t server_index(const std::string& key) const {
    return ::crc32(0L, reinterpret_cast<const Bytef*>(key.data()), static_cast<uInt>(key.size())) %
           servers_.size();
  }

  std::int64_t add(const std::string& key, std::int64_t hits, std::int64_t expiry_s) override {
    const std::string& server = servers_[server_index(key)];
    std::string r =
        memcached_round_trip(server, "incr " + key + " " + std::to_string(hits) + "\r\n");
    if (r == "NOT_FOUND\r\n") {
      const std::string value = std::to_string(hits);
      r = memcached_round_trip(server, "add " + key + " 0 " + std::to_string(expiry_s) + " " +
                                           std::to_string(value.size()) + "\r\n" + value + "\r\n");
      if (r == "STORED\r\n") return hits;
      REQUIRE(r == "NOT_STORED\r\n");
      r = memcached_round_trip(server, "incr " + key + " " + std::to_string(hits) + "\r\n");
    }
    return std::stoll(r);
  }

  std::optional<std::int64_t> read(const std::string& key) override {
    return read_on(servers_[server_index(key)], key);
  }

  /// The key's value on `server`, whichever the key's server is.
  static std::optional<std::int64_t> read_on(const std::string& server, const std::string& key) {
    const std::string r = memcached_round_trip(server, "get " + key + "\r\n");
    if (r == "END\r\n") return std::nullopt;
    // VALUE <key> <flags> <bytes>\r\n<data>\r\nEND\r\n
    const auto data = r.find("\r\n") + 2;
    return std::stoll(r.substr(data, r.find("\r\n", data) - data));
  }

  const std::vector<std::string>& servers() const { return servers_; }

 private:
  std::vector<std::string> servers_;
};

}  // namespace

TEST_CASE("Go keys: on two memcached each key is on the server Go's client picks, shared both ways",
          "[server][go_keys][no_cluster][memcache]") {
  const ratelimit::server::GoKeyOptions go{fresh_prefix(), 5};
  MemcacheWriter writer(memcached_servers());
  ratelimit::server::MemcacheOptions options;
  options.servers = writer.servers();
  options.timeout = std::chrono::seconds{5};
  Server s(ratelimit::server::make_memcache_counters(options, go), users);
  s.clock.advance(std::chrono::seconds{90});
  const auto key = [&](const std::string& user) {
    return go.prefix + "go_user_" + user + "_" + std::to_string(day0_s + 60);
  };
  // 32 users, one hit each: each key is on the server CRC-32 % 2 names and not on the other.
  // Both servers hold some (all 32 on one has probability 2^-31 for a random prefix).
  std::size_t on_second = 0;
  for (int i = 0; i < 32; ++i) {
    const std::string user = "u" + std::to_string(i);
    CHECK(s.call("go", {{{{"user", user}}}}).statuses(0).limit_remaining() == 2);  // 3 - 1
    const std::size_t at = writer.server_index(key(user));
    on_second += at;
    CHECK(MemcacheWriter::read_on(writer.servers()[at], key(user)) == 1);
    CHECK(MemcacheWriter::read_on(writer.servers()[1 - at], key(user)) == std::nullopt);
  }
  CHECK(on_second > 0);
  CHECK(on_second < 32);
  // A Go replica's two hits on a new key (incr misses, add 2), then the server: 2 + 1 = 3 is
  // within 3, remaining 0; the next is 4 > 3. The server counted before answering: 4 read back.
  CHECK(writer.add(key("alice"), 2, 60) == 2);
  const auto third = s.call("go", {{{{"user", "alice"}}}});
  CHECK(third.overall_code() == Code::OK);
  CHECK(third.statuses(0).limit_remaining() == 0);
  CHECK(s.call("go", {{{{"user", "alice"}}}}).overall_code() == Code::OVER_LIMIT);
  CHECK(writer.read(key("alice")) == 4);
  // The other way: the server's hit first (its add), then Go's incr finds the key.
  s.call("go", {{{{"user", "carol"}}}});
  CHECK(writer.add(key("carol"), 1, 60) == 2);
}

TEST_CASE("Go keys: memcache ignores STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT as Go does",
          "[server][go_keys][no_cluster][memcache]") {
  const ratelimit::server::GoKeyOptions go{fresh_prefix(), 0};
  MemcacheWriter writer(memcached_servers());
  ratelimit::server::MemcacheOptions options;
  options.servers = writer.servers();
  options.timeout = std::chrono::seconds{5};
  std::map<std::string, std::string> env{{"BACKEND_TYPE", "memcache"},
                                         {"MEMCACHE_HOST_PORT", "h:1"},
                                         {"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"}};
  std::vector<std::string> names;
  for (const auto& [k, v] : env) names.push_back(k);
  const auto settings = ratelimit::server::read_settings(
      [&](const std::string& n) -> std::optional<std::string> {
        const auto it = env.find(n);
        return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
      },
      {}, names);
  REQUIRE_FALSE(settings.stop_increment_when_over);
  ratelimit::server::ServiceSettings service;
  service.stop_increment_when_over = settings.stop_increment_when_over;
  Server s(ratelimit::server::make_memcache_counters(options, go), R"(
domain: go
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 1}
)",
           service);
  // b goes over on its second call; a beside it is counted in full each time (Go's memcache
  // never reads the option): a = 2 after two calls.
  s.call("go", {{{{"a", "x"}}}, {{{"b", "x"}}}});
  const auto second = s.call("go", {{{{"a", "x"}}}, {{{"b", "x"}}}});
  CHECK(second.statuses(1).code() == Code::OVER_LIMIT);  // 2 > 1
  CHECK(writer.read(go.prefix + "go_a_x_" + std::to_string(day0_s)) == 2);
  CHECK(writer.read(go.prefix + "go_b_x_" + std::to_string(day0_s)) == 2);
}

TEST_CASE("Go keys: the settings of the Go service's keys, per-second Redis and memcache",
          "[server][go_keys][no_cluster]") {
  using Env = std::map<std::string, std::string>;
  const auto read = [](const Env& env) {
    std::vector<std::string> names;
    for (const auto& [k, v] : env) names.push_back(k);
    return ratelimit::server::read_settings(
        [&](const std::string& n) -> std::optional<std::string> {
          const auto it = env.find(n);
          return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
        },
        {}, names);
  };
  const auto s = read({{"CACHE_KEY_PREFIX", "rl:"},
                       {"EXPIRATION_JITTER_MAX_SECONDS", "0"},
                       {"REDIS_PERSECOND", "true"},
                       {"REDIS_PERSECOND_URL", "127.0.0.1:6380"},
                       {"REDIS_PERSECOND_SOCKET_TYPE", "tcp"},
                       {"REDIS_PERSECOND_TYPE", "CLUSTER"},
                       {"REDIS_PERSECOND_AUTH", "pw"},
                       {"REDIS_PERSECOND_POOL_SIZE", "4"}});
  CHECK(s.cache_key_prefix == "rl:");
  CHECK(s.expiration_jitter_max_seconds == 0);
  CHECK(s.redis_persecond);
  CHECK(s.redis_persecond_url == "127.0.0.1:6380");
  CHECK(s.redis_persecond_type == "cluster");
  CHECK(s.redis_persecond_pool_size == 4);
  const auto m = read({{"BACKEND_TYPE", "memcache"},
                       {"MEMCACHE_HOST_PORT", "a:11211,b:11212"},
                       {"MEMCACHE_MAX_IDLE_CONNS", "7"},
                       {"MEMCACHE_SRV_REFRESH", "0"}});
  CHECK(m.backend_type == "memcache");
  CHECK(m.memcache_host_port == std::vector<std::string>{"a:11211", "b:11212"});
  CHECK(m.memcache_max_idle_conns == 7);
  CHECK_THROWS_WITH(read({{"EXPIRATION_JITTER_MAX_SECONDS", "-1"}}),
                    Catch::Contains("EXPIRATION_JITTER_MAX_SECONDS = \"-1\""));
  CHECK_THROWS_WITH(read({{"BACKEND_TYPE", "memcache"}}), Catch::Contains("MEMCACHE_HOST_PORT"));
  CHECK_THROWS_WITH(read({{"BACKEND_TYPE", "memcache"},
                          {"MEMCACHE_HOST_PORT", "a:1"},
                          {"MEMCACHE_SRV", "_mc._tcp.example"}}),
                    Catch::Contains("MEMCACHE_SRV = \"_mc._tcp.example\""));
  CHECK_THROWS_WITH(read({{"MEMCACHE_TLS", "true"}}), Catch::Contains("MEMCACHE_TLS = \"true\""));
  CHECK_THROWS_WITH(read({{"BACKEND_TYPE", "memcache"},
                          {"MEMCACHE_HOST_PORT", "a:1"},
                          {"RATELIMIT_SERVER_ALL_OR_NOTHING", "true"}}),
                    Catch::Contains("BACKEND_TYPE = memcache"));
  CHECK_THROWS_WITH(read({{"BACKEND_TYPE", "etcd"}}), Catch::Contains("BACKEND_TYPE = \"etcd\""));
}

}  // namespace gk

namespace gk {

namespace {

/// One hit of "alice" on rule go/user: 1,000 per minute, Go key "go_user_alice_<window>".
ratelimit::server::Hit alice_per_minute() {
  ratelimit::server::Hit hit;
  hit.limit_id = "go/user";
  hit.key = "alice";
  hit.limit = 1000;
  hit.window_s = 60;
  hit.go_key = "go_user_alice_";
  return hit;
}

}  // namespace

TEST_CASE("Go keys: a memcached that does not answer counts as 0 and fails no call, as in Go",
          "[server][go_keys][no_cluster][memcache]") {
  // A port nothing listens on: a socket bound and closed again, so connect is refused.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), len) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  ratelimit::server::MemcacheOptions options;
  options.servers = {"127.0.0.1:" + std::to_string(ntohs(a.sin_port))};
  Server s(ratelimit::server::make_memcache_counters(options, {fresh_prefix(), 0}), users);
  // Every read is 0 (GetMulti's error), so each call is 0 + 1 of 3: OK with 2 remaining.
  for (int i = 0; i < 4; ++i) {
    const auto r = s.call("go", {{{{"user", "alice"}}}});
    CHECK(r.overall_code() == Code::OK);
    CHECK(r.statuses(0).limit_remaining() == 2);
  }
}

TEST_CASE("Go keys: calls in flight together on memcache are read in order, each before its hit",
          "[server][go_keys][no_cluster][memcache]") {
  // The storage writes a call's get and its incr together on its one connection per
  // memcached, and memcached answers a connection's requests in order. A Go replica creates
  // the key with 1; then 64 calls are sent at once, one hit each: call k (k = 1..64, in the
  // order sent) reads 1 + (k - 1) = k and brings the key to k + 1, so the counts reported are
  // exactly 2..65 and the key ends at 1 + 64 = 65 (no hit lost, none counted twice).
  const ratelimit::server::GoKeyOptions go{fresh_prefix(), 0};
  MemcacheWriter writer(memcached_servers());
  ratelimit::server::MemcacheOptions options;
  options.servers = writer.servers();
  options.timeout = std::chrono::seconds{5};
  auto counters = ratelimit::server::make_memcache_counters(options, go);
  // 90 s into day0: the minute window started at day0 + 60.
  const std::chrono::nanoseconds now = std::chrono::seconds{day0_s + 90};
  const ratelimit::server::Hit hit = alice_per_minute();
  const std::string key = go.prefix + "go_user_alice_" + std::to_string(day0_s + 60);
  REQUIRE(writer.add(key, 1, 60) == 1);
  std::mutex mutex;
  std::condition_variable answered;
  std::vector<std::int64_t> counts;
  int errors = 0;
  for (int i = 0; i < 64; ++i)
    counters->count_async({hit}, now,
                          [&](std::vector<ratelimit::server::HitResult> r, std::exception_ptr e) {
                            const std::lock_guard lock(mutex);
                            if (e || r.size() != 1 || !r[0].count)
                              ++errors;
                            else
                              counts.push_back(*r[0].count);
                            answered.notify_all();
                          });
  {
    std::unique_lock lock(mutex);
    REQUIRE(answered.wait_for(lock, std::chrono::seconds{30},
                              [&] { return counts.size() + errors == 64; }));
  }
  CHECK(errors == 0);
  std::vector<std::int64_t> expected;
  for (std::int64_t k = 1; k <= 64; ++k) expected.push_back(k + 1);
  std::sort(counts.begin(), counts.end());
  CHECK(counts == expected);
  CHECK(writer.read(key) == 65);
}

TEST_CASE("Go keys: a memcache storage whose last handle a completion drops ends cleanly",
          "[server][go_keys][no_cluster][memcache]") {
  // A call in flight when its configuration or its server goes holds the last handle to the
  // storage, and its completion runs on the storage's I/O thread: destroying the storage there
  // must not join that very thread (std::system_error, "Resource deadlock avoided", and a
  // terminate). Each of 20 storages gets one call whose completion holds the only handle; the
  // completion releases it and signals; every one of the 20 must be answered (20 = 20).
  const ratelimit::server::GoKeyOptions go{fresh_prefix(), 0};
  ratelimit::server::MemcacheOptions options;
  options.servers = memcached_servers();
  options.timeout = std::chrono::seconds{5};
  const ratelimit::server::Hit hit = alice_per_minute();
  std::mutex mutex;
  std::condition_variable answered;
  int done = 0;
  for (int i = 0; i < 20; ++i) {
    auto counters = ratelimit::server::make_memcache_counters(options, go);
    auto* raw = counters.get();
    auto held = std::make_shared<std::shared_ptr<ratelimit::server::Counters>>(std::move(counters));
    raw->count_async({hit}, std::chrono::seconds{day0_s + 90},
                     [&, held](std::vector<ratelimit::server::HitResult>, std::exception_ptr) {
                       held->reset();  // the last handle, dropped on the I/O thread
                       const std::lock_guard lock(mutex);
                       ++done;
                       answered.notify_all();
                     });
    held.reset();  // only the completion holds it now
  }
  std::unique_lock lock(mutex);
  CHECK(answered.wait_for(lock, std::chrono::seconds{60}, [&] { return done == 20; }));
}

TEST_CASE("Go keys: a denied hit's count comes beside its decision, exact on every storage",
          "[server][go_keys][stats]") {
  // The reference's stats split a call's hits between within, near and over limit by the
  // count its INCRBY returns (src/limiter/base_limiter.go), over the limit too; the response
  // says 0 remaining (a uint32).
  const ratelimit::server::GoKeyOptions go{fresh_prefix(), 0};
  std::shared_ptr<ratelimit::server::Counters> counters;
  std::string storage = "memory";
#if defined(RATELIMIT_SERVER_HAVE_REDIS)
  storage = on_cluster() ? "redis" : GENERATE(as<std::string>{}, "memory", "redis", "memcache");
  if (storage == "redis") counters = on_redis(go).first;
#else
  storage = GENERATE(as<std::string>{}, "memory", "memcache");
#endif
  if (storage == "memcache") {
    ratelimit::server::MemcacheOptions options;
    options.servers = memcached_servers();
    options.timeout = std::chrono::seconds{5};
    counters = ratelimit::server::make_memcache_counters(options, go);
  }
  if (!counters) counters = ratelimit::server::make_memory_counters(go);
  INFO(storage);
  struct Seen {
    std::optional<std::int64_t> before, after;
    ratelimit::server::LimitStanding standing;
  };
  auto seen = std::make_shared<std::vector<Seen>>();
  auto mutex = std::make_shared<std::mutex>();
  ratelimit::server::ServiceSettings settings;
  settings.observer = [seen, mutex](const ratelimit::server::DescriptorResult& r) {
    const std::lock_guard lock(*mutex);
    seen->push_back({r.count_before, r.count_after, r.standing});
  };
  Server s(counters, users, settings);  // 3 a minute
  s.clock.advance(std::chrono::seconds{90});
  using St = ratelimit::server::LimitStanding;
  const auto call = [&](std::int64_t hits) {
    const auto res = s.call("go", {{{{"user", "dora"}}, -1, 2, hits}});
    const std::lock_guard lock(*mutex);
    REQUIRE(!seen->empty());
    Seen last = seen->back();
    return std::make_pair(res, last);
  };
  // 2 hits: 0 -> 2 of 3, remaining 1.
  auto [r1, s1] = call(2);
  CHECK(r1.statuses(0).limit_remaining() == 1);
  CHECK((s1.before == 0 && s1.after == 2 && s1.standing != St::over));
  // 3 hits: 2 -> 5 > 3, over; remaining 0, never less.
  auto [r2, s2] = call(3);
  CHECK(r2.overall_code() == Code::OVER_LIMIT);
  CHECK(r2.statuses(0).limit_remaining() == 0);
  CHECK((s2.before == 2 && s2.after == 5 && s2.standing == St::over));
  // 1 hit: 5 -> 6, over again.
  auto [r3, s3] = call(1);
  CHECK(r3.statuses(0).limit_remaining() == 0);
  CHECK((s3.before == 5 && s3.after == 6 && s3.standing == St::over));
}

}  // namespace gk
