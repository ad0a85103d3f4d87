// Monitoring, written once over `Backends` (in process and on Redis): listeners hear exactly the
// decisions a replayed trace implies, per limiter or rule and outcome; the Prometheus exporter
// counts the same; shadow mode admits everything and reports exactly the enforced run's
// denials; a throwing listener changes nothing.

#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ratelimit/metrics/prometheus.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/rules.hpp>
#include <ratelimit/rules/service.hpp>
#include <ratelimit/testing/manual_clock.hpp>

#include "support/backends.hpp"
#include "support/counting_listener.hpp"
#include "support/expect.hpp"

using namespace std::chrono_literals;

namespace monitor_suite {

using ratelimit::Decision;
using ratelimit::ManualClock;
using ratelimit::Outcome;

/// Whether a rule-set request may mix limits of different Redis keys' slots. On Redis Cluster
/// a multi-key decision runs as one script on one node, so a request whose limits span slots
/// (a per-client limit beside a shared one) is refused (CROSSSLOT) and decided by the failure
/// policy, degraded (docs/cluster.md; tests/registry/cross_slot_test.cpp): the rule-set traces
/// below, which mix them, run in process and on one Redis only.
template <class Backend>
constexpr bool one_node = std::string_view(Backend::name) != "redis-cluster";

/// One request of a trace: at `at` (from 0), for `key`.
struct Step {
  std::chrono::milliseconds at;
  const char* key;
};

/// A token bucket of 3 refilled at 1/s, keys "a" and "b". At 0: a a a a b; at 1 s: a a b b b b.
/// a: 3 tokens, so 3 admitted and the 4th denied; at 1 s one token back: 1 admitted, 1 denied.
/// b: 1 admitted at 0 (2 left), +1 at 1 s = 3: 3 admitted, the 4th denied.
/// So 3 + 1 + 1 + 3 = 8 admitted and 1 + 1 + 1 = 3 denied (a twice, b once).
const std::vector<Step> trace = {{0ms, "a"},    {0ms, "a"},    {0ms, "a"},    {0ms, "a"},
                                 {0ms, "b"},    {1000ms, "a"}, {1000ms, "a"}, {1000ms, "b"},
                                 {1000ms, "b"}, {1000ms, "b"}, {1000ms, "b"}};
const std::vector<bool> trace_admits = {true,  true, true, false, true, true,
                                        false, true, true, true,  false};

/// The trace's limiter: a token bucket of 3 refilled at 1/s, named `name`.
template <class S>
ratelimit::TokenBucket<ManualClock, S> bucket(S storage, ManualClock& clock, std::string name) {
  return ratelimit::TokenBucket<ManualClock, S>({3, ratelimit::per_second(1)}, std::move(storage),
                                                clock, std::move(name));
}

template <class S>
std::vector<Decision> replay(ratelimit::TokenBucket<ManualClock, S>& limiter, ManualClock& clock) {
  std::vector<Decision> out;
  for (const Step& s : trace) {
    clock.set(s.at);
    out.push_back(limiter.try_acquire(s.key));
  }
  return out;
}

/// The value of the exposition line that starts with `series` (-1 if absent).
long long series_value(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stoll(text.substr(at + series.size() + 2));
}

}  // namespace monitor_suite

using namespace monitor_suite;

TEMPLATE_LIST_TEST_CASE("A replayed trace gives the listeners exactly the counts it implies",
                        "[monitor][listener]", Backends) {
  ManualClock clock;
  auto limiter = bucket(TestType::make(), clock, "api");
  auto counts = std::make_shared<rltest::CountingListener>();
  auto exporter = std::make_shared<ratelimit::PrometheusExporter>();
  limiter.attach_listener(counts, {.with_keys = true});
  limiter.attach_listener(exporter, {.with_keys = true});

  const auto ds = replay(limiter, clock);
  for (std::size_t i = 0; i < ds.size(); ++i) CHECK(ds[i].allowed == trace_admits[i]);
  CHECK(counts->count("api", Outcome::allowed) == 8);  // see `trace`
  CHECK(counts->count("api", Outcome::limited) == 3);
  CHECK(counts->count("api", Outcome::shadow_limited) == 0);
  CHECK(counts->count("api", Outcome::degraded) == 0);
  CHECK(counts->limited_key("a") == 2);
  CHECK(counts->limited_key("b") == 1);

  const std::string text = exporter->render();
  CHECK(series_value(text, "ratelimit_decisions_total{name=\"api\",outcome=\"allowed\"}") == 8);
  CHECK(series_value(text, "ratelimit_decisions_total{name=\"api\",outcome=\"limited\"}") == 3);
  // Every limited client fits the top list (2 < 10): the sketch's counts are then exact.
  CHECK(series_value(text, "ratelimit_top_limited_requests{name=\"api\",client=\"a\"}") == 2);
  CHECK(series_value(text, "ratelimit_top_limited_requests{name=\"api\",client=\"b\"}") == 1);

  // Detached: no more events; peek is not a decision.
  REQUIRE(limiter.detach_listener(*counts));
  CHECK_FALSE(limiter.detach_listener(*counts));
  (void)limiter.try_acquire("a");
  (void)limiter.peek("a");
  CHECK(counts->total() == trace.size());
}

TEMPLATE_LIST_TEST_CASE(
    "Refunds and penalties reach the listeners and the exporter as their own outcomes",
    "[monitor][listener][refund][penalty]", Backends) {
  ManualClock clock;
  auto limiter = bucket(TestType::make(), clock, "api");
  auto quiet = bucket(TestType::make(), clock, "quiet");
  auto counts = std::make_shared<rltest::CountingListener>();
  auto exporter = std::make_shared<ratelimit::PrometheusExporter>();
  for (auto* l : {&limiter, &quiet}) {
    l->attach_listener(counts);
    l->attach_listener(exporter);
  }
  CHECK(limiter.try_acquire("a", 2).allowed);
  // B = 3 at 1/s, 2 taken at 0: a refund of 1 at 0 owes 0 + 1 - 0 = 1 s: T = 2.
  CHECK(limiter.refund("a", 1, clock.now()) == rltest::admitted(3, 2, 1s));
  // A penalty of 4: T = 2 - 4 = -2, a unit waits (1 + 2) / 1 = 3 s; reset 5 s.
  CHECK(limiter.penalty("a", 4) == rltest::denied(3, 0, 3s, 5s));
  CHECK(quiet.try_acquire("a").allowed);
  CHECK(counts->count("api", Outcome::allowed) == 1);
  CHECK(counts->count("api", Outcome::refunded) == 1);
  CHECK(counts->count("api", Outcome::penalized) == 1);
  CHECK(counts->count("api", Outcome::limited) == 0);  // a penalty's denial is not a request's
  const std::string text = exporter->render();
  CHECK(series_value(text, "ratelimit_decisions_total{name=\"api\",outcome=\"refunded\"}") == 1);
  CHECK(series_value(text, "ratelimit_decisions_total{name=\"api\",outcome=\"penalized\"}") == 1);
  CHECK(series_value(text, "ratelimit_decisions_total{name=\"api\",outcome=\"locked_out\"}") == -1);
  // A name that had none keeps the four series of every decision, no more.
  CHECK(series_value(text, "ratelimit_decisions_total{name=\"quiet\",outcome=\"allowed\"}") == 1);
  CHECK(series_value(text, "ratelimit_decisions_total{name=\"quiet\",outcome=\"refunded\"}") == -1);
  CHECK(text.size() <= exporter->max_bytes());
}

TEMPLATE_LIST_TEST_CASE("A reservation reaches the listeners as a take, and its cancel as a refund",
                        "[monitor][listener][reserve]", Backends) {
  ManualClock clock;
  auto limiter = bucket(TestType::make(), clock, "api");
  auto counts = std::make_shared<rltest::CountingListener>();
  limiter.attach_listener(counts);
  // B = 3 at 1/s. 3 of a full bucket fit: due at once, D = 3. Then 2 more owe D + 2 - B = 2
  // tokens: due in 2 s, D = 5 (reset 5 s). Then 2 more: D + 2 = 7 > 2B = 6, refused until one
  // token has refilled, 1 s.
  CHECK(limiter.reserve("a", 3).decision == rltest::admitted(3, 0, 3s));
  const auto r = limiter.reserve("a", 2);
  CHECK(r.decision == rltest::admitted(3, 0, 5s, 2s));
  CHECK(limiter.reserve("a", 2).decision == rltest::denied(3, 0, 1s, 5s));
  // Cancelled at 0, before it is due: the 2 go back, D = 3: a unit waits 1 s, reset 3 s.
  CHECK(limiter.cancel("a", r) == rltest::denied(3, 0, 1s, 3s));
  CHECK(counts->count("api", Outcome::allowed) == 2);
  CHECK(counts->count("api", Outcome::limited) == 1);
  CHECK(counts->count("api", Outcome::refunded) == 1);
}

TEMPLATE_LIST_TEST_CASE("Keys reach a listener only when it was attached with_keys",
                        "[monitor][listener]", Backends) {
  ManualClock clock;
  ratelimit::TokenBucket<ManualClock, typename TestType::Storage> limiter(
      {1, ratelimit::per_second(1)}, TestType::make(), clock, "private");
  auto counts = std::make_shared<rltest::CountingListener>();
  limiter.attach_listener(counts);  // with_keys off by default
  (void)limiter.try_acquire("alice");
  (void)limiter.try_acquire("alice");  // denied: 1 token, refilled in 1 s
  CHECK(counts->count("private", Outcome::limited) == 1);
  CHECK(counts->limited_key("") == 1);
  CHECK(counts->limited_key("alice") == 0);
}

TEMPLATE_LIST_TEST_CASE(
    "Shadow mode admits the whole trace and reports exactly the enforced run's denials",
    "[monitor][shadow]", Backends) {
  ManualClock clock;
  auto storage = TestType::make();
  auto enforced = bucket(storage, clock, "enforced");
  auto shadow = bucket(storage, clock, "shadow");
  shadow.set_shadow_mode(true);
  REQUIRE(shadow.shadow_mode());
  CHECK_FALSE(enforced.shadow_mode());
  auto counts = std::make_shared<rltest::CountingListener>();
  shadow.attach_listener(counts);

  const auto e = replay(enforced, clock);
  const auto s = replay(shadow, clock);
  REQUIRE(e.size() == s.size());
  for (std::size_t i = 0; i < e.size(); ++i) {
    INFO("request " << i);
    CHECK(s[i].allowed);
    CHECK(s[i].shadow_denied == !e[i].allowed);
    // Every other field is the enforced decision's: the same spending, the same state.
    Decision expected = e[i];
    expected.allowed = true;
    expected.shadow_denied = !e[i].allowed;
    CHECK(s[i] == expected);
  }
  CHECK(counts->count("shadow", Outcome::allowed) == 8);  // see `trace`
  CHECK(counts->count("shadow", Outcome::shadow_limited) == 3);
  CHECK(enforced.peek("a") == shadow.peek("a"));
  CHECK(enforced.peek("b") == shadow.peek("b"));

  // Off again: enforced (b has no token left at 1 s: denied).
  shadow.set_shadow_mode(false);
  CHECK_FALSE(shadow.try_acquire("b").allowed);
}

TEMPLATE_LIST_TEST_CASE("A throwing listener never changes a decision nor silences the others",
                        "[monitor][listener]", Backends) {
  ManualClock clock;
  auto storage = TestType::make();
  auto plain = bucket(storage, clock, "plain");
  auto watched = bucket(storage, clock, "watched");
  auto counts = std::make_shared<rltest::CountingListener>();
  watched.attach_listener(std::make_shared<rltest::ThrowingListener>());
  watched.attach_listener(counts);
  CHECK(replay(plain, clock) == replay(watched, clock));
  CHECK(counts->total() == trace.size());
  // The async form too: the completion still gets its decision.
  bool got = false;
  watched.try_acquire_async("c", 1, [&](Decision d) { got = d.allowed; });
  CHECK(watched.try_acquire_async("c", 1).get().allowed);
  CHECK(got);
  CHECK(counts->total() == trace.size() + 2);
}

TEMPLATE_LIST_TEST_CASE("A rule set's replay gives exactly the counts per rule and outcome",
                        "[monitor][rules]", Backends) {
  if constexpr (!one_node<TestType>) return;  // limits in two slots: see one_node
  ManualClock clock;
  ratelimit::RuleSet<typename TestType::Storage, ManualClock> set(ratelimit::Rules::from_string(R"(
domain: mon
descriptors:
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: fixed_window}
  - key: path
    value: /login
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: fixed_window}
)"),
                                                                  TestType::make(), clock);
  auto counts = std::make_shared<rltest::CountingListener>();
  auto exporter = std::make_shared<ratelimit::PrometheusExporter>();
  set.attach_listener(counts, {.with_keys = true});
  set.attach_listener(exporter);
  // All at 0 ms, one window. Per api_key 2, /login 3 for everyone:
  //   1 k1 /login  admitted (k1 1/2, login 1/3)
  //   2 k1 /login  admitted (k1 2/2, login 2/3)
  //   3 k1 /login  denied by api_key (k1 full); /login's dry run admits: not reported
  //   4 k2 /login  admitted (k2 1/2, login 3/3)
  //   5 k2 /login  denied by /login (full); api_key's dry run admits: not reported
  //   6 k3 /other  admitted (k3 1/2; /login does not match)
  // api_key: allowed 1, 2, 4, 6 = 4, limited 3 = 1; /login: allowed 1, 2, 4 = 3, limited 5 = 1.
  const std::vector<std::pair<std::string, std::string>> requests = {
      {"k1", "/login"}, {"k1", "/login"}, {"k1", "/login"},
      {"k2", "/login"}, {"k2", "/login"}, {"k3", "/other"}};
  const std::vector<bool> admitted = {true, true, false, true, false, true};
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto d = set.decide({{"api_key", requests[i].first}, {"path", requests[i].second}});
    CHECK(d.allowed == admitted[i]);
  }
  CHECK(counts->count("mon.api_key", Outcome::allowed) == 4);
  CHECK(counts->count("mon.api_key", Outcome::limited) == 1);
  CHECK(counts->count("mon.path_/login", Outcome::allowed) == 3);
  CHECK(counts->count("mon.path_/login", Outcome::limited) == 1);
  CHECK(counts->limited_key("api_key=k1") == 1);  // request 3
  CHECK(counts->limited_key("") == 1);            // request 5: /login is shared, no client
  CHECK(counts->total() == 4 + 1 + 3 + 1);

  const std::string text = exporter->render();
  CHECK(series_value(text, "ratelimit_decisions_total{name=\"mon.api_key\",outcome=\"allowed\"}") ==
        4);
  CHECK(series_value(
            text, "ratelimit_decisions_total{name=\"mon.path_/login\",outcome=\"limited\"}") == 1);
}

TEMPLATE_LIST_TEST_CASE(
    "Descriptor-list requests: shadow_mode limits report shadow_limited; detailed_metric names "
    "carry the request's values",
    "[monitor][rules]", Backends) {
  if constexpr (!one_node<TestType>) return;  // limits in two slots: see one_node
  ManualClock clock;
  ratelimit::RuleSet<typename TestType::Storage, ManualClock> set(ratelimit::Rules::from_string(R"(
domain: list
descriptors:
  - key: user
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: fixed_window}
  - key: route
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: fixed_window}
  - key: plan
    value_to_metric: true
    descriptors:
      - key: tenant
        value_to_metric: true
        rate_limit: {unit: second, requests_per_unit: 5, algorithm: fixed_window}
)"),
                                                                  TestType::make(), clock);
  auto counts = std::make_shared<rltest::CountingListener>();
  set.attach_listener(counts);
  ratelimit::RateLimitRequest req{
      "list", {{{{"user", "u1"}}}, {{{"route", "r9"}}}, {{{"plan", "gold"}, {"tenant", "t7"}}}}};
  // user: 1 per second, in shadow mode: the 1st admitted, the 2nd and 3rd would be denied.
  for (int i = 0; i < 3; ++i) CHECK(set.decide(req).allowed);
  CHECK(counts->count("list.user", Outcome::allowed) == 1);
  CHECK(counts->count("list.user", Outcome::shadow_limited) == 2);
  // detailed_metric: every part from the request; value_to_metric on the landing limit: its
  // catch-all parts from the request (plan, tenant).
  CHECK(counts->count("list.route_r9", Outcome::allowed) == 3);
  CHECK(counts->count("list.plan_gold.tenant_t7", Outcome::allowed) == 3);
}

TEMPLATE_LIST_TEST_CASE("A service's listeners follow its reloads", "[monitor][rules][service]",
                        Backends) {
  ManualClock clock;
  const auto config = [](int per_second) {
    const std::vector<ratelimit::RulesSource> sources = {
        {"svc.yaml",
         "domain: svc\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, "
         "requests_per_unit: " +
             std::to_string(per_second) + ", algorithm: fixed_window}\n"}};
    return ratelimit::RulesConfig::from_strings(sources);
  };
  ratelimit::RateLimitService<typename TestType::Storage, ManualClock> service(
      config(1), TestType::make(), clock);
  auto counts = std::make_shared<rltest::CountingListener>();
  service.attach_listener(counts);
  const ratelimit::RateLimitRequest req{"svc", {{{{"user", "u"}}}}};
  // Limit 1 per second: admitted, then limited.
  CHECK(service.should_rate_limit(req).allowed);
  CHECK_FALSE(service.should_rate_limit(req).allowed);
  // Reloaded at 3 per second (same path and unit: the counter, at 1, is kept): admitted twice
  // more (2 and 3), then limited.
  service.reload(config(3));
  CHECK(service.should_rate_limit(req).allowed);
  CHECK(service.should_rate_limit(req).allowed);
  CHECK_FALSE(service.should_rate_limit(req).allowed);
  CHECK(counts->count("svc.user", Outcome::allowed) == 1 + 2);
  CHECK(counts->count("svc.user", Outcome::limited) == 1 + 1);
  REQUIRE(service.detach_listener(*counts));
  (void)service.should_rate_limit(req);
  CHECK(counts->total() == 5);
}

// A non-blocking decision's completion may run after its limiter is gone (on Redis, on the I/O
// thread): it holds the listener set itself (detail::ObserverSet, shared), so the listeners
// still hear it and nothing reads freed memory (ASan).
TEMPLATE_LIST_TEST_CASE("An asynchronous decision is heard even when its limiter is gone first",
                        "[monitor][listener][async]", Backends) {
  ManualClock clock;
  auto storage = TestType::make();
  auto counts = std::make_shared<rltest::CountingListener>();
  std::promise<Decision> done;
  auto got = done.get_future();
  {
    auto limiter = bucket(storage, clock, "async-gone");
    limiter.attach_listener(counts);
    limiter.try_acquire_async("alice", 1, [&done](Decision d) { done.set_value(d); });
  }  // the limiter (and its attach point) destroyed, perhaps before the reply
  const Decision d = got.get();
  CHECK(d.allowed);  // a fresh bucket of 3: 3 - 1 left
  CHECK(d.remaining == 2);
  CHECK(counts->count("async-gone", Outcome::allowed) == 1);
}
