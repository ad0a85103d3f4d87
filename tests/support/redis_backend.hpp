#pragma once
/// @file redis_backend.hpp
/// The Redis side of the storage parameterization (see backends.hpp): `RedisBackend`, plus the
/// helpers the Redis tests share to find their server.
///
/// The server is named by RATELIMIT_TEST_REDIS=host:port (scripts/test.sh starts a throwaway
/// one). When it is unset or does not answer, the test FAILS; a developer without Redis may opt
/// out explicitly with RATELIMIT_TEST_REDIS_OPTOUT=1, which exits 77 (CTest: skipped), except
/// when CI=true, where nothing can opt out. There is no silent skip.

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <string_view>

#include <ratelimit/redis.hpp>
#include "redis/blocking_connection.hpp"

namespace rltest {

struct RedisEndpoint {
  std::string host;
  int port;
};

inline bool env_is(const char* name, std::string_view value) {
  const char* v = std::getenv(name);
  return v != nullptr && value == v;
}

/// Fails (throws) or, when the developer opted out outside CI, exits 77.
[[noreturn]] inline void no_redis(const std::string& why) {
  if (!env_is("CI", "true") && env_is("RATELIMIT_TEST_REDIS_OPTOUT", "1")) {
    std::cerr << "SKIPPED (RATELIMIT_TEST_REDIS_OPTOUT=1): " << why << "\n";
    std::exit(77);
  }
  throw std::runtime_error(
      "Redis tests need a server: " + why +
      ". Run them through scripts/test.sh (it starts one), or set RATELIMIT_TEST_REDIS=host:port"
      ", or opt out explicitly with RATELIMIT_TEST_REDIS_OPTOUT=1 (not under CI=true)");
}

/// Parses RATELIMIT_TEST_REDIS.
inline RedisEndpoint parse_endpoint(std::string_view v) {
  const auto colon = v.rfind(':');
  if (colon == std::string_view::npos || colon == 0)
    no_redis("RATELIMIT_TEST_REDIS is not host:port");
  RedisEndpoint e{std::string(v.substr(0, colon)), 0};
  try {
    e.port = std::stoi(std::string(v.substr(colon + 1)));
  } catch (const std::exception&) {
    no_redis("RATELIMIT_TEST_REDIS has no valid port");
  }
  return e;
}

/// True if a server at `e` answers PING within a second.
inline bool redis_answers(const RedisEndpoint& e) {
  try {
    ratelimit::detail::RedisConnectionSettings s;
    s.connect_timeout = std::chrono::seconds{1};
    s.command_timeout = std::chrono::seconds{1};
    auto c = rltest::BlockingConnection::open({e.host, e.port}, s);
    auto replies = c.pipeline({{"PING"}});
    return replies.front()->type == REDIS_REPLY_STATUS;
  } catch (const ratelimit::detail::RedisError&) {
    return false;
  }
}

/// The test server, checked once per process.
inline const RedisEndpoint& redis_endpoint() {
  static const RedisEndpoint endpoint = [] {
    const char* v = std::getenv("RATELIMIT_TEST_REDIS");
    if (v == nullptr || *v == '\0') no_redis("RATELIMIT_TEST_REDIS is not set");
    RedisEndpoint e = parse_endpoint(v);
    if (!redis_answers(e)) no_redis("nothing answers PING at " + std::string(v));
    return e;
  }();
  return endpoint;
}

/// A key prefix no other storage of this run, or of an earlier run, uses.
inline std::string unique_prefix(std::string_view tag = "t") {
  static std::atomic<std::uint64_t> counter{0};
  static const auto start = std::chrono::steady_clock::now().time_since_epoch().count();
  return "rltest:" + std::string(tag) + ":" + std::to_string(::getpid()) + "." +
         std::to_string(start) + "." + std::to_string(counter.fetch_add(1)) + ":";
}

/// Options for the test server with a fresh key prefix. The TTL margin is long because the
/// tests' time is a ManualClock: a key must not expire in real time while fake time stands
/// still. Timeouts are generous for the sanitizer builds.
inline ratelimit::RedisOptions test_redis_options(std::string_view tag = "t") {
  const RedisEndpoint& e = redis_endpoint();
  ratelimit::RedisOptions o;
  o.host = e.host;
  o.port = e.port;
  o.key_prefix = unique_prefix(tag);
  o.ttl_margin = std::chrono::minutes{10};
  o.connect_timeout = std::chrono::seconds{2};
  o.command_timeout = std::chrono::seconds{5};
  o.failure_policy = ratelimit::FailurePolicy::fail_closed;
  return o;
}

}  // namespace rltest

/// The Redis storage for the parameterized rule suite: a RedisStorage on RATELIMIT_TEST_REDIS
/// whose keys no other test case shares. Decisions are at whole microseconds (the suite uses
/// whole milliseconds). A failure is a degraded, fail-closed decision, so it can never pass
/// for an expected one.
struct RedisBackend {
  static constexpr const char* name = "redis";
  using Storage = ratelimit::RedisStorage;
  static Storage make() { return Storage{rltest::test_redis_options("suite")}; }
  static constexpr std::chrono::nanoseconds resolution = std::chrono::microseconds{1};
};
