#pragma once
// The reference service's documented configurations (envoyproxy/ratelimit README, "Examples" 1
// to 11 and "Descriptor list definition"), each with requests and what must come of them:
// the limit each descriptor lands on and its verdict, and whether the request is admitted.
// Written once, run in process (envoy_rules_test.cpp) and on Redis (envoy_rules_redis_test.cpp).
//
// Every limit here is a sliding counter (the default) and the clock never moves, so a limit of
// N per unit admits exactly N hits and reports remaining = N - hits spent.

#include <catch2/catch.hpp>

#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ratelimit/rules.hpp>

namespace envoy_table {

/// A descriptor of these entries, with neither a limit override nor a hits addend.
inline ratelimit::RateLimitDescriptor desc(std::vector<ratelimit::DescriptorEntry> entries) {
  return ratelimit::RateLimitDescriptor{std::move(entries), std::nullopt, std::nullopt};
}

using ratelimit::DescriptorStatus;
using ratelimit::RateLimitDescriptor;
using ratelimit::RateLimitRequest;

/// One request, sent `repeat` times: every send but the last must be admitted; the last must
/// give `allowed` and, per descriptor, `statuses` (see `describe`) and `remaining` (-1: any).
struct Step {
  const char* what;
  RateLimitRequest request;
  int repeat;
  bool allowed;
  std::vector<std::string> statuses;
  std::vector<std::int64_t> remaining = {};
};

struct Scenario {
  const char* name;
  const char* yaml;
  std::vector<Step> steps;
};

/// A descriptor from entries.
inline RateLimitDescriptor d(std::vector<ratelimit::DescriptorEntry> entries) {
  return RateLimitDescriptor{std::move(entries), std::nullopt, std::nullopt};
}

/// A descriptor with its own hits addend.
inline RateLimitDescriptor with_hits(std::vector<ratelimit::DescriptorEntry> entries,
                                     std::int64_t hits) {
  return RateLimitDescriptor{std::move(entries), std::nullopt, hits};
}

/// A descriptor with its own limit (Envoy's RateLimitOverride).
inline RateLimitDescriptor with_limit(std::vector<ratelimit::DescriptorEntry> entries,
                                      std::int64_t requests_per_unit, ratelimit::RateUnit unit) {
  return RateLimitDescriptor{std::move(entries),
                             ratelimit::RateLimitOverride{requests_per_unit, unit}, std::nullopt};
}

/// "-" no limit; "unlimited"; "replaced NAME"; else "NAME ok" or "NAME over", with " shadow"
/// after the name of a shadow-mode limit; an override is named "override".
inline std::string describe(const DescriptorStatus& s) {
  if (s.unlimited) return "unlimited";
  if (s.replaced) return "replaced " + s.rule->name;
  if (!s.evaluated) return "-";
  std::string out = s.override_rate ? "override" : s.rule->name;
  if (s.shadow) out += " shadow";
  out += s.code == DescriptorStatus::Code::ok ? " ok" : " over";
  return out;
}

// clang-format off
inline const std::vector<Scenario>& scenarios() {
  static const std::vector<Scenario> all = {
  {"Example 1: a value per descriptor, each its own limit", R"(domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
)", {
    {"500 per second for users: the 500th admitted with 500 - 500 = 0 left",
     {"mongo_cps", {d({{"database", "users"}})}}, 500, true, {"database=users ok"}, {0}},
    {"the 501st denied",
     {"mongo_cps", {d({{"database", "users"}})}}, 1, false, {"database=users over"}, {0}},
    {"default has its own 500: 500 - 1 = 499 left",
     {"mongo_cps", {d({{"database", "default"}})}}, 1, true, {"database=default ok"}, {499}},
    {"a value no descriptor names: no limit",
     {"mongo_cps", {d({{"database", "orders"}})}}, 1, true, {"-"}},
    {"another domain: no limit", {"other", {d({{"database", "users"}})}}, 1, true, {"-"}},
  }},
  {"Example 2: nested lists and several descriptors per request", R"(domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
)", {
    {"both descriptors apply: 5 marketing messages, each also 1 of the number's 100",
     {"messaging", {d({{"message_type", "marketing"}, {"to_number", "2061111111"}}),
                    d({{"to_number", "2061111111"}})}},
     5, true, {"message_type=marketing|to_number ok", "to_number ok"}, {0, 95}},
    {"the 6th marketing message is denied, and all or nothing: the number keeps 95 (the "
     "reference would count it: 94)",
     {"messaging", {d({{"message_type", "marketing"}, {"to_number", "2061111111"}}),
                    d({{"to_number", "2061111111"}})}},
     1, false, {"message_type=marketing|to_number over", "to_number ok"}, {0, 95}},
    {"another number has its own 5 marketing messages: 5 - 1 = 4",
     {"messaging", {d({{"message_type", "marketing"}, {"to_number", "2062222222"}})}}, 1, true,
     {"message_type=marketing|to_number ok"}, {4}},
    {"the first number's other messages: 95 left, so 95 admitted and 0 left",
     {"messaging", {d({{"to_number", "2061111111"}})}}, 95, true, {"to_number ok"}, {0}},
    {"the marketing level alone has no limit of its own",
     {"messaging", {d({{"message_type", "marketing"}})}}, 1, true, {"-"}},
  }},
  {"Example 3: the most specific match (key and value before key)", R"(domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
)", {
    {"any address: 10 per second", {"edge_proxy_per_ip", {d({{"remote_address", "50.0.0.1"}})}},
     10, true, {"remote_address ok"}, {0}},
    {"its 11th denied", {"edge_proxy_per_ip", {d({{"remote_address", "50.0.0.1"}})}}, 1, false,
     {"remote_address over"}, {0}},
    {"each address its own 10: 10 - 1 = 9",
     {"edge_proxy_per_ip", {d({{"remote_address", "50.0.0.2"}})}}, 1, true,
     {"remote_address ok"}, {9}},
    {"the black-listed address: 0 per second, denied at once",
     {"edge_proxy_per_ip", {d({{"remote_address", "50.0.0.5"}})}}, 1, false,
     {"remote_address=50.0.0.5 over"}, {0}},
  }},
  {"Example 4 (first file): a request deeper than the file matches nothing", R"(domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
)", {
    {"two entries, one level: no limit",
     {"example4", {d({{"key", "value"}, {"subkey", "subvalue"}})}}, 1, true, {"-"}},
    {"one entry: the limit, 300 - 1 = 299", {"example4", {d({{"key", "value"}})}}, 1, true,
     {"key=value ok"}, {299}},
  }},
  {"Example 4 (second file): the same request at the depth of the file", R"(domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
)", {
    {"two entries, two levels: the nested limit, 300 - 1 = 299",
     {"example4", {d({{"key", "value"}, {"subkey", "subvalue"}})}}, 1, true,
     {"key=value|subkey ok"}, {299}},
    {"one entry lands on a descriptor without a limit",
     {"example4", {d({{"key", "value"}})}}, 1, true, {"-"}},
    {"entries in another order leave the tree",
     {"example4", {d({{"subkey", "subvalue"}, {"key", "value"}})}}, 1, true, {"-"}},
  }},
  {"Example 5: unlimited", R"(domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
)", {
    {"ldap: never limited", {"internal", {d({{"ldap", "x"}})}}, 1000, true, {"unlimited"}},
    {"azure: 100 per minute", {"internal", {d({{"azure", "x"}})}}, 100, true, {"azure ok"}, {0}},
    {"the 101st denied, ldap beside it still unlimited",
     {"internal", {d({{"azure", "x"}}), d({{"ldap", "x"}})}}, 1, false,
     {"azure over", "unlimited"}, {0, -1}},
  }},
  {"Example 6: shadow mode", R"(domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
)", {
    {"user-a: 10 admitted and counted",
     {"example6", {d({{"service", "auth-service"}, {"user", "user-a"}})}}, 10, true,
     {"service|user=user-a shadow ok"}, {0}},
    {"user-a's 11th: over its limit, yet admitted, and reported",
     {"example6", {d({{"service", "auth-service"}, {"user", "user-a"}})}}, 1, true,
     {"service|user=user-a shadow over"}, {0}},
    {"a shadow denial never stops another limit from spending: user-b 20 - 1 = 19",
     {"example6", {d({{"service", "auth-service"}, {"user", "user-a"}}),
                   d({{"service", "auth-service"}, {"user", "user-b"}})}},
     1, true, {"service|user=user-a shadow over", "service|user=user-b ok"}, {0, 19}},
    {"user-b: 19 more admitted, 0 left",
     {"example6", {d({{"service", "auth-service"}, {"user", "user-b"}})}}, 19, true,
     {"service|user=user-b ok"}, {0}},
    {"user-b's 21st denied",
     {"example6", {d({{"service", "auth-service"}, {"user", "user-b"}})}}, 1, false,
     {"service|user=user-b over"}, {0}},
  }},
  {"Example 7: replaces", R"(domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
)", {
    {"both descriptors: only the replacing 10 per second applies",
     {"example7", {d({{"key_1", "value_1"}, {"user", "bkthomps"}}),
                   d({{"key_2", "value_2"}, {"user", "bkthomps"}})}},
     10, true, {"replaced specific_limit", "key_2=value_2|user=bkthomps ok"}, {-1, 0}},
    {"the 11th denied by it",
     {"example7", {d({{"key_1", "value_1"}, {"user", "bkthomps"}}),
                   d({{"key_2", "value_2"}, {"user", "bkthomps"}})}},
     1, false, {"replaced specific_limit", "key_2=value_2|user=bkthomps over"}, {-1, 0}},
    {"the replaced limit was not affected: alone, its 5 are all there",
     {"example7", {d({{"key_1", "value_1"}, {"user", "bkthomps"}})}}, 5, true,
     {"specific_limit ok"}, {0}},
    {"and its 6th is denied",
     {"example7", {d({{"key_1", "value_1"}, {"user", "bkthomps"}})}}, 1, false,
     {"specific_limit over"}, {0}},
  }},
  {"Example 8: detailed_metric changes metrics only", R"(domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
)", {
    {"an unspecified value: 10 per minute", {"example8", {d({{"key1", "unspecified_value"}})}},
     10, true, {"key1 ok"}, {0}},
    {"another unspecified value has its own 10: 10 - 1 = 9",
     {"example8", {d({{"key1", "unspecified_value2"}})}}, 1, true, {"key1 ok"}, {9}},
    {"value1: 20 per minute, 20 - 1 = 19", {"example8", {d({{"key1", "value1"}})}}, 1, true,
     {"key1=value1 ok"}, {19}},
  }},
  {"Example 9: wildcards, trailing, middle and multiple", R"(domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
)", {
    {"value1 matches value*: 20 per minute", {"example9", {d({{"key1", "value1"}})}}, 20, true,
     {"key1=value* ok"}, {0}},
    {"each matching value its own 20: valueXYZ 20 - 1 = 19",
     {"example9", {d({{"key1", "valueXYZ"}})}}, 1, true, {"key1=value* ok"}, {19}},
    {"a value without the prefix: no limit", {"example9", {d({{"key1", "other"}})}}, 1, true,
     {"-"}},
    {"/api/123/action matches /api/*/action", {"example9", {d({{"path", "/api/123/action"}})}},
     1, true, {"path=/api/*/action ok"}, {19}},
    {"/api/123/other does not", {"example9", {d({{"path", "/api/123/other"}})}}, 1, true, {"-"}},
    {"/api/v1/resource/123/action matches both stars",
     {"example9", {d({{"route", "/api/v1/resource/123/action"}})}}, 1, true,
     {"route=/api/*/resource/*/action ok"}, {19}},
    {"/api/v1/resource/123 does not",
     {"example9", {d({{"route", "/api/v1/resource/123"}})}}, 1, true, {"-"}},
  }},
  {"Example 10: value_to_metric changes metrics only", R"(domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
)", {
    {"three levels: 60 per minute, 60 - 1 = 59",
     {"example10", {d({{"route", "api"}, {"http_method", "GET"}, {"subject_id", "123"}})}}, 1,
     true, {"route|http_method|subject_id ok"}, {59}},
    {"other values, another counter: 59",
     {"example10", {d({{"route", "web"}, {"http_method", "POST"}, {"subject_id", "456"}})}}, 1,
     true, {"route|http_method|subject_id ok"}, {59}},
  }},
  {"Example 11: share_threshold", R"(domain: example11
descriptors:
  # With share_threshold: true, all files/* matches share the same threshold
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10

  # Without share_threshold, each files_no_share/* match has its own isolated threshold
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
)", {
    {"5 for files/a.pdf", {"example11", {d({{"files", "files/a.pdf"}})}}, 5, true,
     {"files=files/* ok"}, {5}},
    {"5 for files/b.csv share the threshold: 10 - 5 - 5 = 0",
     {"example11", {d({{"files", "files/b.csv"}})}}, 5, true, {"files=files/* ok"}, {0}},
    {"so files/c.txt is over", {"example11", {d({{"files", "files/c.txt"}})}}, 1, false,
     {"files=files/* over"}, {0}},
    {"10 for files_no_share/a.pdf exhaust its own threshold",
     {"example11", {d({{"files_no_share", "files_no_share/a.pdf"}})}}, 10, true,
     {"files_no_share=files_no_share/* ok"}, {0}},
    {"files_no_share/a.pdf's 11th denied",
     {"example11", {d({{"files_no_share", "files_no_share/a.pdf"}})}}, 1, false,
     {"files_no_share=files_no_share/* over"}, {0}},
    {"files_no_share/b.csv still has its 10: 10 - 1 = 9",
     {"example11", {d({{"files_no_share", "files_no_share/b.csv"}})}}, 1, true,
     {"files_no_share=files_no_share/* ok"}, {9}},
  }},
  {"Example 11 (metrics): a shared wildcard above a nested limit", R"(domain: example11_metrics
descriptors:
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit:
          unit: minute
          requests_per_unit: 60
)", {
    {"api/v1 GET: 60 - 1 = 59",
     {"example11_metrics", {d({{"route", "api/v1"}, {"method", "GET"}})}}, 1, true,
     {"route=api/*|method ok"}, {59}},
    {"api/v2 GET shares the counter: 59 - 1 = 58",
     {"example11_metrics", {d({{"route", "api/v2"}, {"method", "GET"}})}}, 1, true,
     {"route=api/*|method ok"}, {58}},
    {"but POST has its own (the method has no value): 59",
     {"example11_metrics", {d({{"route", "api/v2"}, {"method", "POST"}})}}, 1, true,
     {"route=api/*|method ok"}, {59}},
  }},
  {"Descriptor list definition: a value with neither limit nor children is exempt",
   R"(domain: whitelist
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 1
  - key: remote_address
    value: 10.0.0.1
)", {
    {"any address: 1 per second", {"whitelist", {d({{"remote_address", "10.0.0.2"}})}}, 1, true,
     {"remote_address ok"}, {0}},
    {"its 2nd denied", {"whitelist", {d({{"remote_address", "10.0.0.2"}})}}, 1, false,
     {"remote_address over"}, {0}},
    {"the exempt address: never limited", {"whitelist", {d({{"remote_address", "10.0.0.1"}})}},
     100, true, {"-"}},
  }},
  {"Wildcards: exact before wildcard, the first wildcard in file order, wildcard before key",
   R"(domain: order
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1, name: any}
  - key: k
    value: a*
    rate_limit: {unit: minute, requests_per_unit: 2, name: a-star}
  - key: k
    value: ab*
    rate_limit: {unit: minute, requests_per_unit: 3, name: ab-star}
  - key: k
    value: abc
    rate_limit: {unit: minute, requests_per_unit: 4, name: exact}
)", {
    {"abc: the exact value, 4 - 1 = 3", {"order", {d({{"k", "abc"}})}}, 1, true, {"exact ok"},
     {3}},
    {"abd: a* comes first in the file (ab* matches too), 2 - 1 = 1",
     {"order", {d({{"k", "abd"}})}}, 1, true, {"a-star ok"}, {1}},
    {"b: no wildcard, the key's own, 1 - 1 = 0", {"order", {d({{"k", "b"}})}}, 1, true,
     {"any ok"}, {0}},
  }},
  {"Envoy's hits_addend: the request's, a descriptor's own, 0 to check", R"(domain: hits
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5}
)", {
    {"3 hits of 5: 5 - 3 = 2 left", {"hits", {d({{"k", "a"}})}, 3}, 1, true, {"k ok"}, {2}},
    {"3 more do not fit in 2: denied, 2 left", {"hits", {d({{"k", "a"}})}, 3}, 1, false,
     {"k over"}, {2}},
    {"a descriptor's own 2 (over the request's 3) fit: 0 left",
     {"hits", {with_hits({{"k", "a"}}, 2)}, 3}, 1, true, {"k ok"}, {0}},
    {"0 hits only checks: admitted though nothing is left",
     {"hits", {with_hits({{"k", "a"}}, 0)}, 0}, 1, true, {"k ok"}, {0}},
    {"two descriptors on one counter spend their sum: 2 + 2 of another key's 5, 1 left",
     {"hits", {d({{"k", "b"}}), d({{"k", "b"}})}, 2}, 1, true, {"k ok", "k ok"}, {1, 1}},
  }},
  {"Envoy's limit override: the descriptor's own limit instead of the file's", R"(domain: over
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100, name: file-limit}
)", {
    {"2 per hour instead of 100 per minute: 2 - 2 = 0",
     {"over", {with_limit({{"k", "a"}}, 2, ratelimit::RateUnit::hour)}}, 2, true,
     {"override ok"}, {0}},
    {"the 3rd denied", {"over", {with_limit({{"k", "a"}}, 2, ratelimit::RateUnit::hour)}}, 1,
     false, {"override over"}, {0}},
    {"entries the file does not know get it too",
     {"over", {with_limit({{"other", "x"}}, 2, ratelimit::RateUnit::hour)}}, 1, true,
     {"override ok"}, {1}},
    {"the file's limit was untouched: 100 - 1 = 99", {"over", {d({{"k", "a"}})}}, 1, true,
     {"file-limit ok"}, {99}},
  }},
  {"quota_mode: quota limits deny the request only all together", R"(domain: quota
descriptors:
  - key: q1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: q2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: e
    rate_limit: {unit: minute, requests_per_unit: 10}
)", {
    {"all admit: q1 0 left, q2 1, e 9",
     {"quota", {d({{"q1", "x"}}), d({{"q2", "x"}}), d({{"e", "x"}})}}, 1, true,
     {"q1 ok", "q2 ok", "e ok"}, {0, 1, 9}},
    {"q1 over, q2 admits: admitted; q1 spends nothing, q2 0 left, e 8",
     {"quota", {d({{"q1", "x"}}), d({{"q2", "x"}}), d({{"e", "x"}})}}, 1, true,
     {"q1 over", "q2 ok", "e ok"}, {0, 0, 8}},
    {"both quota limits over: denied, and e keeps 8",
     {"quota", {d({{"q1", "x"}}), d({{"q2", "x"}}), d({{"e", "x"}})}}, 1, false,
     {"q1 over", "q2 over", "e ok"}, {0, 0, 8}},
  }},
  };
  return all;
}
// clang-format on

/// A rule set whose `decide` goes through `decide_async` and waits for the response (from the
/// test's thread, never a storage's I/O thread).
template <class Set>
struct AsyncSet {
  std::unique_ptr<Set> set;
  ratelimit::RateLimitResponse decide(const RateLimitRequest& request) {
    // Shared: the completion may still be inside set_value when get() returns here.
    auto p = std::make_shared<std::promise<ratelimit::RateLimitResponse>>();
    auto f = p->get_future();
    set->decide_async(request, [p](ratelimit::RateLimitResponse r) { p->set_value(std::move(r)); });
    return f.get();
  }
};

/// Runs every scenario on a fresh rule set from `make(rules)` (a fresh counter space each).
template <class MakeSet>
void run_all(MakeSet make) {
  for (const Scenario& sc : scenarios()) {
    auto set = make(ratelimit::Rules::from_string(sc.yaml, sc.name));
    for (const Step& step : sc.steps) {
      INFO(sc.name << ": " << step.what);
      for (int i = 1; i < step.repeat; ++i) {
        INFO("send " << i << " of " << step.repeat);
        REQUIRE(set->decide(step.request).allowed);
      }
      const ratelimit::RateLimitResponse r = set->decide(step.request);
      CHECK(r.allowed == step.allowed);
      std::vector<std::string> got;
      for (const auto& s : r.statuses) got.push_back(describe(s));
      CHECK(got == step.statuses);
      for (std::size_t k = 0; k < step.remaining.size() && k < r.statuses.size(); ++k)
        if (step.remaining[k] >= 0) CHECK(r.statuses[k].decision.remaining == step.remaining[k]);
    }
  }
}

}  // namespace envoy_table
