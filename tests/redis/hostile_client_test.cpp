// Faults a hostile review of the Redis client found, each kept as a test of its kind:
// - two storages whose completions block on each other's decisions (a deadlock of I/O threads);
// - a server announcing a 2^31-element array (hiredis allocates it on the header);
// - a host name slower to resolve than connect_timeout (every attempt threw its lookup away);
// - a flood of huge keys while Redis is stopped (memory bounded by max_in_flight_bytes);
// - a chain of non-blocking decisions, each started by the last one's completion, while Redis
//   is down (one stack frame per decision on the I/O thread, until it overflowed).
#include <dlfcn.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>

#include "listener.hpp"
#include "redis_admin.hpp"
#include "support/redis_backend.hpp"
#include "support/sanitized.hpp"

using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::ManualClock;
using ratelimit::RedisStorage;

// Host names starting with "slowdns" take `slow_dns_ms` to resolve (to 127.0.0.1). Defined in
// the executable, so it interposes libc's getaddrinfo for the library's calls.
static std::atomic<int> slow_dns_ms{0};
extern "C" int getaddrinfo(const char* node, const char* service, const struct addrinfo* hints,
                           struct addrinfo** res) {
  using Fn = int (*)(const char*, const char*, const struct addrinfo*, struct addrinfo**);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "getaddrinfo"));
  if (node != nullptr && std::strncmp(node, "slowdns", 7) == 0) {
    if (hints != nullptr && (hints->ai_flags & AI_NUMERICHOST) != 0) return EAI_NONAME;
    std::this_thread::sleep_for(std::chrono::milliseconds(slow_dns_ms.load()));
    return real("127.0.0.1", service, hints, res);
  }
  return real(node, service, hints, res);
}

namespace {
using Bucket = ratelimit::TokenBucket<ManualClock, RedisStorage>;
using Clk = std::chrono::steady_clock;

template <class F>
bool eventually(F done, std::chrono::milliseconds limit) {
  const auto until = Clk::now() + limit;
  while (!done()) {
    if (Clk::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}
double ms_since(Clk::time_point t) {
  return std::chrono::duration<double, std::milli>(Clk::now() - t).count();
}
long rss_kb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return 0;
}

/// What `n` async decisions (a bucket of 10 tokens, cost 1, on `o`) on distinct keys of
/// `key_size` bytes got from a Redis of the test's own, stopped while they were submitted and
/// resumed after: how many were admitted and degraded once all completed, how many the byte
/// budget refused, and how much resident memory grew while they were in flight.
struct Flood {
  int admitted = 0;
  int degraded = 0;
  std::uint64_t overloaded = 0;
  long grown_kb = 0;
};
Flood flood_stopped_redis(ratelimit::RedisOptions o, std::size_t key_size, int n) {
  rltest::ThrowawayRedis server;
  o.port = server.endpoint().port;
  o.command_timeout = 30s;
  RedisStorage storage(o);
  ManualClock clock;
  Bucket tb({10, ratelimit::per_second(1)}, storage, clock);
  REQUIRE_FALSE(tb.try_acquire("warm").degraded);
  server.pause();
  std::atomic<int> done{0}, admitted{0}, degraded{0};
  const long before = rss_kb();
  std::string key(key_size, 'x');
  for (int i = 0; i < n; ++i) {
    key[0] = static_cast<char>('a' + i % 26);
    key[1] = static_cast<char>('a' + i / 26);
    tb.try_acquire_async(key, 1, [&](Decision d) {
      admitted += d.allowed ? 1 : 0;
      degraded += d.degraded ? 1 : 0;
      ++done;
    });
  }
  Flood f;
  f.grown_kb = rss_kb() - before;
  f.overloaded = storage.stats().overloaded;
  server.resume();
  REQUIRE(eventually([&] { return done.load() == n; }, 60s));
  f.admitted = admitted.load();
  f.degraded = degraded.load();
  return f;
}
}  // namespace

TEST_CASE(
    "Completions of two storages that each make a blocking decision on the other never deadlock",
    "[redis][hostile_client][deadlock]") {
  // completion.hpp only forbids blocking on a decision of the *same* storage; a completion of
  // storage A deciding on storage B is allowed. If B's completions do the same on A, both I/O
  // threads wait on each other forever: no deadline is kept for any decision of either storage.
  RedisStorage a(rltest::test_redis_options("dlA")), b(rltest::test_redis_options("dlB"));
  ManualClock clock;
  Bucket la({1'000'000, ratelimit::per_hour(1'000'000)}, a, clock);
  Bucket lb({1'000'000, ratelimit::per_hour(1'000'000)}, b, clock);
  std::atomic<int> done{0};
  constexpr int n = 500;
  std::thread ta([&] {
    for (int i = 0; i < n; ++i)
      la.try_acquire_async("k", 1, [&](Decision) {
        (void)lb.try_acquire("k");
        ++done;
      });
  });
  std::thread tb([&] {
    for (int i = 0; i < n; ++i)
      lb.try_acquire_async("k", 1, [&](Decision) {
        (void)la.try_acquire("k");
        ++done;
      });
  });
  ta.join();
  tb.join();
  const bool all = eventually([&] { return done.load() == 2 * n; }, 10s);
  INFO("completed " << done.load() << " of " << 2 * n);
  CHECK(all);
  if (!all) std::_Exit(1);  // the I/O threads are wedged: nothing can be torn down
}

TEST_CASE("A server answering a 2^31-element array header does not stall the I/O thread",
          "[redis][hostile_client][hostile]") {
  // hiredis 0.14 callocs the whole element array on the header and frees it element by element:
  // ~18 s of freeReplyObject on the I/O thread when the connection is dropped; every other
  // decision waits meanwhile.
  rltest::Listener server([](int c, const std::atomic<bool>& stopping) {
    char buf[65536];
    bool first = true;
    while (!stopping) {
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      if (::read(c, buf, sizeof buf) <= 0) return;
      if (first) {
        const char hdr[] = "*2147483647\r\n";
        (void)!::send(c, hdr, sizeof hdr - 1, MSG_NOSIGNAL);  // the client may have gone
        first = false;
      }
    }
  });
  auto o = rltest::test_redis_options("bighdr");
  o.port = server.port();
  o.command_timeout = 100ms;
  o.breaker_backoff = 1ms;
  o.breaker_max_backoff = 1ms;
  RedisStorage storage(o);
  ManualClock clock;
  Bucket tb({10, ratelimit::per_second(1)}, storage, clock);
  double worst = 0;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clk::now();
    auto f = tb.try_acquire_async("k" + std::to_string(i));
    REQUIRE(f.wait_for(60s) == std::future_status::ready);
    worst = std::max(worst, ms_since(t0));
    CHECK(f.get().degraded);
    std::this_thread::sleep_for(50ms);
  }
  INFO("worst decision " << worst << " ms with a 100 ms command_timeout");
  CHECK(worst < 150);
  server.stop();
}

TEST_CASE("A host name slower to resolve than connect_timeout still reaches a healthy Redis",
          "[redis][hostile_client][dns]") {
  // Each connection attempt starts a new lookup and gives up at connect_timeout (200 ms); a
  // lookup that takes 250 ms is thrown away every time, so the storage never connects.
  const auto& e = rltest::redis_endpoint();
  auto o = rltest::test_redis_options("slowdns");
  o.host = "slowdns.test";
  o.port = e.port;
  o.connect_timeout = 200ms;  // the defaults
  o.command_timeout = 100ms;
  o.breaker_backoff = 10ms;
  slow_dns_ms = 250;
  RedisStorage storage(o);
  ManualClock clock;
  Bucket tb({1000, ratelimit::per_second(1000)}, storage, clock);
  int redis_decisions = 0;
  const auto t0 = Clk::now();
  while (ms_since(t0) < 3000) {
    redis_decisions += tb.try_acquire("k").degraded ? 0 : 1;
    std::this_thread::sleep_for(5ms);
  }
  INFO("decisions made by Redis in 3 s: " << redis_decisions << "; failures "
                                          << storage.stats().failures);
  CHECK(redis_decisions > 0);
  slow_dns_ms = 0;
}

TEST_CASE("Decisions in flight hold at most max_in_flight_bytes, whatever their keys",
          "[redis][hostile_client][memory]") {
  // A key over 256 bytes goes to Redis as its digest; the local fallback still needs the key
  // itself, so with it each decision in flight holds its 1 MiB key once: 300 keys of 1 MiB
  // against a stopped Redis would hold some 300 MiB. With max_in_flight_bytes = 64 MiB, those
  // past it are decided at once (overloaded), by the fallback.
  auto o = rltest::test_redis_options("mem");
  o.max_in_flight_bytes = std::size_t{64} << 20;
  o.failure_policy = ratelimit::FailurePolicy::local_fallback;
  const Flood f = flood_stopped_redis(o, std::size_t{1} << 20, 300);
  INFO("resident memory grew by " << f.grown_kb / 1024 << " MiB; " << f.overloaded
                                  << " decisions refused by the byte budget");
  // About 1 MiB counted per decision: some 64 fit in 64 MiB, the other ~236 are refused.
  CHECK(f.overloaded > 200u);
  // AddressSanitizer keeps freed memory in quarantine: there RSS says nothing.
  if constexpr (!rltest::address_sanitized)
    CHECK(f.grown_kb < 2 * 64 * 1024);  // the budget, with room for the allocator's slack
}

TEST_CASE("Without a local fallback a long key is not kept in flight: none passes the budget",
          "[redis][hostile_client][memory]") {
  // A tester's case: under fail_open, keys over a third of max_in_flight_bytes were never sent
  // and so never limited. Now a decision keeps only the key's digest while in flight: 300
  // decisions on distinct 2 MiB keys (600 MiB of keys) against a stopped Redis fit in a 1 MiB
  // budget (about 3 x 100 bytes each), none refused, and each is decided by Redis once it
  // resumes: 10 tokens per key, so every one of the 300 is admitted, none degraded.
  auto o = rltest::test_redis_options("longkeys");
  o.max_in_flight_bytes = std::size_t{1} << 20;
  o.failure_policy = ratelimit::FailurePolicy::fail_open;
  const Flood f = flood_stopped_redis(o, std::size_t{2} << 20, 300);
  CHECK(f.overloaded == 0u);
  CHECK(f.degraded == 0);
  CHECK(f.admitted == 300);
}

TEST_CASE("A sequential non-blocking loop while Redis is down does not overflow the stack",
          "[redis][hostile_client][recursion]") {
  // Each completion starts the next decision. With the breaker open the next completion runs
  // inline, inside the previous one: one stack frame chain per decision, on the I/O thread.
  auto o = rltest::test_redis_options("chain");
  o.port = 1;  // refused
  RedisStorage storage(o);
  ManualClock clock;
  Bucket tb({10, ratelimit::per_second(1)}, storage, clock);
  struct Chain {
    Bucket& tb;
    int left;
    std::promise<void> finished;
    void next() {
      if (left-- == 0) return finished.set_value();
      tb.try_acquire_async("k", 1, [this](Decision) { next(); });
    }
  } chain{tb, 20'000, {}};
  auto f = chain.finished.get_future();
  chain.next();
  CHECK(f.wait_for(20s) == std::future_status::ready);
}
