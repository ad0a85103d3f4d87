// Unix domain socket: a Redis on the same host is often reached through its
// socket (no TCP stack, file permissions as access control). A redis-server of the test's own
// listens on a socket in a temp dir (mode 700: only this user); a storage with `unix_socket`
// set decides exactly through it, and host and port are ignored: they name a port nobody
// listens on, so a decision that reached Redis can only have gone through the socket.
#include <chrono>
#include <string>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

#include "redis_admin.hpp"
#include "servers.hpp"
#include "support/expect.hpp"
#include "support/redis_backend.hpp"

using namespace std::chrono_literals;

TEST_CASE("A storage with unix_socket decides exactly through the socket, ignoring host and port",
          "[redis][unix_socket][token_bucket]") {
  rltest::TempDir dir;
  const std::string socket = dir.file("redis.sock");
  rltest::ThrowawayRedis server({"--unixsocket", socket, "--unixsocketperm", "700"});

  ratelimit::RedisOptions options;
  options.unix_socket = socket;
  options.host = "127.0.0.1";
  options.port = rltest::free_loopback_port();  // closed: must not be used
  options.key_prefix = rltest::unique_prefix("unix");
  options.failure_policy = ratelimit::FailurePolicy::fail_closed;
  options.connect_timeout = 2s;
  options.command_timeout = 5s;
  options.ttl_margin = std::chrono::minutes{10};
  rltest::FailureLog log;
  options.on_failure = log.callback();
  ratelimit::RedisStorage storage(options);

  ratelimit::ManualClock clock;
  ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::RedisStorage> bucket(
      {3, ratelimit::per_second(1)}, storage, clock);
  // Capacity 3, one token per second, frozen time: remaining 2, 1, 0, the bucket full again
  // (3 - remaining) s later; the fourth finds no token and waits 1 s for the next. A failure
  // would be fail_closed's degraded denial, equal to none of these.
  CHECK(bucket.try_acquire("k") == rltest::admitted(3, 2, 1s));
  CHECK(bucket.try_acquire("k") == rltest::admitted(3, 1, 2s));
  CHECK(bucket.try_acquire("k") == rltest::admitted(3, 0, 3s));
  CHECK(bucket.try_acquire("k") == rltest::denied(3, 0, 1s, 3s));
  // The denial spent nothing. 1.5 s later 1.5 tokens are back: admitted, 0.5 left (remaining
  // counts whole tokens: 0), full again once the missing 2.5 tokens are in: 2.5 s.
  clock.advance(1500ms);
  CHECK(bucket.try_acquire("k") == rltest::admitted(3, 0, 3s - 500ms));
  CHECK(log.snapshot().empty());
  // The state is on this server: its one key under the prefix.
  rltest::RedisAdmin admin(server.endpoint());
  CHECK(admin.scan(options.key_prefix + "*").size() == 1);
}
