// The registry's promise: an algorithm is added by its own files plus one registry
// line, with no dispatch site edited. The test-only AnchoredWindowModel (support/anchored_
// window.hpp, support/lua/anchored_window.lua) is such an algorithm: here it runs as a limiter
// on every storage of `Backends`, as the algorithm of a rules file, and in a rule set, through
// exactly the library code paths the five built-in algorithms use.

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <tuple>

#include <ratelimit/core/limiter.hpp>
#include <ratelimit/rules.hpp>
#include <ratelimit/testing/manual_clock.hpp>

#include "support/anchored_window.hpp"
#include "support/backends.hpp"

using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::ManualClock;
using rltest::AnchoredWindowModel;

namespace {

template <class S>
using Anchored = ratelimit::BasicLimiter<AnchoredWindowModel, ManualClock, S>;

// Both limits are per client (each has the api_key catch-all), so a request's counters share
// the client's tag: one Redis Cluster slot.
constexpr const char* anchored_rules = R"(domain: sixth
descriptors:
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: anchored_window}
  - key: path
    value: /login
    descriptors:
      - key: api_key
        rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_log}
)";

}  // namespace

TEST_CASE("The registry lists the library's algorithms and takes one more by one line",
          "[registry]") {
  // The library's list is written once, in algorithms/registry.hpp: this test reads it.
  CHECK(rltest::TestAlgorithms::size == ratelimit::Algorithms::size + 1);
  CHECK(rltest::TestAlgorithms::contains<AnchoredWindowModel>);
  CHECK_FALSE(ratelimit::Algorithms::contains<AnchoredWindowModel>);
  // `with` appends: the library's names in their order, then the test's.
  CHECK(rltest::TestAlgorithms::names() == ratelimit::Algorithms::names() + ", anchored_window");
  int visited = 0;
  CHECK(rltest::TestAlgorithms::visit("anchored_window", [&]<class M>() {
    visited += std::is_same_v<M, AnchoredWindowModel> ? 1 : 100;
  }));
  CHECK(visited == 1);
  CHECK_FALSE(rltest::TestAlgorithms::visit("gcra", [&]<class>() { ++visited; }));
  CHECK(visited == 1);
}

TEST_CASE("A rules file may name the sixth algorithm only with the registry that lists it",
          "[registry][rules]") {
  CHECK_THROWS_WITH(ratelimit::Rules::from_string(anchored_rules, "r.yaml"),
                    "r.yaml:4: rate_limit.algorithm = \"anchored_window\": unknown algorithm "
                    "(expected one of: " +
                        ratelimit::Algorithms::names() + ")");
  const auto rules = ratelimit::Rules::from_string<rltest::TestAlgorithms>(anchored_rules);
  REQUIRE(rules.rules().size() == 2);
  CHECK(rules.rules()[0].algorithm == ratelimit::Algorithm{AnchoredWindowModel::name});
  // A RuleSet whose registry lacks the algorithm refuses the rules, naming the rule.
  CHECK_THROWS_AS(ratelimit::RuleSet<ratelimit::InMemoryStorage>(rules), std::invalid_argument);
}

TEMPLATE_LIST_TEST_CASE("The sixth algorithm decides by its definition on every storage",
                        "[registry][anchored_window]", Backends) {
  // N = 3 per window of W = 1 s anchored at the first admitted request.
  ManualClock clock;
  clock.set(10s);
  Anchored<typename TestType::Storage> limiter(AnchoredWindowModel::from_rate({3, 1s}),
                                               TestType::make(), clock, "sixth");
  const std::string key = std::string("client\0x", 8);
  // The window opens at 10 s with the first request: remaining 3 - 1 = 2, reset at 11 s.
  Decision d = limiter.try_acquire(key);
  CHECK(d.allowed);
  CHECK(d.remaining == 2);
  CHECK(d.reset_after == 1s);
  clock.advance(400ms);
  // Cost 2 at 10.4 s: 1 + 2 = 3 <= 3, remaining 0; the window still ends at 11 s: 600 ms.
  d = limiter.try_acquire(key, 2);
  CHECK(d.allowed);
  CHECK(d.remaining == 0);
  CHECK(d.reset_after == 600ms);
  // Full: denied until 11 s, 600 ms away; the denial changes nothing (peek agrees).
  d = limiter.try_acquire(key);
  CHECK_FALSE(d.allowed);
  CHECK(d.retry_after == 600ms);
  CHECK(limiter.peek(key).remaining == 0);
  // A cost above N can never pass.
  CHECK(limiter.try_acquire(key, 4).retry_after == Decision::never);
  // At 11.2 s the window has ended; the next window is anchored at 11.2 s, not at 11 s.
  clock.advance(800ms);
  d = limiter.try_acquire(key, 3);
  CHECK(d.allowed);
  CHECK(d.reset_after == 1s);
  clock.advance(900ms);  // 12.1 s: still in the window that ends at 12.2 s
  CHECK(limiter.try_acquire(key).retry_after == 100ms);
  // Another key is untouched; reset frees this one.
  CHECK(limiter.try_acquire("other").remaining == 2);
  limiter.reset(key);
  CHECK(limiter.try_acquire(key).remaining == 2);
}

TEMPLATE_LIST_TEST_CASE("A rule set runs the sixth algorithm all or nothing on every storage",
                        "[registry][rules][anchored_window]", Backends) {
  ManualClock clock;
  clock.set(1000s);
  ratelimit::RuleSet<typename TestType::Storage, ManualClock, rltest::TestAlgorithms> set(
      ratelimit::Rules::from_string<rltest::TestAlgorithms>(anchored_rules), TestType::make(),
      clock);
  // Each request matches api_key (anchored window, 3 per s) and path=/login|api_key (sliding
  // log, 5 per minute), both counted per client.
  const auto login = [&](const char* key) {
    return set.decide({{"api_key", key}, {"path", "/login"}});
  };
  // 3 logins pass; the 4th is denied by the anchored window, so the log spends nothing.
  for (int i = 0; i < 3; ++i) REQUIRE(login("K"));
  const auto denied = login("K");
  CHECK_FALSE(denied.allowed);
  REQUIRE(denied.outcomes.size() == 2);
  CHECK(denied.outcomes[0].decision.retry_after == 1s);   // the window opened at 1000 s
  CHECK(denied.outcomes[1].decision.remaining == 5 - 3);  // the log: only the 3 admitted
  // At 1001 s a new anchored window opens; 2 more logins fill the log (3 + 2 = 5 per minute).
  clock.advance(1s);
  REQUIRE(login("K"));
  REQUIRE(login("K"));
  // The next is denied by the log while the anchored window had room (2 of 3 used): the
  // window spends nothing either, and another client is untouched.
  const auto by_log = login("K");
  CHECK_FALSE(by_log.allowed);
  CHECK(by_log.outcomes[0].decision.remaining == 3 - 2);
  CHECK(by_log.outcomes[1].decision.remaining == 0);
  CHECK(login("L"));
}
