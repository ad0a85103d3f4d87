// Envoy-compatible rules. The reference service's documented configurations matched as it
// documents (envoy_table.hpp, in process), every refusal with its error and line, several files
// merged by domain, hits addends, limit overrides, quota mode, and the flat matching beside the
// descriptor-list one (one_engine_test.cpp: both decided by one engine). Time only from ManualClock
// (frozen: no capacity comes back during a test).

#include <catch2/catch.hpp>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/rules.hpp>

#include "envoy_table.hpp"

using ratelimit::DescriptorStatus;
using ratelimit::DomainMerge;
using ratelimit::ManualClock;
using ratelimit::RateLimitDescriptor;
using ratelimit::RateLimitRequest;
using ratelimit::Rules;
using ratelimit::RulesConfig;
using ratelimit::RulesSource;
using EnvoySet = ratelimit::RuleSet<ratelimit::InMemoryStorage, ManualClock>;

namespace {

std::string refusal(const std::string& yaml) {
  try {
    (void)Rules::from_string(yaml, "rules.yaml");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

std::string config_refusal(std::vector<RulesSource> sources, DomainMerge merge) {
  try {
    (void)RulesConfig::from_strings(std::span<const RulesSource>(sources), merge);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

using envoy_table::desc;

}  // namespace

TEST_CASE("The reference service's documented configurations match as it documents, in process",
          "[rules][envoy]") {
  envoy_table::run_all([](Rules rules) {
    return std::make_unique<EnvoySet>(std::move(rules), ratelimit::InMemoryStorage{},
                                      ManualClock{});
  });
}

TEST_CASE("In process the non-blocking descriptor-list call decides the same table",
          "[rules][envoy][async]") {
  envoy_table::run_all([](Rules rules) {
    return std::make_unique<envoy_table::AsyncSet<EnvoySet>>(envoy_table::AsyncSet<EnvoySet>{
        std::make_unique<EnvoySet>(std::move(rules), ratelimit::InMemoryStorage{}, ManualClock{})});
  });
}

TEST_CASE("Every field of the reference format loads, with the extensions beside it",
          "[rules][envoy][parse]") {
  const Rules rules = Rules::from_string(R"(domain: full
client_keys: [user]
descriptors:
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    detailed_metric: true
    quota_mode: true
    shadow_mode: false
    metadata: {team: payments, tags: [a, b]}
    rate_limit:
      name: routes
      replaces: [{name: other}]
      unit: MINUTE
      requests_per_unit: 7
      algorithm: token_bucket
  - key: ldap
    rate_limit: {unlimited: true, requests_per_unit: 5, name: ldap, replaces: [{name: routes}]}
  - key: empty
    value: ""
)");
  REQUIRE(rules.rules().size() == 1);
  const auto& r = rules.rules()[0];
  CHECK(r.name == "routes");
  CHECK(r.given_name == "routes");
  CHECK(r.replaces == std::vector<std::string>{"other"});
  CHECK(r.rate == ratelimit::per_minute(7));
  CHECK(r.algorithm == ratelimit::Algorithm::token_bucket);
  CHECK(r.quota_mode);
  CHECK_FALSE(r.shadow_mode);
  CHECK(r.detailed_metric);
  CHECK(r.value_to_metric);
  CHECK(r.metadata == "{team: payments, tags: [a, b]}");
  CHECK(r.line == 4);
  CHECK(r.source == "<string>");
  REQUIRE(r.path.size() == 1);
  CHECK(r.path[0].wildcard);
  CHECK(r.path[0].shared);
  CHECK_FALSE(r.path[0].varies());
  // `value: ""` is no value, as in the reference: the key's catch-all (and exempt).
  CHECK(rules.lookup({{"empty", "x"}}).rule == nullptr);
  CHECK_FALSE(rules.lookup({{"empty", "x"}}).unlimited);
  const auto ldap = rules.lookup({{"ldap", "x"}});
  CHECK(ldap.unlimited);
  CHECK(ldap.replaces == std::vector<std::string>{"routes"});
  // `requests_per_unit` beside `unlimited: true` is ignored, as in the reference; an algorithm
  // (line 5) is refused.
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      algorithm: "
                "token_bucket\n      unlimited: true\n") ==
        "rules.yaml:5: rate_limit.unlimited: true takes no algorithm");
}

TEST_CASE("Every refusal names the file, the line and the problem", "[rules][envoy][errors]") {
  // Empty domain (line 1).
  CHECK(refusal("domain: \"\"\ndescriptors:\n  - key: a\n") ==
        "rules.yaml:1: domain must not be empty");
  // Empty key (line 3).
  CHECK(refusal("domain: d\ndescriptors:\n  - key: \"\"\n") ==
        "rules.yaml:3: key must not be empty");
  // Duplicate key and value on one level (lines 3 and 5), and a duplicate catch-all.
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    value: v\n  - key: a\n    value: v\n") ==
        "rules.yaml:5: duplicate descriptor key \"a\" value \"v\" (first at line 3)");
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n  - key: a\n") ==
        "rules.yaml:4: duplicate descriptor key \"a\" (first at line 3)");
  // A misspelled field (line 4), on a descriptor and in a rate limit.
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    shadow_mod: true\n") ==
        "rules.yaml:4: unknown field \"shadow_mod\" (expected one of: key, value, rate_limit, "
        "descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric, "
        "share_threshold, metadata)");
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      units: second\n") ==
        "rules.yaml:5: unknown field \"units\" (expected one of: unit, requests_per_unit, "
        "algorithm, name, unlimited, replaces, time_zone, first_day, block_duration)");
  CHECK(refusal("domain: d\ndomains: e\ndescriptors:\n  - key: a\n") ==
        "rules.yaml:2: unknown field \"domains\" (expected one of: domain, descriptors, "
        "client_keys)");
  // A key or value that is not text (lines 3 and 4).
  CHECK(refusal("domain: d\ndescriptors:\n  - key: {a: 1}\n") ==
        "rules.yaml:3: key must be a string, not a mapping");
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    value: [x, y]\n") ==
        "rules.yaml:4: value must be a string, not a list");
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    value: ~\n") ==
        "rules.yaml:4: value must be a string, not null");
  // A number YAML reads as floating point is refused, as by the reference; an integer or a
  // boolean reads as its text there and here, and a quoted number is text.
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    value: 1.5\n") ==
        "rules.yaml:4: value = 1.5: a number, not a string (quote it: \"1.5\")");
  CHECK(refusal("domain: d\ndescriptors:\n  - key: -2e3\n") ==
        "rules.yaml:3: key = -2e3: a number, not a string (quote it: \"-2e3\")");
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    value: \"1.5\"\n") == "(no error)");
  CHECK(refusal("domain: d\ndescriptors:\n  - key: status\n    value: 429\n  - key: on\n    "
                "value: true\n") == "(no error)");
  CHECK(refusal("domain: d\ndescriptors:\n  - key: v1.2.3\n  - key: \"1.\"\n") == "(no error)");
  // A list where a mapping belongs (line 3 or 4), and the reverse (line 2).
  CHECK(refusal("domain: d\ndescriptors:\n  - [key, a]\n") ==
        "rules.yaml:3: a descriptor must be a mapping with `key` (and `value`, `rate_limit`, "
        "`descriptors`), not a list");
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    rate_limit: [second, 5]\n") ==
        "rules.yaml:4: rate_limit must be a mapping with `unit` and `requests_per_unit`, not a "
        "list");
  CHECK(refusal("domain: d\ndescriptors:\n  key: a\n") ==
        "rules.yaml:3: descriptors must be a list");
  // An unknown unit (line 5).
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n"
                "      requests_per_unit: 1\n") ==
        "rules.yaml:5: rate_limit.unit = \"fortnight\": unknown unit (expected second, minute, "
        "hour, day, week, month or year)");
  // A unit the reference does not have, which only this library's calendar algorithms take
  // (an extension, docs/quota.md): refused for a rate, at the limit's descriptor (line 3).
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: week\n"
                "      requests_per_unit: 1\n") ==
        "rules.yaml:3: rate_limit.algorithm = \"sliding_counter\": takes no week or month unit, "
        "time_zone or first_day (extensions of calendar algorithms such as calendar_quota)");
  // `unlimited` with a unit (line 6, the unit's).
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n"
                "      unit: second\n") ==
        "rules.yaml:6: rate_limit.unlimited: true takes no unit");
  // `replaces` naming the limit itself, or nothing (line 7).
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: x\n"
                "      replaces:\n        - name: x\n      unit: second\n"
                "      requests_per_unit: 1\n") ==
        "rules.yaml:7: rate_limit.replaces names \"x\", the limit itself: a limit cannot "
        "replace itself");
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: x\n"
                "      replaces:\n        - name: \"\"\n      unit: second\n"
                "      requests_per_unit: 1\n") ==
        "rules.yaml:7: rate_limit.replaces: an entry names no limit (empty or missing `name`)");
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      replaces: y\n"
                "      unit: second\n      requests_per_unit: 1\n") ==
        "rules.yaml:5: rate_limit.replaces must be a list of {name: ...} mappings");
  // `share_threshold` without a wildcard (line 5).
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    value: files/\n"
                "    share_threshold: true\n") ==
        "rules.yaml:5: share_threshold: true needs a wildcard value (with `*`), but descriptor "
        "\"a\" has value \"files/\"");
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    share_threshold: true\n") ==
        "rules.yaml:4: share_threshold: true needs a wildcard value (with `*`), but descriptor "
        "\"a\" has no value");
  // A flag that is not a boolean (line 4).
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    shadow_mode: sometimes\n") ==
        "rules.yaml:4: shadow_mode = \"sometimes\": must be true or false");
  // Malformed YAML (line 5, where the parser gives up).
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second\n") ==
        "rules.yaml:5: invalid YAML: end of map flow not found");
  // metadata must be a mapping (line 4).
  CHECK(refusal("domain: d\ndescriptors:\n  - key: a\n    metadata: [1]\n") ==
        "rules.yaml:4: metadata must be a mapping");
}

TEST_CASE("Several files are grouped by domain; one domain in two files is refused or merged",
          "[rules][envoy][config]") {
  const std::vector<RulesSource> files = {
      {"a.yaml",
       "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
       "requests_per_unit: 1}\n"},
      {"b.yaml",
       "domain: e\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, "
       "requests_per_unit: 2}\n"},
      {"c.yaml",
       "# merged into d\ndomain: d\ndescriptors:\n  - key: c\n    rate_limit: {unit: "
       "second, requests_per_unit: 3}\n"},
  };
  CHECK(config_refusal(files, DomainMerge::refuse) ==
        "c.yaml:2: duplicate domain \"d\" (also in a.yaml:1)");
  const RulesConfig config =
      RulesConfig::from_strings(std::span<const RulesSource>(files), DomainMerge::merge);
  REQUIRE(config.domains().size() == 2);
  const Rules* d = config.find("d");
  REQUIRE(d != nullptr);
  REQUIRE(d->rules().size() == 2);
  CHECK(d->rules()[0].source == "a.yaml");
  CHECK(d->rules()[1].source == "c.yaml");
  CHECK(d->rules()[1].line == 4);
  CHECK(d->lookup({{"c", "x"}}).rule == &d->rules()[1]);
  CHECK(config.find("e")->rules()[0].rate.count == 2);
  CHECK(config.find("f") == nullptr);
  // A top-level descriptor in two merged files: both places named.
  CHECK(config_refusal({files[0], {"dup.yaml", "domain: d\ndescriptors:\n  - key: a\n"}},
                       DomainMerge::merge) ==
        "dup.yaml:3: duplicate descriptor key \"a\" (first at a.yaml:3)");
  // A refusal inside one of several files names that file.
  CHECK(config_refusal({files[0], {"bad.yaml", "domain: x\ndescriptors:\n  - key: \"\"\n"}},
                       DomainMerge::refuse) == "bad.yaml:3: key must not be empty");
}

TEST_CASE("hits_addend: the request's, a descriptor's own, and 0 checks without spending",
          "[rules][envoy]") {
  EnvoySet set(Rules::from_string(R"(domain: hits
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5}
)"),
               {}, ManualClock{});
  // The request's addend 3: 5 - 3 = 2 left; a second one (3 > 2) is denied.
  RateLimitRequest three{"hits", {desc({{"k", "a"}})}, 3};
  auto r = set.decide(three);
  CHECK(r.allowed);
  CHECK(r.statuses[0].hits == 3);
  CHECK(r.statuses[0].decision.remaining == 2);
  CHECK_FALSE(set.decide(three).allowed);
  // A descriptor's own addend overrides the request's: 2 of the 2 left, then 0.
  RateLimitRequest own{"hits", {desc({{"k", "a"}})}, 3};
  own.descriptors[0].hits_addend = 2;
  r = set.decide(own);
  CHECK(r.allowed);
  CHECK(r.statuses[0].decision.remaining == 0);
  // 0: a check that spends nothing and never denies (the counter is full: 0 left).
  own.descriptors[0].hits_addend = 0;
  r = set.decide(own);
  CHECK(r.allowed);
  CHECK(r.statuses[0].code == DescriptorStatus::Code::ok);
  CHECK(r.statuses[0].evaluated);
  // Two descriptors on one counter are decided once, hits summed: "b" has 5; 3 + 3 = 6 > 5.
  RateLimitRequest twice{"hits", {desc({{"k", "b"}}), desc({{"k", "b"}})}, 3};
  r = set.decide(twice);
  CHECK_FALSE(r.allowed);
  CHECK(r.statuses[0].code == DescriptorStatus::Code::over_limit);
  CHECK(r.statuses[1].code == DescriptorStatus::Code::over_limit);
  twice.hits_addend = 2;  // 2 + 2 = 4 <= 5: 1 left
  r = set.decide(twice);
  CHECK(r.allowed);
  CHECK(r.statuses[1].decision.remaining == 1);
  RateLimitRequest negative{"hits", {desc({{"k", "a"}})}, -1};
  CHECK_THROWS_AS(set.decide(negative), std::invalid_argument);
}

TEST_CASE("A descriptor's own limit replaces the rules' and counts per entries and unit",
          "[rules][envoy]") {
  EnvoySet set(Rules::from_string(R"(domain: over
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100, name: file-limit}
)"),
               {}, ManualClock{});
  RateLimitRequest req{"over", {desc({{"k", "a"}})}, 0};
  req.descriptors[0].limit = ratelimit::RateLimitOverride{2, ratelimit::RateUnit::hour};
  // 2 per hour instead of the file's 100 per minute: 2 admitted, the 3rd denied.
  CHECK(set.decide(req).allowed);
  const auto second = set.decide(req);
  CHECK(second.allowed);
  CHECK(second.statuses[0].decision.remaining == 0);  // 2 - 2
  const auto third = set.decide(req);
  CHECK_FALSE(third.allowed);
  CHECK(envoy_table::describe(third.statuses[0]) == "override over");
  // Entries the file does not know get the override too (the domain is known).
  req.descriptors[0].entries = {{"unknown", "x"}};
  CHECK(envoy_table::describe(set.decide(req).statuses[0]) == "override ok");
  // The file's limit is untouched: 100 - 1 = 99.
  CHECK(set.decide({"over", {desc({{"k", "a"}})}, 0}).statuses[0].decision.remaining == 99);
  // 0 per unit denies every request.
  req.descriptors[0].limit = ratelimit::RateLimitOverride{0, ratelimit::RateUnit::second};
  CHECK_FALSE(set.decide(req).allowed);
}

TEST_CASE("Quota-mode limits deny the request only when all of them deny", "[rules][envoy]") {
  EnvoySet set(Rules::from_string(R"(domain: quota
descriptors:
  - key: q1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: q2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: e
    rate_limit: {unit: minute, requests_per_unit: 10}
)"),
               {}, ManualClock{});
  const RateLimitRequest both{
      "quota", {desc({{"q1", "x"}}), desc({{"q2", "x"}}), desc({{"e", "x"}})}, 0};
  // 1st: all admit (q1 0 left, q2 1, e 9).
  auto r = set.decide(both);
  CHECK(r.allowed);
  // 2nd: q1 over, q2 admits: admitted, q1 dropped (spends nothing), q2 0 left, e 8.
  r = set.decide(both);
  CHECK(r.allowed);
  CHECK(r.statuses[0].code == DescriptorStatus::Code::over_limit);
  CHECK(r.statuses[1].decision.remaining == 0);
  CHECK(r.statuses[2].decision.remaining == 8);
  // 3rd: both quota limits over: denied, and nothing spent (e keeps 8).
  r = set.decide(both);
  CHECK_FALSE(r.allowed);
  CHECK(r.statuses[2].decision.remaining == 8);
}

TEST_CASE(
    "A shadow-mode limit spends only what an enforced one would, and never when another "
    "limit denies",
    "[rules][envoy]") {
  EnvoySet set(Rules::from_string(R"(domain: shadow
descriptors:
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: e
    rate_limit: {unit: minute, requests_per_unit: 1}
)"),
               {}, ManualClock{});
  const RateLimitRequest both{"shadow", {desc({{"s", "x"}}), desc({{"e", "x"}})}, 0};
  // 1st: both admit: s 3 - 1 = 2, e 0.
  auto r = set.decide(both);
  CHECK(r.allowed);
  CHECK(r.statuses[0].decision.remaining == 2);
  // 2nd: e denies: nothing spent, s keeps 2 (as an enforced limit would).
  r = set.decide(both);
  CHECK_FALSE(r.allowed);
  CHECK(r.shadow_denials.empty());
  const RateLimitRequest alone{"shadow", {desc({{"s", "x"}})}, 0};
  r = set.decide(alone);
  CHECK(r.statuses[0].decision.remaining == 1);  // 2 - 1
  r = set.decide(alone);
  CHECK(r.statuses[0].decision.remaining == 0);  // 1 - 1
  r = set.decide(alone);                         // the 4th of 3: would deny
  CHECK(r.allowed);
  CHECK(r.shadow_denials == std::vector<std::size_t>{0});
  CHECK(r.decision().allowed);
  CHECK(r.headers().empty());  // a shadow limit is not advertised
}

TEST_CASE("The flat decide keeps its matching beside the descriptor-list one",
          "[rules][envoy][match]") {
  // Flat: every limit whose descriptors the request carries. Descriptor list: only where each
  // descriptor's last entry lands.
  const Rules rules = Rules::from_string(R"(domain: both
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 10, name: per-key}
  - key: path
    value: /files/*
    descriptors:
      - key: api_key
        rate_limit: {unit: minute, requests_per_unit: 2, name: files}
  - key: path
    value: /files/public
)");
  std::vector<std::string> names;
  for (const auto& m : rules.match({{"api_key", "K"}, {"path", "/files/a"}}))
    names.push_back(m.rule->name);
  CHECK(names == std::vector<std::string>{"per-key", "files"});
  // The exempt exact value beats the wildcard in the flat matching too.
  names.clear();
  for (const auto& m : rules.match({{"api_key", "K"}, {"path", "/files/public"}}))
    names.push_back(m.rule->name);
  CHECK(names == std::vector<std::string>{"per-key"});
  // Descriptor list: (path, api_key) lands on "files" only.
  CHECK(rules.lookup({{"path", "/files/a"}, {"api_key", "K"}}).rule->name == "files");
  CHECK(rules.lookup({{"api_key", "K"}, {"path", "/files/a"}}).rule == nullptr);
  CHECK(rules.lookup({{"path", "/files/public"}}).rule == nullptr);
  // A wildcard without share_threshold counts per value: the counter keys differ.
  CHECK(rules.lookup({{"path", "/files/a"}, {"api_key", "K"}}).key !=
        rules.lookup({{"path", "/files/b"}, {"api_key", "K"}}).key);
}

TEST_CASE("README's rules example: the Envoy file and the descriptor-list call, as written",
          "[rules][envoy][readme]") {
  const std::vector<RulesSource> files = {{"config/messaging.yaml", R"(domain: messaging
descriptors:
  - key: message_type          # only 5 marketing messages a day per number
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number             # 100 messages a day per number
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: to_number             # an exempt number: no limit
    value: "2060000000"
)"}};
  ratelimit::RateLimitService<ratelimit::InMemoryStorage, ManualClock> service(
      RulesConfig::from_strings(std::span<const RulesSource>(files)), {}, ManualClock{});
  const std::string number = "2061111111";
  auto call = [&] {
    return service.should_rate_limit(
        {"messaging",
         {{{{"message_type", "marketing"}, {"to_number", number}}}, {{{"to_number", number}}}}});
  };
  // 5 marketing messages a day: the 6th is denied, and the number's 100 keep 100 - 5 = 95.
  for (int i = 0; i < 5; ++i) REQUIRE(call().allowed);
  const ratelimit::RateLimitResponse r = call();
  CHECK_FALSE(r.allowed);
  CHECK(r.decision().retry_after > std::chrono::nanoseconds{0});
  CHECK(r.statuses[1].decision.remaining == 95);
  // The same through the non-blocking call (in process: answered before it returns).
  std::optional<ratelimit::RateLimitResponse> answer;
  service.should_rate_limit_async({"messaging", {{{{"to_number", number}}}}},
                                  [&](ratelimit::RateLimitResponse a) { answer = std::move(a); });
  REQUIRE(answer);
  CHECK(answer->allowed);
  CHECK(answer->statuses[0].decision.remaining == 94);  // 100 - 5 - 1
  answer.reset();
  service.should_rate_limit_async({"nowhere", {{{{"to_number", number}}}}},
                                  [&](ratelimit::RateLimitResponse a) { answer = std::move(a); });
  REQUIRE(answer);
  CHECK(answer->allowed);
  CHECK_FALSE(answer->statuses[0].evaluated);
  // The exempt number is never limited.
  for (int i = 0; i < 200; ++i)
    REQUIRE(service.should_rate_limit({"messaging", {{{{"to_number", "2060000000"}}}}}).allowed);
}
