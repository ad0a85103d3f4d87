// The delay/partition proxy the far tests put between regions (support/delay_proxy.hpp), on a
// redis-server of the test's own: it forwards, it delays (a lower bound only: the proxy holds
// each chunk at least that long; how much later it arrives is the machine's business), and a
// partition drops everything until healed.

#include <chrono>
#include <string>

#include <catch2/catch.hpp>

#include "redis/redis_admin.hpp"
#include "support/delay_proxy.hpp"
#include "support/redis_backend.hpp"

namespace {

rltest::RedisEndpoint through(const rltest::DelayProxy& p) { return {"127.0.0.1", p.port()}; }

}  // namespace

TEST_CASE("The delay proxy forwards commands to its target and their replies back",
          "[far][proxy]") {
  (void)rltest::redis_endpoint();
  rltest::ThrowawayRedis server;
  rltest::DelayProxy proxy("127.0.0.1", server.endpoint().port);
  rltest::RedisAdmin admin(through(proxy));
  REQUIRE(admin.integer({"INCRBY", "proxied", "5"}) == 5);
  rltest::RedisAdmin direct(server.endpoint());
  CHECK(direct.integer({"INCRBY", "proxied", "0"}) == 5);  // it reached the server itself
}

TEST_CASE("The delay proxy holds each direction for its one-way delay", "[far][proxy]") {
  (void)rltest::redis_endpoint();
  rltest::ThrowawayRedis server;
  rltest::DelayProxy proxy("127.0.0.1", server.endpoint().port);
  rltest::RedisAdmin admin(through(proxy));
  proxy.set_delay(std::chrono::milliseconds{25});
  proxy.set_jitter(std::chrono::milliseconds{5});
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(admin.integer({"INCR", "slow"}) == 1);
  // A round trip crosses the proxy twice: at least 2 x 25 ms (jitter only adds).
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds{50});
}

TEST_CASE("A partitioned proxy drops every byte until it is healed", "[far][proxy]") {
  (void)rltest::redis_endpoint();
  rltest::ThrowawayRedis server;
  rltest::DelayProxy proxy("127.0.0.1", server.endpoint().port);
  rltest::RedisAdmin direct(server.endpoint());
  {
    ratelimit::detail::RedisConnectionSettings s;
    s.connect_timeout = std::chrono::seconds{2};
    s.command_timeout = std::chrono::milliseconds{200};
    auto conn = rltest::BlockingConnection::open({"127.0.0.1", proxy.port()}, s);
    proxy.set_partitioned(true);
    // The command is lost on the way: no reply within the timeout, and it never ran.
    CHECK_THROWS(conn.pipeline({{"INCR", "cut"}}));
    CHECK(direct.integer({"EXISTS", "cut"}) == 0);
  }
  proxy.set_partitioned(false);
  rltest::RedisAdmin healed(through(proxy));
  CHECK(healed.integer({"INCR", "cut"}) == 1);
}
