// TLS: the managed Redis services production uses require TLS, and a TLS client
// is only worth having if it refuses the wrong server. Against a redis-server of the test's own
// serving TLS with the certificates scripts/tls_certs.sh made (RATELIMIT_TEST_TLS_CERTS):
// decisions over TLS are exact (CA file and CA directory); a server certificate from another CA
// or for another host name is refused, never silently accepted: every decision is the failure
// policy's (degraded) and `on_failure` reports a connect failure naming the certificate;
// `server_name` is what the certificate is checked against; mutual TLS decides with the client
// certificate and is refused without it; a CA file replaced on disk is used by the next
// connection without a new storage. Decision times come from a frozen ManualClock; only real
// servers are waited for, by polling with a limit.
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

#include "redis_admin.hpp"
#include "servers.hpp"
#include "support/expect.hpp"
#include "support/redis_backend.hpp"

using namespace std::chrono_literals;

namespace {

using TlsBucket = ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::RedisStorage>;

/// Options for `server`'s TLS port, trusting the test CA by file. fail_closed, so a refused
/// connection can never pass for an admitted decision; a short breaker back-off, so a test that
/// waits for Redis to decide again does not wait long; generous timeouts for the sanitizer
/// builds (a refusal is an answer, not a timeout, so they cost nothing there).
ratelimit::RedisOptions tls_options(const rltest::TlsRedis& server) {
  ratelimit::RedisOptions o;
  o.host = "127.0.0.1";
  o.port = server.tls_port();
  o.key_prefix = rltest::unique_prefix("tls");
  o.failure_policy = ratelimit::FailurePolicy::fail_closed;
  o.connect_timeout = 2s;
  o.command_timeout = 5s;
  o.breaker_backoff = 20ms;
  o.breaker_max_backoff = 100ms;
  o.ttl_margin = std::chrono::minutes{10};
  o.tls.enabled = true;
  o.tls.ca_file = rltest::tls_certs().file("ca.crt");
  return o;
}

/// Capacity 3, one token per second, time frozen at 0: each admission spends a token, so
/// remaining goes 2, 1, 0, and the bucket is full again after (3 - remaining) tokens at 1 s
/// each: reset_after 1 s, 2 s, 3 s. The fourth finds no token: denied until the next one,
/// 1 s away, still full after 3 s. Any failure would be a degraded denial, which compares
/// unequal to every one of these.
void check_exact_over_tls(ratelimit::RedisStorage& storage) {
  ratelimit::ManualClock clock;
  TlsBucket bucket({3, ratelimit::per_second(1)}, storage, clock);
  CHECK(bucket.try_acquire("k") == rltest::admitted(3, 2, 1s));
  CHECK(bucket.try_acquire("k") == rltest::admitted(3, 1, 2s));
  CHECK(bucket.try_acquire("k") == rltest::admitted(3, 0, 3s));
  CHECK(bucket.try_acquire("k") == rltest::denied(3, 0, 1s, 3s));
}

/// A storage whose TLS handshake must fail: every decision is fail_closed's denial (degraded),
/// Redis decides none of them, and each report (the first try and the breaker's probes) is a
/// connect failure whose message says it was the certificate.
void check_refused_over_tls(ratelimit::RedisStorage& storage, const rltest::FailureLog& log) {
  ratelimit::ManualClock clock;
  TlsBucket bucket({3, ratelimit::per_second(1)}, storage, clock);
  for (int i = 0; i < 5; ++i) {
    const ratelimit::Decision d = bucket.try_acquire("k");
    CHECK_FALSE(d.allowed);
    CHECK(d.degraded);
  }
  CHECK(storage.stats().decisions == 0);
  const auto seen = log.snapshot();
  REQUIRE_FALSE(seen.empty());
  for (const auto& f : seen) {
    INFO("on_failure: " << f.message);
    CHECK(f.kind == ratelimit::RedisFailureKind::connect);
    CHECK(rltest::contains_nocase(f.message, "certificate"));
  }
}

}  // namespace

TEST_CASE("Decisions over TLS are exact, the server verified by a CA file or a CA directory",
          "[redis][tls][token_bucket]") {
  rltest::TlsRedis server;
  auto options = tls_options(server);
  SECTION("CA file") {}
  SECTION("CA directory (hashed, openssl rehash)") {
    options.tls.ca_file.clear();
    options.tls.ca_dir = rltest::tls_certs().file("ca-dir");
  }
  rltest::FailureLog log;
  options.on_failure = log.callback();
  ratelimit::RedisStorage storage(options);
  check_exact_over_tls(storage);
  CHECK(log.snapshot().empty());
  // The state is on the TLS server itself: one key under this storage's prefix.
  rltest::RedisAdmin admin(server.plain_endpoint());
  CHECK(admin.scan(options.key_prefix + "*").size() == 1);
}

TEST_CASE(
    "A server certificate from another CA is refused: degraded, reported as a certificate "
    "failure",
    "[redis][tls][failure]") {
  // Same names as the good certificate (IP:127.0.0.1, DNS:localhost): only the issuer is wrong.
  rltest::TlsRedis server("other-server.crt", "other-server.key");
  auto options = tls_options(server);
  rltest::FailureLog log;
  options.on_failure = log.callback();
  ratelimit::RedisStorage storage(options);
  check_refused_over_tls(storage, log);
}

TEST_CASE("A server certificate from the trusted CA for another host name is refused",
          "[redis][tls][failure]") {
  // Signed by the trusted CA, but for wrong.example only, while the storage connects to
  // 127.0.0.1: the chain verifies and the name does not.
  rltest::TlsRedis server("wrong-name.crt", "wrong-name.key");
  auto options = tls_options(server);
  rltest::FailureLog log;
  options.on_failure = log.callback();
  ratelimit::RedisStorage storage(options);
  check_refused_over_tls(storage, log);
}

TEST_CASE("server_name is the name the certificate is checked against, not the host connected to",
          "[redis][tls]") {
  SECTION("localhost matches the DNS name of the good certificate when connecting to 127.0.0.1") {
    rltest::TlsRedis server;
    auto options = tls_options(server);
    options.tls.server_name = "localhost";
    rltest::FailureLog log;
    options.on_failure = log.callback();
    ratelimit::RedisStorage storage(options);
    check_exact_over_tls(storage);
    CHECK(log.snapshot().empty());
  }
  SECTION("wrong.example makes the certificate for wrong.example acceptable at 127.0.0.1") {
    // The same server the previous test case refuses: only server_name changed.
    rltest::TlsRedis server("wrong-name.crt", "wrong-name.key");
    auto options = tls_options(server);
    options.tls.server_name = "wrong.example";
    ratelimit::RedisStorage storage(options);
    check_exact_over_tls(storage);
  }
  SECTION("localhost is refused by the certificate for wrong.example") {
    rltest::TlsRedis server("wrong-name.crt", "wrong-name.key");
    auto options = tls_options(server);
    options.tls.server_name = "localhost";
    rltest::FailureLog log;
    options.on_failure = log.callback();
    ratelimit::RedisStorage storage(options);
    check_refused_over_tls(storage, log);
  }
}

TEST_CASE("Mutual TLS decides with the client certificate and is refused without it",
          "[redis][tls][mtls]") {
  rltest::TlsRedis server("server.crt", "server.key", /*require_client_certificate=*/true);
  auto options = tls_options(server);
  rltest::FailureLog log;
  options.on_failure = log.callback();
  SECTION("with the client certificate from the test CA") {
    options.tls.cert_file = rltest::tls_certs().file("client.crt");
    options.tls.key_file = rltest::tls_certs().file("client.key");
    ratelimit::RedisStorage storage(options);
    check_exact_over_tls(storage);
    CHECK(log.snapshot().empty());
  }
  SECTION("without a client certificate") {
    // Under TLS 1.3 the server refuses after the handshake (alert "certificate required"):
    // the storage must still see it before any decision is taken for Redis's.
    ratelimit::RedisStorage storage(options);
    check_refused_over_tls(storage, log);
  }
}

TEST_CASE("A CA file replaced on disk is used by the next connection, without a new storage",
          "[redis][tls][reload]") {
  rltest::TlsRedis server;
  rltest::TempDir dir;
  const std::string trusted = dir.file("trusted.crt");
  // At first the file holds the unrelated CA, which does not verify the server.
  std::filesystem::copy_file(rltest::tls_certs().file("other-ca.crt"), trusted);
  auto options = tls_options(server);
  options.tls.ca_file = trusted;
  rltest::FailureLog log;
  options.on_failure = log.callback();
  ratelimit::RedisStorage storage(options);
  ratelimit::ManualClock clock;
  TlsBucket bucket({3, ratelimit::per_second(1)}, storage, clock);

  const ratelimit::Decision refused = bucket.try_acquire("k");
  CHECK(refused.degraded);
  CHECK_FALSE(refused.allowed);
  REQUIRE(log.count(ratelimit::RedisFailureKind::connect) >= 1);

  // Replaced the way a deployment rotates it: written beside, then renamed over (atomic, so
  // a connection never reads half a file).
  const std::string fresh = dir.file("trusted.crt.new");
  std::filesystem::copy_file(rltest::tls_certs().file("ca.crt"), fresh);
  std::filesystem::rename(fresh, trusted);

  // After the breaker's back-off a probe opens a new connection, which reads the new file.
  // peek changes nothing, so the bucket is still untouched when Redis decides again.
  REQUIRE(rltest::poll_until([&] { return !bucket.peek("k").degraded; }, 20s));
  // Nothing was spent while refused: the first admission leaves 2 (see check_exact_over_tls).
  CHECK(bucket.try_acquire("k") == rltest::admitted(3, 2, 1s));
  CHECK(bucket.try_acquire("k") == rltest::admitted(3, 1, 2s));
}

namespace {

/// Remembers the TLS handshake time of each new connection a listener hears of.
struct TlsConnects : ratelimit::Listener {
  std::mutex mutex;
  std::vector<std::chrono::nanoseconds> tls, connect, ready;
  void on_connect(const ratelimit::ConnectEvent& e) override {
    const std::lock_guard lock(mutex);
    tls.push_back(e.tls_handshake);
    connect.push_back(e.connect);
    ready.push_back(e.ready);
  }
};

}  // namespace

TEST_CASE("A warm-up over TLS reports the TLS handshake apart from the TCP connect",
          "[redis][tls][cold_start]") {
  rltest::TlsRedis server;
  auto options = tls_options(server);
  ratelimit::RedisStorage storage(options);
  auto heard = std::make_shared<TlsConnects>();
  storage.attach_listener(heard);
  REQUIRE(storage.warm_up());
  {
    const std::lock_guard lock(heard->mutex);
    REQUIRE(heard->tls.size() == 1);
    // A handshake is at least one exchange of bytes: never zero; both parts lie in the whole.
    CHECK(heard->tls.front() > 0ns);
    CHECK(heard->connect.front() + heard->tls.front() <= heard->ready.front());
  }
  check_exact_over_tls(storage);
  const std::lock_guard lock(heard->mutex);
  CHECK(heard->tls.size() == 1);  // the warm connection decided: no second handshake
}
