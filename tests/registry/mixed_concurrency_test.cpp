// Atomicity belongs to the storage: a limiter and a rule set deciding the same counter
// from many threads admit exactly the limit, in process and on Redis. Before, rule sets took a
// process-wide lock table that limiters did not, and the docs said not to mix the two.
// Label `concurrent`: the test command also runs it under ThreadSanitizer.

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/rules.hpp>
#include <ratelimit/testing/manual_clock.hpp>

#include "support/backends.hpp"

using namespace std::chrono_literals;

TEMPLATE_LIST_TEST_CASE("A limiter and a rule set on one counter admit exactly the limit",
                        "[concurrent][rules][registry]", Backends) {
  // One rule: a token bucket of 200 per hour per api_key; the clock is frozen, so nothing
  // refills and exactly 200 units can ever be admitted for the key, whoever asks.
  constexpr std::int64_t limit = 200;
  const auto rules = ratelimit::Rules::from_string(R"(domain: mixed
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 200, algorithm: token_bucket}
)");
  ratelimit::ManualClock clock;
  clock.set(5000s);
  auto storage = TestType::make();
  ratelimit::RuleSet<typename TestType::Storage, ratelimit::ManualClock> set(rules, storage, clock);
  // The rule's counter for api_key=K is the limiter named rule.id deciding key match.key.
  const auto matches = rules.match({{"api_key", "K"}});
  REQUIRE(matches.size() == 1);
  REQUIRE(matches[0].tag == matches[0].key);
  ratelimit::TokenBucket<ratelimit::ManualClock, typename TestType::Storage> limiter(
      {limit, ratelimit::Rate{limit, std::chrono::hours{1}}}, storage, clock, rules.rules()[0].id);
  const std::string counter = matches[0].key;

  // 8 threads, half through the limiter and half through the rule set, 60 requests each: 480
  // asked for 200.
  std::atomic<std::int64_t> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 60; ++i) {
        const bool ok = t % 2 == 0 ? limiter.try_acquire(counter).allowed
                                   : set.decide({{"api_key", "K"}}).allowed;
        if (ok) admitted.fetch_add(1, std::memory_order_relaxed);
      }
    });
  for (auto& th : threads) th.join();
  CHECK(admitted.load() == limit);
  CHECK(limiter.peek(counter).remaining == 0);
  CHECK_FALSE(set.decide({{"api_key", "K"}}).allowed);
}
