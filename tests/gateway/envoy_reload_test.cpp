// Swapping a RateLimitService's configuration while serving. Under 8 threads of
// traffic no request is decided partly under the old rules and partly under the new; counters
// of limits whose path and unit did not change carry over. Labelled `concurrent` (it also runs
// under ThreadSanitizer). Time only from ManualClock.

#include <catch2/catch.hpp>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/rules.hpp>

#include "envoy_table.hpp"

using ratelimit::ManualClock;
using ratelimit::RateLimitDescriptor;
using ratelimit::RateLimitRequest;
using ratelimit::RulesConfig;
using ratelimit::RulesSource;
using Service = ratelimit::RateLimitService<ratelimit::InMemoryStorage, ManualClock>;

namespace {

RulesConfig config_of(const std::string& yaml) {
  const std::vector<RulesSource> sources = {{"reload.yaml", yaml}};
  return RulesConfig::from_strings(std::span<const RulesSource>(sources));
}

// Two generations of one domain: every limit is named after its generation ("a-" or "b-"),
// and the limits are far above what the test sends, so that every request is admitted.
std::string generation_yaml(const std::string& g) {
  return "domain: mix\ndescriptors:\n"
         "  - key: x\n    rate_limit: {unit: second, requests_per_unit: 1000000000, name: " +
         g + "-x}\n" +
         "  - key: y\n    rate_limit: {unit: minute, requests_per_unit: 1000000000, name: " + g +
         "-y}\n";
}

using envoy_table::desc;

}  // namespace

TEST_CASE("Reloading under 8 threads of traffic: every request sees the old rules or the new",
          "[rules][envoy][reload][concurrent]") {
  Service service(config_of(generation_yaml("a")), {}, ManualClock{});
  const RulesConfig a = config_of(generation_yaml("a")), b = config_of(generation_yaml("b"));
  // The workers keep sending until the reloader is done (and at least `per_thread` each), so
  // every reload happens under traffic.
  constexpr int threads = 8, per_thread = 200, reloads = 200;
  std::atomic<bool> stop{false};
  std::atomic<int> mixed{0}, decided{0}, seen_a{0}, seen_b{0}, denied{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const RateLimitRequest req{
          "mix", {desc({{"x", std::to_string(t)}}), desc({{"y", std::to_string(t)}})}, 0};
      for (int i = 0; i < per_thread || !stop; ++i) {
        const auto r = service.should_rate_limit(req);
        if (!r.allowed) ++denied;
        const std::string first = r.statuses[0].rule->name, second = r.statuses[1].rule->name;
        // Both limits from one generation: "a-x" with "a-y", or "b-x" with "b-y".
        if (first.substr(0, 2) != second.substr(0, 2)) ++mixed;
        ++(first[0] == 'a' ? seen_a : seen_b);
        ++decided;
      }
    });
  std::thread reloader([&] {
    for (int i = 0; i < reloads; ++i) service.reload(i % 2 == 0 ? b : a);
    stop = true;
  });
  reloader.join();
  for (auto& th : pool) th.join();
  CHECK(decided >= threads * per_thread);
  CHECK(mixed == 0);
  CHECK(denied == 0);
  CHECK(seen_a + seen_b == decided);
  CHECK(service.generation() == 1 + reloads);
}

TEST_CASE("A reload keeps the counters of limits whose path and unit did not change",
          "[rules][envoy][reload]") {
  ManualClock clock;
  Service service(config_of(R"(domain: keep
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5, name: old-name}
  - key: gone
    rate_limit: {unit: minute, requests_per_unit: 5}
)"),
                  {}, clock);
  const RateLimitRequest req{"keep", {desc({{"k", "v"}})}, 3};
  CHECK(service.should_rate_limit(req).statuses[0].decision.remaining == 2);  // 5 - 3
  // Renamed, another limit added: same path, same unit: the count carries over, 2 - 1 = 1.
  CHECK(service.reload(config_of(R"(domain: keep
descriptors:
  - key: added
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5, name: new-name}
)")) == 2);
  const RateLimitRequest one{"keep", {desc({{"k", "v"}})}, 0};
  auto r = service.should_rate_limit(one);
  CHECK(r.statuses[0].rule->name == "new-name");
  CHECK(r.statuses[0].decision.remaining == 1);
  // A higher rate on the same counter: 3 + 1 spent of 10: 10 - 4 - 1 = 5.
  service.reload(config_of(R"(domain: keep
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
)"));
  CHECK(service.should_rate_limit(one).statuses[0].decision.remaining == 5);
  // Another unit: another counter, fresh: 5 - 1 = 4.
  service.reload(config_of(R"(domain: keep
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 5}
)"));
  CHECK(service.should_rate_limit(one).statuses[0].decision.remaining == 4);
  // A domain the configuration no longer names: no limit.
  CHECK_FALSE(service.should_rate_limit({"other", {desc({{"k", "v"}})}, 0}).statuses[0].evaluated);
  CHECK(service.config()->find("keep") != nullptr);
  CHECK(service.generation() == 4);
}
