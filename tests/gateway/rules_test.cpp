// Rules as code (include/ratelimit/rules.hpp): parsing the Envoy YAML, matching descriptors,
// nested descriptors and plans, all-or-nothing decisions, and error messages with line numbers.
// Time only from ManualClock; expected counts follow from each rule's algorithm's definition.

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/rules.hpp>

using namespace std::chrono_literals;
using ratelimit::Algorithm;
using ratelimit::DescriptorEntry;
using ratelimit::ManualClock;
using ratelimit::Rules;
using Set = ratelimit::RuleSet<ratelimit::InMemoryStorage, ManualClock>;

namespace {

// Line numbers matter to the error tests below: line 1 is "domain: gateway".
constexpr const char* gateway_yaml = R"(domain: gateway
descriptors:
  - key: api_key
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: path
    value: /login
    descriptors:
      - key: api_key
        rate_limit: {unit: minute, requests_per_unit: 2, name: login}
  - key: plan
    value: pro
    descriptors:
      - key: user
        rate_limit: {unit: Second, requests_per_unit: 50, algorithm: token_bucket, name: pro}
  - key: plan
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 4, name: default-plan}
  - key: path
    value: /admin
    rate_limit: {unit: day, requests_per_unit: 0, name: blocked}
  - key: path
    value: /search
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: fixed_window, name: search-all}
)";

std::vector<std::string> names(const std::vector<ratelimit::RuleMatch>& ms) {
  std::vector<std::string> out;
  for (const auto& m : ms) out.push_back(m.rule->name);
  return out;
}

std::vector<std::string> names(const ratelimit::RuleSetDecision& d) {
  std::vector<std::string> out;
  for (const auto& o : d.outcomes) out.push_back(o.rule->name);
  return out;
}

std::string error_of(const std::string& yaml) {
  try {
    (void)Rules::from_string(yaml, "rules.yaml");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("A rules file is parsed into its limits with units, algorithms, names and lines",
          "[rules][parse]") {
  const Rules rules = Rules::from_string(gateway_yaml);
  REQUIRE(rules.domain() == "gateway");
  const auto& r = rules.rules();
  REQUIRE(r.size() == 6);
  CHECK(r[0].name == "api_key");  // no `name`: the path
  CHECK(r[0].rate == ratelimit::per_minute(3));
  CHECK(r[0].algorithm == Algorithm::sliding_counter);  // the default
  CHECK(r[0].line == 3);
  CHECK(r[0].per_client);
  CHECK(r[1].name == "login");
  CHECK(r[1].line == 10);
  CHECK(r[1].path.size() == 2);
  CHECK(r[2].name == "pro");
  CHECK(r[2].rate == ratelimit::per_second(50));  // "Second": units are case-insensitive
  CHECK(r[2].algorithm == Algorithm::token_bucket);
  CHECK_FALSE(r[2].per_client);  // `user` is not among the default client_keys
  CHECK(r[3].rate == ratelimit::per_hour(4));
  CHECK(r[4].blocks());
  CHECK(r[5].algorithm == Algorithm::fixed_window);
  CHECK(r[5].policy().quota == 10);
  CHECK(r[5].policy().window == 1s);
}

TEST_CASE("Matching takes every limit whose descriptors the request carries, in file order",
          "[rules][match]") {
  const Rules rules = Rules::from_string(gateway_yaml);
  // api_key alone: the top-level api_key limit.
  CHECK(names(rules.match({{"api_key", "K"}})) == std::vector<std::string>{"api_key"});
  // Both entries, either order: the api_key limit and the nested /login limit.
  CHECK(names(rules.match({{"api_key", "K"}, {"path", "/login"}})) ==
        std::vector<std::string>{"api_key", "login"});
  CHECK(names(rules.match({{"path", "/login"}, {"api_key", "K"}})) ==
        std::vector<std::string>{"api_key", "login"});
  // A nested limit needs its parent's entry and its own: /login without a key matches nothing.
  CHECK(rules.match({{"path", "/login"}}).empty());
  // A value that no descriptor names and no catch-all: nothing.
  CHECK(rules.match({{"path", "/other"}}).empty());
  // Unknown keys are ignored.
  CHECK(rules.match({{"colour", "blue"}}).empty());
  // A shared rule (no client key on its path) has one counter for everyone.
  const auto search = rules.match({{"path", "/search"}, {"api_key", "A"}});
  REQUIRE(names(search) == std::vector<std::string>{"api_key", "search-all"});
  CHECK(search[1].key.empty());
  CHECK(search[1].client.empty());
  CHECK(search[0].client == "api_key=A");
  // A repeated key: its first entry counts.
  const auto twice = rules.match({{"api_key", "first"}, {"api_key", "second"}});
  REQUIRE(twice.size() == 1);
  CHECK(twice[0].client == "api_key=first");
}

TEST_CASE("A descriptor with a value takes precedence over the catch-all for its key (plans)",
          "[rules][match][plans]") {
  const Rules rules = Rules::from_string(gateway_yaml);
  CHECK(names(rules.match({{"plan", "pro"}, {"user", "u1"}})) == std::vector<std::string>{"pro"});
  CHECK(names(rules.match({{"plan", "free"}, {"user", "u1"}})) ==
        std::vector<std::string>{"default-plan"});
  CHECK(names(rules.match({{"plan", "anything"}, {"user", "u1"}})) ==
        std::vector<std::string>{"default-plan"});
}

TEST_CASE("Counters are per value of the catch-all descriptors, never shared across values",
          "[rules][match]") {
  const Rules rules = Rules::from_string(gateway_yaml);
  const auto a = rules.match({{"api_key", "ab"}, {"path", "/login"}});
  const auto b = rules.match({{"api_key", "a"}, {"path", "/login"}});
  REQUIRE(a.size() == 2);
  REQUIRE(b.size() == 2);
  CHECK(a[0].key != b[0].key);
  CHECK(a[1].key != b[1].key);
  // Length-prefixed: "2:ab", not a concatenation that two different values could produce.
  CHECK(a[0].key == "2:ab");
}

TEST_CASE("Per-plan limits: pro users get the token bucket, others the hourly window",
          "[rules][plans][token_bucket][sliding_counter]") {
  ManualClock clock;
  Set set(Rules::from_string(gateway_yaml), {}, clock);
  // pro: a bucket of 50 refilled at 50/s: 50 admitted at t = 0, the 51st denied with
  // retry_after = 1 token / (50/s) = 20 ms.
  for (int i = 0; i < 50; ++i) REQUIRE(set.decide({{"plan", "pro"}, {"user", "u"}}));
  const auto pro = set.decide({{"plan", "pro"}, {"user", "u"}});
  REQUIRE_FALSE(pro.allowed);
  CHECK(pro.decision().retry_after == 20ms);
  // free: 4 per hour (sliding counter): 4 admitted, the 5th denied. Window k = 0 holds c = 4,
  // p = 0: the earliest admission is in window 1 where c becomes the previous count: need
  // 4 (W - e) / W + 1 <= 4, e >= W / 4 = 15 min, so at 1 h + 15 min: retry_after = 75 min.
  for (int i = 0; i < 4; ++i) REQUIRE(set.decide({{"plan", "free"}, {"user", "u"}}));
  const auto free = set.decide({{"plan", "free"}, {"user", "u"}});
  REQUIRE_FALSE(free.allowed);
  CHECK(free.decision().retry_after == 75min);
  CHECK(free.decision().limit == 4);
}

TEST_CASE("unit: year is 365 days for every algorithm, fixed windows counted from the epoch",
          "[rules][year]") {
  const auto rules = Rules::from_string(R"(domain: d
descriptors:
  - key: fw
    rate_limit: {unit: year, requests_per_unit: 2, algorithm: fixed_window}
  - key: tb
    rate_limit: {unit: Year, requests_per_unit: 365, algorithm: token_bucket}
  - key: lb
    rate_limit: {unit: YEAR, requests_per_unit: 365, algorithm: leaky_bucket}
  - key: sl
    rate_limit: {unit: year, requests_per_unit: 2, algorithm: sliding_log}
  - key: sc
    rate_limit: {unit: year, requests_per_unit: 2}
)");
  constexpr auto year = std::chrono::hours{24 * 365};
  REQUIRE(rules.rules().size() == 5);
  for (const auto& r : rules.rules()) {
    CHECK(r.unit == "year");
    CHECK(r.rate.period == year);
    CHECK(r.policy().window == year);
  }
  // 2024-01-01 00:00 UTC = 1 704 067 200 s. W = 365 days = 31 536 000 s: the fixed window
  // holding it is k = floor(1 704 067 200 / 31 536 000) = 54, from 54 W = 1 702 944 000 s
  // (13 days earlier) to 55 W = 1 734 480 000 s, 30 412 800 s = 352 days later.
  ManualClock clock;
  clock.set(std::chrono::seconds{1'704'067'200});
  Set set(rules, {}, clock);
  constexpr auto day = std::chrono::hours{24};

  // fixed_window, 2 per window: the third is denied until the window's end.
  REQUIRE(set.decide({{"fw", "x"}}, 2));
  auto d = set.decide({{"fw", "x"}});
  REQUIRE_FALSE(d.allowed);
  CHECK(d.decision().retry_after == 352 * day);

  // token_bucket: capacity 365, refilled at 365 per 365 days = 1 a day. Emptied at once, the
  // next token comes in a day.
  REQUIRE(set.decide({{"tb", "x"}}, 365));
  d = set.decide({{"tb", "x"}});
  REQUIRE_FALSE(d.allowed);
  CHECK(d.decision().retry_after == day);

  // leaky_bucket: a queue of 365 drained at 1 a day. Full, one unit has leaked a day later.
  REQUIRE(set.decide({{"lb", "x"}}, 365));
  d = set.decide({{"lb", "x"}});
  REQUIRE_FALSE(d.allowed);
  CHECK(d.decision().retry_after == day);

  // sliding_log, 2 per 365 days: both entries at t leave the window at t + W.
  REQUIRE(set.decide({{"sl", "x"}}, 2));
  d = set.decide({{"sl", "x"}});
  REQUIRE_FALSE(d.allowed);
  CHECK(d.decision().retry_after == year);

  // sliding_counter (the default), 2 per 365 days, with windows from the epoch as fixed_window:
  // window 54 holds c = 2 from 13 days in. In window 55, at e into it, the estimate is
  // 2 (W - e) / W + 1 <= 2 iff e >= W / 2 = 182.5 days: retry_after = 352 + 182.5 days.
  REQUIRE(set.decide({{"sc", "x"}}, 2));
  d = set.decide({{"sc", "x"}});
  REQUIRE_FALSE(d.allowed);
  CHECK(d.decision().retry_after == 352 * day + year / 2);
}

TEST_CASE("A request denied by one rule spends nothing from the others", "[rules][atomic]") {
  ManualClock clock;
  Set set(Rules::from_string(gateway_yaml), {}, clock);
  const std::initializer_list<DescriptorEntry> login = {{"api_key", "K"}, {"path", "/login"}};
  // login: 2 per minute; api_key: 3 per minute (both sliding counters, frozen clock).
  REQUIRE(set.decide(login));  // api_key 1/3, login 1/2
  REQUIRE(set.decide(login));  // api_key 2/3, login 2/2
  for (int i = 0; i < 5; ++i) {
    const auto d = set.decide(login);  // login denies; api_key must stay at 2/3
    REQUIRE_FALSE(d.allowed);
    REQUIRE(names(d) == std::vector<std::string>{"api_key", "login"});
    CHECK(d.outcomes[0].decision.allowed);         // api_key alone would admit...
    CHECK(d.outcomes[0].decision.remaining == 1);  // ...and still has 3 - 2 = 1 left
    CHECK_FALSE(d.outcomes[1].decision.allowed);
    CHECK(d.deciding == 1);
  }
  // So one more plain request is admitted (the 3rd of 3), and then the key is exhausted.
  const auto third = set.decide({{"api_key", "K"}});
  REQUIRE(third.allowed);
  CHECK(third.decision().remaining == 0);
  CHECK_FALSE(set.decide({{"api_key", "K"}}).allowed);
}

TEST_CASE("A rule with requests_per_unit 0 blocks with retry_after never and spends nothing",
          "[rules][atomic]") {
  ManualClock clock;
  Set set(Rules::from_string(gateway_yaml), {}, clock);
  const auto d = set.decide({{"api_key", "K"}, {"path", "/admin"}});
  REQUIRE_FALSE(d.allowed);
  REQUIRE(names(d) == std::vector<std::string>{"api_key", "blocked"});
  CHECK(d.decision().retry_after == ratelimit::Decision::never);
  CHECK(d.decision().limit == 0);
  CHECK(d.outcomes[0].decision.remaining == 3);  // the api_key limit is untouched: 3 of 3
  // No Retry-After for a request no wait can cure.
  for (const auto& [name, value] : d.headers()) CHECK(name != "Retry-After");
}

TEST_CASE("A cost above a rule's limit is denied with never and spends nothing elsewhere",
          "[rules][atomic]") {
  ManualClock clock;
  Set set(Rules::from_string(gateway_yaml), {}, clock);
  // cost 3: api_key (3/min) would admit it, login (2/min) never can.
  const auto d = set.decide({{"api_key", "K"}, {"path", "/login"}}, 3);
  REQUIRE_FALSE(d.allowed);
  CHECK(d.decision().retry_after == ratelimit::Decision::never);
  CHECK(set.decide({{"api_key", "K"}}, 3).allowed);  // all 3 still there
  CHECK_THROWS_AS(set.decide({{"api_key", "K"}}, 0), std::invalid_argument);
}

TEST_CASE("No matching rule admits without headers", "[rules]") {
  ManualClock clock;
  Set set(Rules::from_string(gateway_yaml), {}, clock);
  const auto d = set.decide({{"colour", "blue"}});
  CHECK(d.allowed);
  CHECK(d.outcomes.empty());
  CHECK(d.deciding == ratelimit::RuleSetDecision::none);
  CHECK(d.headers().empty());
}

TEST_CASE("A rule set's headers list every matching policy", "[rules][http]") {
  ManualClock clock;
  Set set(Rules::from_string(gateway_yaml), {}, clock);
  clock.set(10s);
  const auto d = set.decide({{"api_key", "K"}, {"path", "/login"}});
  // Sliding counters in window k = 0 at t = 10 s, one request each: api_key remaining 3 - 1 = 2,
  // login 2 - 1 = 1; reset_after = (k + 2) W - t = 120 s - 10 s = 110 s for both. The deciding
  // one has the fewest remaining: login.
  CHECK(d.headers() ==
        ratelimit::HeaderList{{"RateLimit-Policy", "\"api_key\";q=3;w=60, \"login\";q=2;w=60"},
                              {"RateLimit", "\"api_key\";r=2;t=110, \"login\";r=1;t=110"},
                              {"X-RateLimit-Limit", "2"},
                              {"X-RateLimit-Remaining", "1"},
                              {"X-RateLimit-Reset", "110"}});
}

TEST_CASE(
    "Concurrent requests on overlapping rules admit exactly the limits and never spend a "
    "denied request",
    "[rules][atomic][concurrent]") {
  // Regression guard for partial consumption under contention: without the stripe locks, a
  // request could pass its dry run, lose a race, and leave units spent in the other rule.
  ManualClock clock;  // frozen: no capacity comes back during the run
  ratelimit::InMemoryStorage storage;
  Set set(Rules::from_string(R"(domain: race
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: path
    value: /x
    descriptors:
      - key: api_key
        rate_limit: {unit: minute, requests_per_unit: 20}
)"),
          storage, clock);
  constexpr int threads = 8, per_thread = 40;  // 320 requests, half of them on /x
  std::atomic<int> admitted_x{0}, admitted_plain{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        const bool on_x = (i + t) % 2 == 0;
        const auto d =
            on_x ? set.decide({{"api_key", "K"}, {"path", "/x"}}) : set.decide({{"api_key", "K"}});
        if (d.allowed) ++(on_x ? admitted_x : admitted_plain);
      }
    });
  for (auto& th : pool) th.join();
  // The api_key limit admits exactly 50 in all; /x at most 20 of them.
  CHECK(admitted_x + admitted_plain == 50);
  CHECK(admitted_x <= 20);
  // The /x counter spent exactly what was admitted on /x: its remaining is 20 - admitted_x.
  const auto& rules = set.rules();
  const auto match = rules.match({{"api_key", "K"}, {"path", "/x"}});
  REQUIRE(match.size() == 2);
  ratelimit::SlidingCounter<ManualClock> x_counter(ratelimit::per_minute(20), storage, clock,
                                                   match[1].rule->id);
  CHECK(x_counter.peek(match[1].key).remaining == 20 - admitted_x);
}

TEST_CASE("Invalid rules files name the line and the problem", "[rules][errors]") {
  CHECK(error_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, "
                 "requests_per_unit: 1}\n") ==
        "rules.yaml:4: rate_limit.unit = \"fortnight\": unknown unit (expected second, minute, "
        "hour, day, week, month or year)");
  CHECK(error_of("domain: d\ndescriptors:\n  - value: x\n    rate_limit: {unit: second, "
                 "requests_per_unit: 1}\n") == "rules.yaml:3: missing field `key`");
  CHECK(error_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n"
                 "      requests_per_unit: -5\n") ==
        "rules.yaml:6: rate_limit.requests_per_unit = -5: must not be negative");
  CHECK(error_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n"
                 "      requests_per_unit: ten\n") ==
        "rules.yaml:6: rate_limit.requests_per_unit = \"ten\": not a whole number");
  CHECK(error_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n"
                 "      requests_per_unit: 1000000001\n") ==
        "rules.yaml:6: rate_limit.requests_per_unit = 1000000001: must be at most 1000000000");
  CHECK(error_of("domain: d\ndescriptors:\n  - key: a\n    value: v\n    rate_limit: {unit: "
                 "second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: second, "
                 "requests_per_unit: 1}\n  - key: a\n    value: v\n    rate_limit: {unit: "
                 "second, requests_per_unit: 2}\n") ==
        "rules.yaml:8: duplicate descriptor key \"a\" value \"v\" (first at line 3)");
  CHECK(error_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
                 "requests_per_units: 1}\n") ==
        "rules.yaml:4: unknown field \"requests_per_units\" (expected one of: unit, "
        "requests_per_unit, algorithm, name, unlimited, replaces, time_zone, first_day, "
        "block_duration)");
  CHECK(error_of("descriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: "
                 "1}\n") == "rules.yaml:1: missing field `domain`");
  CHECK(error_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
                 "requests_per_unit: 1, algorithm: gcra}\n") ==
        "rules.yaml:4: rate_limit.algorithm = \"gcra\": unknown algorithm (expected one of: " +
            ratelimit::Algorithms::names() + ")");  // the registry's list, written once there
  CHECK(error_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
                 "requests_per_unit: 1, name: x}\n  - key: b\n    rate_limit: {unit: second, "
                 "requests_per_unit: 1, name: x}\n") ==
        "rules.yaml:5: rule name \"x\" already used at line 3");
  // A descriptor with neither a limit nor nested descriptors is valid (it exempts its value).
  CHECK(error_of("domain: d\ndescriptors:\n  - key: a\n") == "(no error)");
  CHECK(error_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second\n") ==
        "rules.yaml:5: invalid YAML: end of map flow not found");
  CHECK(error_of("domain: d\ndescriptors:\n  - key: a\n    key: b\n    rate_limit: {unit: "
                 "second, requests_per_unit: 1}\n") == "rules.yaml:4: field \"key\" given twice");
}

TEST_CASE("Rules load from a file, and a missing file is an error naming it", "[rules][parse]") {
  const std::string path = "gateway_rules_test.yaml";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fputs(gateway_yaml, f);
    std::fclose(f);
  }
  CHECK(Rules::from_file(path).rules().size() == 6);
  std::remove(path.c_str());
  CHECK_THROWS_WITH(Rules::from_file("no/such/rules.yaml"),
                    "rules file no/such/rules.yaml: cannot open");
}

// --- Lockouts: rate_limit.block_duration (docs/rules.md; Lockout's meaning, docs/algorithms.md
// "Refunds, penalties and lockouts").

namespace {

// The login rule. The rules' units are second to year, so "5 failures in 15 minutes" is written
// as 5 per hour here (a sliding log: exactly the last hour's failures), locked 1 h after the
// limit denies. Each request of the descriptor is a failed login (the gateway asks only then).
constexpr const char* login_yaml = R"(domain: auth
descriptors:
  - key: login_failure
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: sliding_log, block_duration: 1h}
  - key: api_key
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: otp
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, block_duration: 10m}
)";

ratelimit::RateLimitRequest login_request(const std::string& user, std::int64_t hits = 0) {
  ratelimit::RateLimitRequest r{"auth", {}, 0};
  r.descriptors.push_back({{{"login_failure", user}}, std::nullopt, std::nullopt});
  r.descriptors.push_back({{{"api_key", "K"}}, std::nullopt, std::nullopt});
  if (hits > 0) r.hits_addend = hits;
  return r;
}

}  // namespace

TEST_CASE("block_duration is read as Go writes durations, whole seconds from 1 s to 366 days",
          "[rules][lockout][parse]") {
  const auto block_of = [](const std::string& text) {
    return Rules::from_string(
               "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: "
               "minute, requests_per_unit: 5, block_duration: " +
               text + "}\n")
        .rules()
        .front()
        .block_duration;
  };
  CHECK(block_of("1h") == 1h);
  CHECK(block_of("15m") == 15min);
  CHECK(block_of("90s") == 90s);
  CHECK(block_of("1h30m") == 90min);      // 3600 + 1800 s
  CHECK(block_of("8784h") == 366 * 24h);  // 366 days, the longest
  CHECK(block_of("1s") == 1s);
  CHECK(block_of("\"2m5s\"") == 125s);  // 120 + 5 s, quoted or not
  // Without it the rule is the reference's: no lockout.
  const Rules plain = Rules::from_string(gateway_yaml);
  for (const auto& r : plain.rules()) CHECK_FALSE(r.locks_out());
  CHECK(Rules::from_string(login_yaml).rules().front().locks_out());
}

TEST_CASE("A bad block_duration is refused naming the field, the value and the line",
          "[rules][lockout][errors]") {
  const auto refusal = [](const std::string& text) {
    return error_of(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minute\n"
        "      requests_per_unit: 5\n      block_duration: " +
        text + "\n");
  };
  const std::string syntax =
      ": not a duration (whole numbers each with its unit h, m or s, e.g. 1h, 15m, 90s or 1h30m)";
  CHECK(refusal("3600") == "rules.yaml:7: rate_limit.block_duration = \"3600\"" + syntax);
  CHECK(refusal("1 hour") == "rules.yaml:7: rate_limit.block_duration = \"1 hour\"" + syntax);
  CHECK(refusal("1.5h") == "rules.yaml:7: rate_limit.block_duration = \"1.5h\"" + syntax);
  CHECK(refusal("1d") == "rules.yaml:7: rate_limit.block_duration = \"1d\"" + syntax);
  CHECK(refusal("500ms") == "rules.yaml:7: rate_limit.block_duration = \"500ms\"" + syntax);
  CHECK(refusal("h") == "rules.yaml:7: rate_limit.block_duration = \"h\"" + syntax);
  CHECK(refusal("-1h") ==
        "rules.yaml:7: rate_limit.block_duration = \"-1h\": must not be negative (leave the "
        "field out for no lockout)");
  CHECK(refusal("0s") ==
        "rules.yaml:7: rate_limit.block_duration = \"0s\": must be at least 1s (leave the field "
        "out for no lockout)");
  CHECK(refusal("\"\"") ==
        "rules.yaml:7: rate_limit.block_duration = \"\": empty (a duration such as 1h, 15m or "
        "90s; leave it out for no lockout)");
  // 8784h is 366 days; one second more, or a number past int64, is too long (no overflow).
  const std::string too_long = ": longer than 366 days (8784h), the longest lockout";
  CHECK(refusal("8784h1s") == "rules.yaml:7: rate_limit.block_duration = \"8784h1s\"" + too_long);
  CHECK(refusal("99999999999999999999s") ==
        "rules.yaml:7: rate_limit.block_duration = \"99999999999999999999s\"" + too_long);
  CHECK(refusal("9223372036854775807h") ==
        "rules.yaml:7: rate_limit.block_duration = \"9223372036854775807h\"" + too_long);
  // A hostile value of 100,000 digits: refused at once, the message quoting its first 60.
  CHECK(refusal(std::string(100'000, '9') + "h") ==
        "rules.yaml:7: rate_limit.block_duration = \"" + std::string(60, '9') + "...\"" + too_long);
  CHECK(refusal("[1h]") == "rules.yaml:7: rate_limit.block_duration must be a string, not a list");
  // With a limit that denies everything, or with none, a lockout means nothing.
  CHECK(error_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, "
                 "requests_per_unit: 0, block_duration: 1h}\n") ==
        "rules.yaml:4: rate_limit.block_duration with requests_per_unit: 0: the limit already "
        "denies every request, a lockout adds nothing (remove one of them)");
  CHECK(error_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, "
                 "block_duration: 1h}\n") ==
        "rules.yaml:4: rate_limit.unlimited: true takes no block_duration (nothing is ever "
        "denied to lock out)");
}

TEST_CASE("The login rule: 5 failures in the hour lock the user out for 1 h, spending nothing",
          "[rules][lockout]") {
  ManualClock clock;
  Set set(Rules::from_string(login_yaml), {}, clock);
  // Failures at t = 0, 1, 2, 3, 4 min: the log's 5 places.
  for (int i = 0; i < 5; ++i) {
    clock.set(std::chrono::minutes{i});
    const auto r = set.decide(login_request("alice"));
    REQUIRE(r.allowed);
    CHECK(r.statuses[0].decision.remaining == 4 - i);  // 5 - (i + 1)
    CHECK_FALSE(r.statuses[0].locked);
  }
  // The 6th, at t = 5 min, is denied by the limit and locks from now: the log alone would
  // admit at 60 min, when the t = 0 failure leaves (retry_after 55 min), but the lock holds
  // until 5 + 60 = 65 min: retry_after = reset_after = 60 min (the log's reset_after is
  // 4 + 60 - 5 = 59 min).
  clock.set(5min);
  auto r = set.decide(login_request("alice"));
  REQUIRE_FALSE(r.allowed);
  CHECK(r.statuses[0].code == ratelimit::DescriptorStatus::Code::over_limit);
  CHECK_FALSE(r.statuses[0].locked);  // denied by the limit, which locks
  CHECK(r.statuses[0].decision.retry_after == 60min);
  CHECK(r.statuses[0].decision.reset_after == 60min);
  CHECK(r.decision().retry_after == 60min);
  // Locked: at 35 min, 30 min left; the limit is not asked (nothing spent, also not from the
  // api_key limit of the same request: a sliding counter of a day, in its first window, left
  // by all or nothing at 100 - 5 admitted = 95).
  clock.set(35min);
  r = set.decide(login_request("alice"));
  REQUIRE_FALSE(r.allowed);
  CHECK(r.statuses[0].locked);
  CHECK(r.statuses[0].code == ratelimit::DescriptorStatus::Code::over_limit);
  CHECK(r.statuses[0].decision.remaining == 0);
  CHECK(r.statuses[0].decision.retry_after == 30min);  // 65 - 35
  CHECK(r.statuses[0].decision.limit == 5);
  CHECK(r.statuses[1].decision.remaining == 95);  // the dry run of api_key: 100 - 5
  // Still locked at 64 min, though the log has room again (t = 0..3 min have left: 4 places):
  // the lock is not extended by the denials it made (1 min left, not more).
  clock.set(64min);
  r = set.decide(login_request("alice"));
  REQUIRE_FALSE(r.allowed);
  CHECK(r.statuses[0].locked);
  CHECK(r.statuses[0].decision.retry_after == 1min);
  // Another user is not locked.
  CHECK(set.decide(login_request("bob")).allowed);
  // At 65 min the lock is over and every failure has left the hour (t > 65 - 60 = 5 min holds
  // none of them; the locked attempts were never logged): 5 - 1 = 4 left.
  clock.set(65min);
  r = set.decide(login_request("alice"));
  REQUIRE(r.allowed);
  CHECK_FALSE(r.statuses[0].locked);
  CHECK(r.statuses[0].decision.remaining == 4);
  // 100 - 7 admitted (alice 5 + 1, bob 1): none of the denied or locked ones spent.
  CHECK(r.statuses[1].decision.remaining == 93);
  // The flat form is the same engine: the lock's denial, then the same wait.
  for (int i = 0; i < 4; ++i) REQUIRE(set.decide({{"login_failure", "carol"}}).allowed);
  REQUIRE(set.decide({{"login_failure", "carol"}}).allowed);   // the 5th
  const auto flat = set.decide({{"login_failure", "carol"}});  // the 6th locks for 1 h
  REQUIRE_FALSE(flat.allowed);
  CHECK(flat.decision().retry_after == 1h);
  clock.advance(20min);
  CHECK(set.decide({{"login_failure", "carol"}}).decision().retry_after == 40min);
}

TEST_CASE("A lockout in shadow mode locks and reports, but never denies the request",
          "[rules][lockout][shadow]") {
  struct Events : ratelimit::Listener {
    std::vector<std::string> heard;
    void on_decision(const ratelimit::DecisionEvent& e) override {
      heard.push_back(std::string(e.name) + " " + std::string(ratelimit::to_string(e.outcome)));
    }
  };
  ManualClock clock;
  Set set(Rules::from_string(login_yaml), {}, clock);
  auto events = std::make_shared<Events>();
  set.attach_listener(events);
  const ratelimit::RateLimitRequest otp{"auth", {{{{"otp", "alice"}}}}, 0};
  REQUIRE(set.decide(otp).allowed);  // 1 of 1 per minute
  // The 2nd is over the limit (shadow: admitted) and locks for 10 min.
  auto r = set.decide(otp);
  CHECK(r.allowed);
  CHECK(r.shadow_denials == std::vector<std::size_t>{0});
  CHECK(r.statuses[0].decision.retry_after == 10min);
  // 5 min later the minute's window has room again, but the lock is checked as enforced:
  // reported locked (5 min left), admitted.
  clock.set(5min);
  r = set.decide(otp);
  CHECK(r.allowed);
  CHECK(r.statuses[0].locked);
  CHECK(r.shadow_denials == std::vector<std::size_t>{0});
  CHECK(r.statuses[0].decision.retry_after == 5min);
  CHECK(events->heard == std::vector<std::string>{"auth.otp allowed", "auth.otp shadow_limited",
                                                  "auth.otp locked_out"});
}

TEST_CASE("A lockout rule shares its lock with a Lockout around a limiter named Rule::id",
          "[rules][lockout]") {
  ManualClock clock;
  ratelimit::InMemoryStorage storage;
  Set set(Rules::from_string(login_yaml), storage, clock);
  const ratelimit::Rule& rule = set.rules().rules().front();
  ratelimit::Lockout lockout(
      ratelimit::SlidingLog<ManualClock>(ratelimit::Rate{5, 1h}, storage, clock, rule.id), 1h);
  // The counter of descriptor login_failure=dave is its length-prefixed value.
  const auto match = set.rules().lookup(std::vector<DescriptorEntry>{{"login_failure", "dave"}});
  for (int i = 0; i < 5; ++i) REQUIRE(lockout.try_acquire(match.key));
  REQUIRE_FALSE(lockout.try_acquire(match.key));  // locks for 1 h
  clock.advance(10min);
  const auto r = set.decide(login_request("dave"));
  REQUIRE_FALSE(r.allowed);
  CHECK(r.statuses[0].locked);
  CHECK(r.statuses[0].decision.retry_after == 50min);  // 60 - 10
}

TEST_CASE("A locked quota-mode limit counts as its denial: the request passes while another admits",
          "[rules][lockout][quota]") {
  ManualClock clock;
  Set set(Rules::from_string(R"(domain: q
descriptors:
  - key: a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, block_duration: 1h}
  - key: b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
)"),
          {}, clock);
  const ratelimit::RateLimitRequest a_only{"q", {{{{"a", "x"}}}}, 0};
  const ratelimit::RateLimitRequest both{"q", {{{{"a", "x"}}}, {{{"b", "y"}}}}, 0};
  REQUIRE(set.decide(a_only).allowed);
  // a's only quota-mode limit denies: the request is denied, and a locks for 1 h.
  REQUIRE_FALSE(set.decide(a_only).allowed);
  // At 2 min a's sliding counter would admit (window 0's one request no longer weighs in
  // window 2), yet a is locked: a denial of a quota-mode limit; b admits, so the request passes
  // (quota mode denies only when every quota-mode limit does) and b spends.
  clock.set(2min);
  auto r = set.decide(both);
  CHECK(r.allowed);
  CHECK(r.statuses[0].locked);
  CHECK(r.statuses[0].code == ratelimit::DescriptorStatus::Code::over_limit);
  CHECK(r.statuses[0].decision.retry_after == 58min);  // 60 - 2
  CHECK(r.statuses[1].decision.remaining == 0);        // 1 - 1
  // a alone is still denied: its only quota-mode limit is locked.
  CHECK_FALSE(set.decide(a_only).allowed);
}
