// Monitoring under many keys, in process only: the Prometheus exposition stays under a fixed size
// whatever the number of distinct keys and names; label values are escaped as the format requires;
// bad exporter options are refused naming the field.

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

#include <ratelimit/metrics/prometheus.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/testing/manual_clock.hpp>

#include "support/sanitized.hpp"

namespace monitor_memory {

std::size_t count_lines_starting(const std::string& text, const std::string& start) {
  std::size_t n = 0;
  for (std::size_t at = 0; (at = text.find("\n" + start, at)) != std::string::npos; ++at) ++n;
  return n;
}

}  // namespace monitor_memory

TEST_CASE("1,000,000 distinct limited keys keep the exposition under a fixed size",
          "[monitor][prometheus][memory]") {
  using ratelimit::ManualClock;
  ManualClock clock;
  // Capacity 1 and cost 2: every request can never succeed, so each is limited and nothing is
  // stored (a denial changes nothing).
  ratelimit::TokenBucket<ManualClock> limiter({1, ratelimit::per_second(1)}, {}, clock, "flood");
  auto exporter = std::make_shared<ratelimit::PrometheusExporter>();
  limiter.attach_listener(exporter, {.with_keys = true});
  const std::size_t bound = exporter->max_bytes();
  // A tenth in a sanitizer build (support/sanitized.hpp); the bounds below hold for either.
  constexpr int keys = rltest::sanitized ? 100'000 : 1'000'000;
  std::size_t after_1000 = 0;
  for (int i = 0; i < keys; ++i) {
    (void)limiter.try_acquire("client-" + std::to_string(i), 2);
    if (i == 999) after_1000 = exporter->render().size();
  }
  const std::string text = exporter->render();
  CHECK(text.size() <= bound);
  // The size no longer grows with the keys: only numbers change, each line's by at most 6
  // digits (a count of 0 -> 1,000,000 at most), and the top list's clients by at most 3 bytes
  // each ("client-999" -> "client-999999" at most).
  const std::size_t lines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
  CHECK(text.size() <= after_1000 + 6 * lines + 3 * 10);
  CHECK(text.find("ratelimit_decisions_total{name=\"flood\",outcome=\"limited\"} " +
                  std::to_string(keys) + "\n") != std::string::npos);
  // The default top list: 10 clients.
  CHECK(monitor_memory::count_lines_starting(text, "ratelimit_top_limited_requests{") == 10);
}

TEST_CASE("Decision names beyond max_names are counted as __other__", "[monitor][prometheus]") {
  ratelimit::PrometheusOptions o;
  o.max_names = 3;
  ratelimit::PrometheusExporter exporter(o);
  ratelimit::DecisionEvent e{};
  std::string name;
  for (int i = 0; i < 10; ++i) {
    name = "rule." + std::to_string(i);
    e.name = name;
    exporter.on_decision(e);
  }
  const std::string text = exporter.render();
  // rule.0 .. rule.2 have their series; the 7 others share "__other__".
  CHECK(text.find("{name=\"rule.2\",outcome=\"allowed\"} 1\n") != std::string::npos);
  CHECK(text.find("{name=\"rule.3\"") == std::string::npos);
  CHECK(text.find("{name=\"__other__\",outcome=\"allowed\"} 7\n") != std::string::npos);
  CHECK(text.size() <= exporter.max_bytes());
}

TEST_CASE("Label values are escaped and cut as the exposition format requires",
          "[monitor][prometheus]") {
  using E = ratelimit::PrometheusExporter;
  CHECK(E::escape("plain /path-1") == "plain /path-1");
  CHECK(E::escape("a\"b") == "a\\\"b");
  CHECK(E::escape("line\nbreak") == "line\\nbreak");
  // A backslash shows as two (one alone starts \xHH); other bytes as the text \xHH.
  CHECK(E::escape("a\\b") == "a\\\\\\\\b");
  CHECK(E::escape(std::string("\0\x01\x7f\xff", 4)) == "\\\\x00\\\\x01\\\\x7f\\\\xff");

  ratelimit::PrometheusOptions o;
  o.max_label_bytes = 32;
  ratelimit::PrometheusExporter exporter(o);
  ratelimit::DecisionEvent e{};
  const std::string long_name(1000, 'n');
  e.name = long_name;
  exporter.on_decision(e);
  // Cut to 32 bytes: the first 32 - 17 = 15, "~" and 16 hex digits.
  const std::string text = exporter.render();
  const auto at = text.find("{name=\"" + std::string(15, 'n') + "~");
  REQUIRE(at != std::string::npos);
  CHECK(text.compare(at + 7 + 32, 2, "\",") == 0);  // {name=" is 7 bytes, the value 32
  CHECK(text.size() <= exporter.max_bytes());
}

TEST_CASE("Bad exporter options are refused naming the field and value", "[monitor][prometheus]") {
  const auto refused = [](ratelimit::PrometheusOptions o, const std::string& what) {
    try {
      ratelimit::PrometheusExporter e(std::move(o));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what()).find(what) != std::string::npos;
    }
    return false;
  };
  ratelimit::PrometheusOptions o;
  o.prefix = "9bad";
  CHECK(refused(o, "PrometheusOptions.prefix = \"9bad\""));
  o = {};
  o.max_names = 0;
  CHECK(refused(o, "PrometheusOptions.max_names = 0"));
  o = {};
  o.tracked_clients = 5;  // below top_clients (10)
  CHECK(refused(o, "PrometheusOptions.tracked_clients = 5"));
  o = {};
  o.max_label_bytes = 31;
  CHECK(refused(o, "PrometheusOptions.max_label_bytes = 31"));
}

TEST_CASE("The exporter counts hits beside decisions and times every call it is given",
          "[monitor][prometheus]") {
  ratelimit::PrometheusExporter exporter;
  ratelimit::DecisionEvent e{};
  e.name = "d.k";
  e.latency = std::chrono::nanoseconds{-1};  // not sampled
  const auto decide = [&](ratelimit::Outcome o, std::int64_t cost) {
    e.outcome = o;
    e.cost = cost;
    exporter.on_decision(e);
  };
  decide(ratelimit::Outcome::allowed, 3);  // a rule's hits_addend of 3
  decide(ratelimit::Outcome::allowed, 1);
  decide(ratelimit::Outcome::limited, 5);
  decide(ratelimit::Outcome::allowed, 0);      // a read: a decision, no hit
  e.latency = std::chrono::nanoseconds{1000};  // one sampled decision
  decide(ratelimit::Outcome::shadow_limited, 2);
  exporter.record_call(std::chrono::nanoseconds{1500});
  exporter.record_call(std::chrono::milliseconds{2});
  exporter.record_call(std::chrono::seconds{20});
  for (int i = 0; i < 3; ++i)
    exporter.on_round_trip({"127.0.0.1:6379", std::chrono::microseconds{100}, true});
  const std::string text = exporter.render();
  const auto has = [&](const std::string& line) {
    INFO(line);
    CHECK(text.find("\n" + line + "\n") != std::string::npos);
  };
  // Decisions: allowed 3 (the events of cost 3, 1 and 0), limited 1, shadow_limited 1.
  has("ratelimit_decisions_total{name=\"d.k\",outcome=\"allowed\"} 3");
  has("ratelimit_decisions_total{name=\"d.k\",outcome=\"limited\"} 1");
  // Hits: allowed 3 + 1 + 0 = 4, limited 5, shadow_limited 2, degraded 0.
  has("ratelimit_hits_total{name=\"d.k\",outcome=\"allowed\"} 4");
  has("ratelimit_hits_total{name=\"d.k\",outcome=\"limited\"} 5");
  has("ratelimit_hits_total{name=\"d.k\",outcome=\"shadow_limited\"} 2");
  has("ratelimit_hits_total{name=\"d.k\",outcome=\"degraded\"} 0");
  // The latency histogram holds the one sampled decision only.
  has("ratelimit_decision_latency_seconds_count 1");
  // Every call: 1,500 ns <= 2,500 ns; 2 ms <= 2.5 ms; 20 s over the last bound (10 s).
  has("ratelimit_call_duration_seconds_bucket{le=\"0.000001\"} 0");
  has("ratelimit_call_duration_seconds_bucket{le=\"0.0000025\"} 1");
  has("ratelimit_call_duration_seconds_bucket{le=\"0.0025\"} 2");
  has("ratelimit_call_duration_seconds_bucket{le=\"10.0\"} 2");
  has("ratelimit_call_duration_seconds_bucket{le=\"+Inf\"} 3");
  has("ratelimit_call_duration_seconds_count 3");
  // 1,500 + 2,000,000 + 20,000,000,000 ns = 20.0020015 s.
  has("ratelimit_call_duration_seconds_sum 20.0020015");
  has("ratelimit_redis_round_trip_seconds_count 3");
  CHECK(text.size() <= exporter.max_bytes());
}
