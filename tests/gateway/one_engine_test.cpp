// One rule engine: the flat `RuleSet::decide(entries)` is the descriptor-list
// `RuleSet::decide(const RateLimitRequest&)` on the descriptors the flat matching lands on, so a
// rules file with shadow_mode, quota_mode or replaces decides a request alike through both.
// The fault these tests pin: the flat form used to enforce every matching limit, ignoring those
// three fields, and so denied requests the descriptor-list form admitted. Each scenario runs
// two rule sets on their own storages in lockstep (one per form); time only from a frozen
// ManualClock (no capacity comes back during a test).

#include <catch2/catch.hpp>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/rules.hpp>

#include "envoy_table.hpp"

using ratelimit::DescriptorEntry;
using ratelimit::ManualClock;
using ratelimit::RateLimitRequest;
using ratelimit::RateLimitResponse;
using ratelimit::Rules;
using ratelimit::RuleSetDecision;

namespace {

using envoy_table::desc;

using OneSet = ratelimit::RuleSet<ratelimit::InMemoryStorage, ManualClock>;

/// One rules file in two rule sets, one per form, each on its own storage.
struct BothForms {
  explicit BothForms(const std::string& yaml)
      : flat(Rules::from_string(yaml), {}, ManualClock{}),
        list(Rules::from_string(yaml), {}, ManualClock{}) {}

  /// Decides `entries` through the flat form and `request` (the descriptors Envoy would send
  /// for the same request) through the descriptor-list form; checks that both agree on the
  /// request and on the decision that speaks for it.
  RuleSetDecision decide(std::vector<DescriptorEntry> entries, const RateLimitRequest& request) {
    RuleSetDecision f = flat.decide(std::span<const DescriptorEntry>(entries));
    last = list.decide(request);
    CHECK(f.allowed == last->allowed);
    CHECK(f.decision() == last->decision());
    CHECK(f.headers() == last->headers());
    return f;
  }

  OneSet flat, list;
  std::optional<RateLimitResponse> last;
};

/// A descriptor's entries as "key=value|key=value", to compare.
std::string joined_entries(const ratelimit::RateLimitDescriptor& d) {
  std::string out;
  for (const DescriptorEntry& e : d.entries)
    out += (out.empty() ? "" : "|") + e.key + "=" + e.value;
  return out;
}

}  // namespace

TEST_CASE("A shadow-mode limit never denies a flat request, as in a descriptor-list one",
          "[rules][envoy][one_engine]") {
  BothForms sets(R"(domain: same
descriptors:
  - key: api_key
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2, name: trial}
  - key: path
    value: /a
    rate_limit: {unit: minute, requests_per_unit: 5, name: path}
)");
  const std::vector<DescriptorEntry> flat = {{"api_key", "K"}, {"path", "/a"}};
  const RateLimitRequest list{"same", {desc({{"api_key", "K"}}), desc({{"path", "/a"}})}, 0};
  // 1st and 2nd: both admit; trial 2 - 2 = 0 left, path 5 - 2 = 3.
  REQUIRE(sets.decide(flat, list).allowed);
  RuleSetDecision d = sets.decide(flat, list);
  REQUIRE(d.allowed);
  REQUIRE(d.outcomes.size() == 2);
  CHECK(d.outcomes[0].decision.remaining == 0);
  CHECK(d.outcomes[1].decision.remaining == 3);
  // 3rd: trial (the 3rd of 2) would deny, in shadow mode: admitted anyway (the flat form used
  // to deny here), and path spends: 3 - 1 = 2. The trial outcome says it would have denied.
  d = sets.decide(flat, list);
  CHECK(d.allowed);
  CHECK(d.outcomes[0].decision.allowed);
  CHECK(d.outcomes[0].decision.shadow_denied);
  CHECK(d.outcomes[1].decision.remaining == 2);
  // The shadow limit neither speaks for the request nor is advertised: path does (2 left).
  CHECK(d.decision().remaining == 2);
  CHECK(d.policies().size() == 1);
  CHECK(sets.last->shadow_denials == std::vector<std::size_t>{0});
}

TEST_CASE("Quota-mode limits deny a flat request only all together, as in a descriptor-list one",
          "[rules][envoy][one_engine]") {
  BothForms sets(R"(domain: same
descriptors:
  - key: api_key
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, name: q1}
  - key: remote_address
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2, name: q2}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 10, name: e}
)");
  const std::vector<DescriptorEntry> flat = {
      {"api_key", "K"}, {"remote_address", "R"}, {"path", "/p"}};
  const RateLimitRequest list{
      "same",
      {desc({{"api_key", "K"}}), desc({{"remote_address", "R"}}), desc({{"path", "/p"}})},
      0};
  // 1st: all admit: q1 1 - 1 = 0, q2 2 - 1 = 1, e 10 - 1 = 9.
  RuleSetDecision d = sets.decide(flat, list);
  REQUIRE(d.allowed);
  CHECK(d.outcomes[2].decision.remaining == 9);
  // 2nd: q1 over, q2 admits: admitted (the flat form used to deny here); q1 drops out and
  // spends nothing, q2 1 - 1 = 0, e 9 - 1 = 8.
  d = sets.decide(flat, list);
  CHECK(d.allowed);
  REQUIRE(d.outcomes.size() == 3);
  CHECK_FALSE(d.outcomes[0].decision.allowed);
  CHECK(d.outcomes[1].decision.remaining == 0);
  CHECK(d.outcomes[2].decision.remaining == 8);
  // 3rd: both quota limits over: denied, nothing spent (e's dry run still sees 8).
  d = sets.decide(flat, list);
  CHECK_FALSE(d.allowed);
  CHECK(d.outcomes[2].decision.remaining == 8);
}

TEST_CASE("A replaced limit is not decided for a flat request, as in a descriptor-list one",
          "[rules][envoy][one_engine]") {
  BothForms sets(R"(domain: same
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 1, name: general}
  - key: plan
    value: pro
    rate_limit: {unit: minute, requests_per_unit: 3, name: pro, replaces: [{name: general}]}
  - key: internal
    value: "yes"
    rate_limit: {unlimited: true, replaces: [{name: general}]}
)");
  // The flat request lands on general and pro; the descriptor list is what Envoy would send.
  const std::vector<DescriptorEntry> pro = {{"api_key", "K"}, {"plan", "pro"}};
  const RateLimitRequest pro_list{"same", {desc({{"api_key", "K"}}), desc({{"plan", "pro"}})}, 0};
  CHECK(sets.flat.rules().match(pro).size() == 2);
  // pro replaces general: 3 admitted (pro 3 - 3 = 0; general, 1 per minute, would have denied
  // the 2nd, as the flat form used to), then the 4th is denied by pro. Only pro is decided.
  for (int i = 0; i < 3; ++i) {
    const RuleSetDecision d = sets.decide(pro, pro_list);
    REQUIRE(d.allowed);
    REQUIRE(d.outcomes.size() == 1);
    CHECK(d.outcomes[0].rule->name == "pro");
    CHECK(d.outcomes[0].decision.remaining == 2 - i);
  }
  CHECK_FALSE(sets.decide(pro, pro_list).allowed);
  // An unlimited descriptor's `replaces` count too: nothing is decided, always admitted.
  const std::vector<DescriptorEntry> internal = {{"api_key", "K"}, {"internal", "yes"}};
  const RateLimitRequest internal_list{
      "same", {desc({{"api_key", "K"}}), desc({{"internal", "yes"}})}, 0};
  for (int i = 0; i < 3; ++i) {
    const RuleSetDecision d = sets.decide(internal, internal_list);
    REQUIRE(d.allowed);
    CHECK(d.outcomes.empty());
    CHECK(d.deciding == RuleSetDecision::none);
  }
  // general spent nothing so far: alone, its 1 per minute admits once (1 - 1 = 0), then denies.
  const std::vector<DescriptorEntry> key = {{"api_key", "K"}};
  const RateLimitRequest key_list{"same", {desc({{"api_key", "K"}})}, 0};
  const RuleSetDecision d = sets.decide(key, key_list);
  CHECK(d.allowed);
  CHECK(d.outcomes[0].decision.remaining == 0);
  CHECK_FALSE(sets.decide(key, key_list).allowed);
}

TEST_CASE("The flat request's descriptor list lands where the flat matching does",
          "[rules][envoy][one_engine][match]") {
  const Rules rules = Rules::from_string(R"(domain: same
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 10, name: per-key}
  - key: path
    value: /files/*
    descriptors:
      - key: api_key
        rate_limit: {unit: minute, requests_per_unit: 2, name: files}
  - key: internal
    value: "yes"
    rate_limit: {unlimited: true}
)");
  const std::vector<DescriptorEntry> request = {
      {"path", "/files/a"}, {"api_key", "K"}, {"internal", "yes"}, {"api_key", "ignored"}};
  // Per-key, files (path then api_key, the first api_key entry), and the unlimited one.
  const auto list = rules.descriptors_of(request);
  REQUIRE(list.size() == 3);
  CHECK(joined_entries(list[0]) == "api_key=K");
  CHECK(joined_entries(list[1]) == "path=/files/a|api_key=K");
  CHECK(joined_entries(list[2]) == "internal=yes");
  // Each lands on the rule, counter and tag the flat matching gives.
  const auto matches = rules.match(request);
  REQUIRE(matches.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto m = rules.lookup(list[i].entries);
    CHECK(m.rule == matches[i].rule);
    CHECK(m.key == matches[i].key);
    CHECK(m.tag == matches[i].tag);
  }
  CHECK(rules.lookup(list[2].entries).unlimited);
}

TEST_CASE("Listeners hear each limit once per request, through both forms and both calls",
          "[rules][envoy][one_engine][monitor]") {
  // The fault this pins: in process (a storage without `decide_all_async`) the non-blocking
  // descriptor-list call told the listeners twice, and the flat call, now its thin form,
  // would have too.
  struct Events : ratelimit::Listener {
    std::vector<std::string> heard;
    void on_decision(const ratelimit::DecisionEvent& e) override {
      heard.push_back(std::string(e.name) + " " + std::string(e.key) + " " +
                      std::to_string(e.cost) + (e.decision.allowed ? " allowed" : " limited"));
    }
  };
  OneSet set(Rules::from_string(R"(domain: same
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 10}
)"),
             {}, ManualClock{});
  auto events = std::make_shared<Events>();
  set.attach_listener(events, ratelimit::ListenerOptions{.with_keys = true});
  const std::vector<DescriptorEntry> flat = {{"api_key", "K"}};
  const RateLimitRequest list{"same", {desc({{"api_key", "K"}})}, 0};
  (void)set.decide(std::span<const DescriptorEntry>(flat));
  (void)set.decide(list);
  int answers = 0;
  set.decide_async(std::span<const DescriptorEntry>(flat), 2, [&](RuleSetDecision) { ++answers; });
  set.decide_async(list, [&](RateLimitResponse) { ++answers; });
  CHECK(answers == 2);
  // Four requests, one limit each: four events, the flat async one with its cost 2.
  CHECK(events->heard == std::vector<std::string>{"same.api_key api_key=K 1 allowed",
                                                  "same.api_key api_key=K 1 allowed",
                                                  "same.api_key api_key=K 2 allowed",
                                                  "same.api_key api_key=K 1 allowed"});
}
