// Listeners attached and detached by 8 threads while they decide (run under TSan):
// no decision is lost for a listener attached throughout, each short-lived listener hears at
// least the decision its thread made while it was attached, and none is freed while in use.

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <ratelimit/core/listener.hpp>
#include <ratelimit/ratelimit.hpp>

namespace listener_concurrency {

class Tally : public ratelimit::Listener {
 public:
  void on_decision(const ratelimit::DecisionEvent&) override {
    seen.fetch_add(1, std::memory_order_relaxed);
  }
  std::atomic<std::uint64_t> seen{0};
};

}  // namespace listener_concurrency

TEST_CASE("Listeners attached and detached under 8 threads never lose nor break a decision",
          "[monitor][listener][concurrency]") {
  using listener_concurrency::Tally;
  constexpr int threads = 8;
  constexpr int rounds = 2000;
  // Never denies within the test: 10^9 tokens, 8 x 2000 = 16,000 spent.
  ratelimit::TokenBucket<> limiter({1'000'000'000, ratelimit::per_second(1)});
  auto steady = std::make_shared<Tally>();
  limiter.attach_listener(steady);

  std::vector<std::uint64_t> own_seen(threads, 0);
  std::vector<int> admitted(threads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const std::string key = "k" + std::to_string(t % 2);
      for (int i = 0; i < rounds; ++i) {
        if (t % 2 == 0) {
          // Attach a fresh listener, decide once, detach it, drop it: the limiter keeps it
          // alive for the other threads' decisions that may still be reading it.
          auto mine = std::make_shared<Tally>();
          limiter.attach_listener(mine);
          admitted[t] += limiter.try_acquire(key).allowed ? 1 : 0;
          limiter.detach_listener(*mine);
          own_seen[t] += mine->seen.load() >= 1 ? 1 : 0;
        } else {
          if (i % 100 == 0) limiter.set_shadow_mode(i % 200 == 0);  // flags change too
          admitted[t] += limiter.try_acquire(key).allowed ? 1 : 0;
        }
      }
    });
  for (auto& th : pool) th.join();

  // Every decision was admitted (10^9 tokens) and heard by the listener attached throughout.
  for (int t = 0; t < threads; ++t) CHECK(admitted[t] == rounds);
  CHECK(steady->seen.load() == static_cast<std::uint64_t>(threads) * rounds);
  // Each short-lived listener heard its own thread's decision, made while it was attached.
  for (int t = 0; t < threads; t += 2) CHECK(own_seen[t] == static_cast<std::uint64_t>(rounds));
}
