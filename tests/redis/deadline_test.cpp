// Issue 11: one deadline bounds a whole Redis round trip, not each socket call. A server that
// trickles its replies one byte per 30 ms, one that accepts and never answers, and a large
// request that the server never reads: every decision is degraded by its deadline (the command
// timeout) plus a stated margin, where hiredis's per-read timeouts let them run for seconds.
// Real sockets on loopback: a trickling proxy in front of the test Redis, and a black hole.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/manual_clock.hpp>
#include <ratelimit/redis.hpp>
#include <ratelimit/token_bucket.hpp>

#include "support/redis_backend.hpp"

using namespace std::chrono_literals;

namespace {

/// A loopback listener on an ephemeral port. Each accepted connection is handed to `serve` on
/// its own thread; stop() shuts every socket down and joins the threads.
class Listener {
 public:
  template <class Serve>
  explicit Listener(Serve serve) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd_, 16) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this, serve] {
      for (;;) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 20) <= 0) {
          if (stopping_) return;
          continue;
        }
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        const std::lock_guard lock(mutex_);
        sockets_.push_back(c);
        workers_.emplace_back([this, serve, c] { serve(c, stopping_); });
      }
    });
  }
  ~Listener() { stop(); }
  int port() const { return port_; }
  /// Sockets the workers opened themselves (the proxy's upstream), closed by stop() too.
  void adopt(int fd) {
    const std::lock_guard lock(mutex_);
    sockets_.push_back(fd);
  }
  void stop() {
    if (stopping_.exchange(true)) return;
    acceptor_.join();
    std::vector<std::thread> workers;
    {
      const std::lock_guard lock(mutex_);
      for (const int s : sockets_) ::shutdown(s, SHUT_RDWR);
      workers.swap(workers_);
    }
    for (auto& w : workers) w.join();
    for (const int s : sockets_) ::close(s);
    ::close(fd_);
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mutex_;
  std::vector<int> sockets_;
  std::vector<std::thread> workers_;
};

int connect_to(const rltest::RedisEndpoint& e) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(e.port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(s);
    return -1;
  }
  return s;
}

/// Options for a server at `port` that will not answer in time: a 100 ms deadline, fail
/// closed, and the shortest breaker back-off (1 ms, waited out between decisions).
ratelimit::RedisOptions stalled_options(int port) {
  auto o = rltest::test_redis_options("deadline");
  o.port = port;
  o.command_timeout = 100ms;
  o.connect_timeout = 100ms;
  o.breaker_backoff = 1ms;
  o.breaker_max_backoff = 1ms;
  o.failure_policy = ratelimit::FailurePolicy::fail_closed;
  return o;
}

/// The margin a decision may run past its deadline here: poll's whole-ms rounding (1 ms), the
/// retry's second wait being cut to what is left, and scheduling on a loaded 2-core machine
/// running sanitizer builds. The overshoot measured is printed; it was a few ms when quiet.
constexpr auto margin = 150ms;

/// Runs `decide` `n` times; returns the longest call. Between calls it waits out the breaker's
/// 1 ms back-off, so that every decision really waits on the server.
template <class F>
std::chrono::nanoseconds longest_of(int n, F decide) {
  std::chrono::nanoseconds worst{0};
  for (int i = 0; i < n; ++i) {
    std::this_thread::sleep_for(2ms);
    const auto t0 = std::chrono::steady_clock::now();
    decide(i);
    worst = std::max<std::chrono::nanoseconds>(worst, std::chrono::steady_clock::now() - t0);
  }
  return worst;
}

}  // namespace

TEST_CASE("A Redis that trickles its replies one byte per 30 ms is cut off at the deadline",
          "[redis][deadline]") {
  const rltest::RedisEndpoint upstream = rltest::redis_endpoint();
  Listener* self = nullptr;
  Listener proxy([&self, upstream](int client, const std::atomic<bool>& stopping) {
    const int server = connect_to(upstream);
    if (server < 0) return;
    self->adopt(server);
    char buf[4096];
    pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
    while (!stopping) {
      if (::poll(p, 2, 20) <= 0) continue;
      if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {  // requests pass at once
        const auto n = ::read(client, buf, sizeof buf);
        if (n <= 0 || ::write(server, buf, static_cast<std::size_t>(n)) != n) return;
      }
      if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {  // replies: one byte, then 30 ms
        if (::read(server, buf, 1) != 1 || ::write(client, buf, 1) != 1) return;
        std::this_thread::sleep_for(30ms);
      }
    }
  });
  self = &proxy;
  ratelimit::RedisStorage storage(stalled_options(proxy.port()));
  ratelimit::ManualClock clock;
  ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::RedisStorage> tb(
      {10, ratelimit::per_second(1)}, storage, clock);
  std::int64_t degraded = 0;
  const auto worst = longest_of(10, [&](int i) {
    const auto d = tb.try_acquire("k" + std::to_string(i));
    degraded += d.degraded ? 1 : 0;
  });
  // A reply of some 20 bytes takes about 600 ms to trickle through: each decision gives up at
  // its 100 ms deadline instead, fail closed.
  CHECK(degraded == 10);
  CHECK(worst < 100ms + margin);
  const double worst_ms = std::chrono::duration<double, std::milli>(worst).count();
  WARN("trickle: longest decision " << worst_ms << " ms for a 100 ms deadline");
  proxy.stop();
}

TEST_CASE(
    "A server that accepts and never answers, even a 4 MiB request, is cut off at the "
    "deadline",
    "[redis][deadline]") {
  Listener hole([](int, const std::atomic<bool>& stopping) {
    while (!stopping) std::this_thread::sleep_for(10ms);  // never reads, never writes
  });
  ratelimit::RedisStorage storage(stalled_options(hole.port()));
  ratelimit::ManualClock clock;
  ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::RedisStorage> tb(
      {10, ratelimit::per_second(1)}, storage, clock);
  const std::string huge(4 << 20, 'x');  // fills the socket buffers: the write itself waits
  std::int64_t degraded = 0;
  const auto worst = longest_of(6, [&](int i) {
    const auto d = tb.try_acquire(i % 2 == 0 ? "small" + std::to_string(i) : huge);
    degraded += d.degraded ? 1 : 0;
  });
  CHECK(degraded == 6);
  CHECK(worst < 100ms + margin);
  const double worst_ms = std::chrono::duration<double, std::milli>(worst).count();
  WARN("black hole: longest decision " << worst_ms << " ms for a 100 ms deadline");
  hole.stop();
}

TEST_CASE("A decision that spends its own budget before reaching Redis does not open the breaker",
          "[redis][deadline][breaker]") {
  // One client's 8 MiB key of '}' (each byte escaped to 3) takes far more than a 1 ms budget to
  // build: that decision is degraded, but the node did nothing wrong, so other clients' keys
  // must still go to Redis (the breaker covers the whole node).
  auto o = rltest::test_redis_options("budget");
  o.command_timeout = 1ms;
  o.failure_policy = ratelimit::FailurePolicy::fail_open;
  std::vector<ratelimit::RedisFailure> seen;
  o.on_failure = [&seen](const ratelimit::RedisFailure& f) { seen.push_back(f); };
  ratelimit::RedisStorage storage(o);
  ratelimit::ManualClock clock;
  ratelimit::TokenBucket<ratelimit::ManualClock, ratelimit::RedisStorage> tb(
      {5, ratelimit::per_minute(5)}, storage, clock);
  const auto d = tb.try_acquire(std::string(8 << 20, '}'));
  CHECK(d.degraded);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].kind == ratelimit::RedisFailureKind::timeout);
  CHECK_FALSE(storage.stats().circuit_open);
}
