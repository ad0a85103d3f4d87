// The gRPC rate limit server, called over real gRPC on a loopback port by a C++ client built from
// the same wire schema, with the time from a ManualClock. Each case names the part of the
// reference service (envoyproxy/ratelimit, Go) it follows; the expected numbers are derived in
// the comments from the limits and the window arithmetic.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <catch2/catch.hpp>

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/rules.hpp>

#include "counters.hpp"
#include "support/counting_listener.hpp"
#if defined(RATELIMIT_SERVER_HAVE_REDIS)
#include "support/cluster_backend.hpp"
#include "support/redis_backend.hpp"
#endif
#include "grpc_server.hpp"
#include "rls.grpc.pb.h"
#include "rls_request.hpp"
#include "server_algorithms.hpp"
#include "service.hpp"

namespace {

namespace pb = envoy::service::ratelimit::v3;
using Entries = std::vector<std::pair<std::string, std::string>>;
using Code = pb::RateLimitResponse;

// 2023-11-15T00:00:00Z: a whole number of days since the epoch (19676 * 86400 s), so every
// second, minute, hour and day window starts here.
constexpr std::int64_t day0_s = 19676LL * 86400;

using Desc = rltest::RlsDescriptor;

/// The counters of this run of a test case: each case runs once in process and, in a build with
/// Redis, once on the Redis server of RATELIMIT_TEST_REDIS (which must be set: see
/// tests/support/redis_backend.hpp), under a key prefix of its own. The same executable run with
/// RATELIMIT_SERVER_TEST_ON_CLUSTER=1 (the ctest server_cluster_test) runs each case once, on the
/// cluster of RATELIMIT_TEST_CLUSTER (tests/support/cluster_backend.hpp): one build, two tests.
bool on_cluster() {
  const char* v = std::getenv("RATELIMIT_SERVER_TEST_ON_CLUSTER");
  return v != nullptr && std::string_view(v) == "1";
}

std::shared_ptr<ratelimit::server::Counters> counters_under_test() {
#if defined(RATELIMIT_SERVER_HAVE_REDIS)
  if (on_cluster()) {
    INFO("storage: Redis Cluster");
    // The Go keys under a prefix of their own too (CACHE_KEY_PREFIX), as the library's keys.
    return ratelimit::server::make_redis_cluster_counters(
        rltest::test_cluster_options("server"), nullptr,
        {rltest::cluster_unique_prefix("go"), 300});
  }
  const bool redis = GENERATE(false, true);
  if (redis) {
    INFO("storage: Redis");
    return ratelimit::server::make_redis_counters(rltest::test_redis_options("server"), nullptr,
                                                  {rltest::unique_prefix("go"), 300});
  }
#endif
  return ratelimit::server::make_memory_counters();
}

/// A server on a free loopback port serving `yaml`, with a client connected to it.
struct Fixture {
  explicit Fixture(const std::string& yaml, ratelimit::server::ServiceSettings settings = {},
                   std::shared_ptr<ratelimit::server::Counters> counters = counters_under_test()) {
    clock.set(std::chrono::seconds{day0_s});
    service = std::make_shared<ratelimit::server::Service>(std::move(counters), settings,
                                                           [c = clock] { return c.now(); });
    load(yaml);
    server = std::make_unique<ratelimit::server::GrpcServer>(service, "127.0.0.1:0");
    stub = pb::RateLimitService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server->port()), grpc::InsecureChannelCredentials()));
  }

  void load(const std::string& yaml) {
    const ratelimit::RulesSource sources[] = {{"test.yaml", yaml}};
    service->reload(
        ratelimit::RulesConfig::from_strings<ratelimit::server::ServerAlgorithms>(sources));
  }

  std::pair<grpc::Status, pb::RateLimitResponse> call(const std::string& domain,
                                                      const std::vector<Desc>& descs,
                                                      std::uint32_t hits_addend = 0) {
    return rltest::rls_call(*stub, rltest::rls_request(domain, descs, hits_addend));
  }

  /// A call expected to succeed.
  pb::RateLimitResponse ok(const std::string& domain, const std::vector<Desc>& descs,
                           std::uint32_t hits_addend = 0) {
    auto [st, res] = call(domain, descs, hits_addend);
    INFO(st.error_message());
    REQUIRE(st.ok());
    REQUIRE(res.statuses_size() == static_cast<int>(descs.size()));
    return res;
  }

  ratelimit::ManualClock clock;
  std::shared_ptr<ratelimit::server::Service> service;
  std::unique_ptr<ratelimit::server::GrpcServer> server;
  std::unique_ptr<pb::RateLimitService::Stub> stub;
};

// The reference README's second example ("messaging"): a nested limit per marketing recipient
// and a top-level limit per recipient.
const std::string messaging = R"(
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
)";

}  // namespace

TEST_CASE("A descriptor within its limit is OK with the limit, the remaining and the reset",
          "[server]") {
  // Source: the reference README, example "messaging" (5 marketing messages a day per number).
  Fixture f(messaging);
  f.clock.advance(std::chrono::seconds{3600});  // 01:00: the day window ends in 23 h
  const auto res =
      f.ok("messaging", {{{{"message_type", "marketing"}, {"to_number", "2061111111"}}}});
  CHECK(res.overall_code() == Code::OK);
  const auto& s = res.statuses(0);
  CHECK(s.code() == Code::OK);
  CHECK(s.current_limit().requests_per_unit() == 5);
  CHECK(s.current_limit().unit() == pb::RateLimitResponse::RateLimit::DAY);
  CHECK(s.limit_remaining() == 4);                            // 5 - 1 hit
  CHECK(s.duration_until_reset().seconds() == 86400 - 3600);  // the day's end - 01:00
}

TEST_CASE("The sixth message of a day is over the limit, and every hit is counted", "[server]") {
  // Source: the reference README, "messaging": 5 per day; fixed_cache_impl.go counts each hit
  // with INCRBY whether or not it is over, so the count keeps rising past the limit.
  Fixture f(messaging);
  const Desc d{{{"message_type", "marketing"}, {"to_number", "2061111111"}}};
  for (int i = 1; i <= 5; ++i) {
    const auto res = f.ok("messaging", {d});
    CHECK(res.overall_code() == Code::OK);
    CHECK(res.statuses(0).limit_remaining() == static_cast<std::uint32_t>(5 - i));
  }
  const auto sixth = f.ok("messaging", {d});
  CHECK(sixth.overall_code() == Code::OVER_LIMIT);
  CHECK(sixth.statuses(0).code() == Code::OVER_LIMIT);
  CHECK(sixth.statuses(0).limit_remaining() == 0);
  // Seven hits are counted (5 + the refused 6th + this read's 0): a read with hits_addend 0 sees
  // 6 > 5, still over. A request-wide limit override of 7/day on the same entries is another
  // counter, so it is no witness; the read is.
  Desc read = d;
  read.hits = 0;
  CHECK(f.ok("messaging", {read}).statuses(0).code() == Code::OVER_LIMIT);
  // The next day the window is fresh: 5 - 1 = 4 remain.
  f.clock.advance(std::chrono::seconds{86400});
  CHECK(f.ok("messaging", {d}).statuses(0).limit_remaining() == 4);
}

TEST_CASE("Nested descriptors and several descriptors in one request are decided each",
          "[server]") {
  // Source: the reference README, "messaging": the request carries two descriptors, the
  // marketing one (5/day) and the plain recipient one (100/day).
  Fixture f(messaging);
  const Desc marketing{{{"message_type", "marketing"}, {"to_number", "2061111111"}}};
  const Desc number{{{"to_number", "2061111111"}}};
  const auto res = f.ok("messaging", {marketing, number});
  CHECK(res.statuses(0).current_limit().requests_per_unit() == 5);
  CHECK(res.statuses(0).limit_remaining() == 4);  // 5 - 1
  CHECK(res.statuses(1).current_limit().requests_per_unit() == 100);
  CHECK(res.statuses(1).limit_remaining() == 99);  // 100 - 1
  // Another number has its own counters (the descriptor has no value: one per value).
  const auto other = f.ok("messaging", {{{{"to_number", "2062222222"}}}});
  CHECK(other.statuses(0).limit_remaining() == 99);
}

TEST_CASE("An unknown domain and an unmatched descriptor are OK without a limit", "[server]") {
  // Source: config_impl.go GetLimit returns no limit for an unknown domain or a descriptor that
  // leaves the tree; ratelimit.go then reports OK with no current_limit.
  Fixture f(messaging);
  const auto unknown = f.ok("nowhere", {{{{"to_number", "1"}}}});
  CHECK(unknown.overall_code() == Code::OK);
  CHECK(unknown.statuses(0).code() == Code::OK);
  CHECK_FALSE(unknown.statuses(0).has_current_limit());
  const auto unmatched = f.ok("messaging", {{{{"message_type", "marketing"}}}});
  CHECK(unmatched.statuses(0).code() == Code::OK);  // lands on a descriptor without a limit
  CHECK_FALSE(unmatched.statuses(0).has_current_limit());
}

TEST_CASE("An empty domain or descriptor list is the reference's error", "[server]") {
  // Source: ratelimit.go shouldRateLimitWorker: checkServiceErr panics with these messages and
  // ShouldRateLimit returns them as a Go error, which grpc-go reports as UNKNOWN.
  Fixture f(messaging);
  const auto [no_domain, r1] = f.call("", {{{{"to_number", "1"}}}});
  CHECK(no_domain.error_code() == grpc::StatusCode::UNKNOWN);
  CHECK(no_domain.error_message() == "rate limit domain must not be empty");
  const auto [no_desc, r2] = f.call("messaging", {});
  CHECK(no_desc.error_code() == grpc::StatusCode::UNKNOWN);
  CHECK(no_desc.error_message() == "rate limit descriptor list must not be empty");
}

TEST_CASE("Wildcards and exact values pick the most specific limit", "[server]") {
  // Source: the reference README, "Example 3" (a per-IP limit with a stricter one for one
  // address) and its section on wildcard values ("value: /foo/*").
  Fixture f(R"(
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /foo/*
    rate_limit: {unit: minute, requests_per_unit: 3}
)");
  CHECK(f.ok("edge_proxy_per_ip", {{{{"remote_address", "10.0.0.1"}}}})
            .statuses(0)
            .limit_remaining() == 9);  // 10 - 1
  const auto strict = f.ok("edge_proxy_per_ip", {{{{"remote_address", "50.0.0.5"}}}});
  CHECK(strict.statuses(0).current_limit().requests_per_unit() == 1);
  CHECK(strict.statuses(0).limit_remaining() == 0);  // 1 - 1
  CHECK(f.ok("edge_proxy_per_ip", {{{{"remote_address", "50.0.0.5"}}}}).overall_code() ==
        Code::OVER_LIMIT);  // 2 > 1
  const auto wild = f.ok("edge_proxy_per_ip", {{{{"path", "/foo/bar"}}}});
  CHECK(wild.statuses(0).current_limit().requests_per_unit() == 3);
  CHECK(wild.statuses(0).limit_remaining() == 2);  // 3 - 1
  CHECK_FALSE(f.ok("edge_proxy_per_ip", {{{{"path", "/bar"}}}}).statuses(0).has_current_limit());
}

TEST_CASE("An unlimited descriptor is OK with the most remaining", "[server]") {
  // Source: the reference README, "unlimited" limits; ratelimit.go reports them OK with
  // limit_remaining = MaxUint32 and never counts them.
  Fixture f(R"(
domain: internal
descriptors:
  - key: service
    value: health
    rate_limit: {unlimited: true}
)");
  for (int i = 0; i < 3; ++i) {
    const auto res = f.ok("internal", {{{{"service", "health"}}}});
    CHECK(res.statuses(0).code() == Code::OK);
    CHECK(res.statuses(0).limit_remaining() == std::numeric_limits<std::uint32_t>::max());
    CHECK_FALSE(res.statuses(0).has_current_limit());
  }
}

TEST_CASE("A limit named in another applying limit's replaces is not applied", "[server]") {
  // Source: the reference README, "replaces": when both apply, only the replacing one counts.
  Fixture f(R"(
domain: example
descriptors:
  - key: key1
    rate_limit: {name: one, unit: minute, requests_per_unit: 1}
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 10
      replaces: [{name: one}]
)");
  const auto both = f.ok("example", {{{{"key1", "a"}}}, {{{"key2", "b"}}}});
  CHECK_FALSE(both.statuses(0).has_current_limit());  // replaced: OK, no limit
  CHECK(both.statuses(1).limit_remaining() == 9);     // 10 - 1
  // Alone, key1's limit applies, and it was not counted above: 1 - 1 = 0 remain.
  const auto alone = f.ok("example", {{{{"key1", "a"}}}});
  CHECK(alone.statuses(0).code() == Code::OK);
  CHECK(alone.statuses(0).limit_remaining() == 0);
}

TEST_CASE("A shadow-mode limit reports OK when over, the global shadow mode keeps the statuses",
          "[server]") {
  // Source: the reference README, "Shadow mode" (per descriptor: base_limiter.go reports OK,
  // remaining 0) and the SHADOW_MODE setting (ratelimit.go: statuses as they are, overall OK).
  const std::string yaml = R"(
domain: shadow
descriptors:
  - key: user
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: team
    rate_limit: {unit: second, requests_per_unit: 1}
)";
  {
    Fixture f(yaml);
    f.ok("shadow", {{{{"user", "u"}}}});
    const auto res = f.ok("shadow", {{{{"user", "u"}}}});  // 2 > 1, in shadow mode
    CHECK(res.overall_code() == Code::OK);
    CHECK(res.statuses(0).code() == Code::OK);
    CHECK(res.statuses(0).limit_remaining() == 0);
  }
  {
    ratelimit::server::ServiceSettings settings;
    settings.global_shadow_mode = true;
    Fixture f(yaml, settings);
    f.ok("shadow", {{{{"team", "t"}}}});
    const auto res = f.ok("shadow", {{{{"team", "t"}}}});  // 2 > 1
    CHECK(res.statuses(0).code() == Code::OVER_LIMIT);
    CHECK(res.overall_code() == Code::OK);
  }
}

TEST_CASE("hits_addend spends several units, and 0 on a descriptor only reads", "[server]") {
  // Source: the request's hits_addend (rls.proto; fixed_cache_impl.go uses max(1, hits_addend))
  // and the descriptor's own hits_addend, which replaces it.
  Fixture f(messaging);
  const Desc d{{{"to_number", "206"}}};
  CHECK(f.ok("messaging", {d}, 40).statuses(0).limit_remaining() == 60);  // 100 - 40
  Desc read = d;
  read.hits = 0;
  CHECK(f.ok("messaging", {read}).statuses(0).limit_remaining() == 60);  // 100 - 40 - 0
  Desc many = d;
  many.hits = 70;
  const auto over = f.ok("messaging", {many});  // 40 + 70 = 110 > 100
  CHECK(over.statuses(0).code() == Code::OVER_LIMIT);
  // The refused 70 were counted: 110 > 100 is still over on a read.
  CHECK(f.ok("messaging", {read}).statuses(0).code() == Code::OVER_LIMIT);
}

TEST_CASE("A descriptor's limit override replaces the configured limit", "[server]") {
  // Source: the reference README, "Rate limit override" (config_impl.go GetLimit: the
  // descriptor's limit, never in shadow mode).
  Fixture f(messaging);
  Desc d{{{"to_number", "206"}}};
  d.override_rpu = 2;
  d.override_unit = 2;  // MINUTE
  f.clock.advance(std::chrono::seconds{15});
  const auto first = f.ok("messaging", {d});
  CHECK(first.statuses(0).current_limit().requests_per_unit() == 2);
  CHECK(first.statuses(0).current_limit().unit() == pb::RateLimitResponse::RateLimit::MINUTE);
  CHECK(first.statuses(0).limit_remaining() == 1);                  // 2 - 1
  CHECK(first.statuses(0).duration_until_reset().seconds() == 45);  // 60 - 15
  f.ok("messaging", {d});
  CHECK(f.ok("messaging", {d}).overall_code() == Code::OVER_LIMIT);  // 3 > 2
  // The reference's key has neither the limit nor the unit (src/limiter/cache_key.go): at
  // day0 + 15 s the minute and the day windows both start at day0, so the configured 100/day
  // limit counts on the same key: 3 override hits + 1 = 4, 100 - 4 = 96.
  CHECK(f.ok("messaging", {{{{"to_number", "206"}}}}).statuses(0).limit_remaining() == 96);
  // A minute later the minute's key is day0 + 60: the day's count is its own again, 100 - 5.
  f.clock.advance(std::chrono::seconds{60});
  CHECK(f.ok("messaging", {d}).statuses(0).limit_remaining() == 1);  // 2 - 1
  CHECK(f.ok("messaging", {{{{"to_number", "206"}}}}).statuses(0).limit_remaining() == 95);
  // An unknown unit is refused, naming the field.
  Desc bad = d;
  bad.override_unit = 9;
  const auto [st, res] = f.call("messaging", {bad});
  CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(st.error_message(), Catch::Contains("RateLimitOverride.unit = 9"));
}

TEST_CASE("Response headers name the descriptor closest to its limit", "[server]") {
  // Source: the reference README, RESPONSE_HEADERS_ENABLED: RateLimit-Limit, -Remaining and
  // -Reset of the descriptor with the least remaining.
  ratelimit::server::ServiceSettings settings;
  settings.response_headers = true;
  Fixture f(messaging, settings);
  f.clock.advance(std::chrono::seconds{86400 - 10});  // 10 s before the day ends
  const auto res = f.ok(
      "messaging", {{{{"message_type", "marketing"}, {"to_number", "1"}}}, {{{"to_number", "1"}}}});
  REQUIRE(res.response_headers_to_add_size() == 3);
  CHECK(res.response_headers_to_add(0).key() == "RateLimit-Limit");
  CHECK(res.response_headers_to_add(0).value() == "5");  // the 5/day limit: 4 left < 99
  CHECK(res.response_headers_to_add(1).value() == "4");
  CHECK(res.response_headers_to_add(2).value() == "10");
}

TEST_CASE("A reload keeps the counts of unchanged limits", "[server]") {
  // Source: the reference reloads its runtime directory on change (ratelimit.go reloadConfig);
  // here a limit keeps its counters while its path and unit are unchanged.
  Fixture f(messaging);
  const Desc d{{{"to_number", "206"}}};
  f.ok("messaging", {d}, 10);  // 100 - 10 = 90 left
  f.load(messaging + R"(
  - key: other
    rate_limit: {unit: day, requests_per_unit: 1}
)");
  CHECK(f.ok("messaging", {d}).statuses(0).limit_remaining() == 89);  // 90 - 1
}

TEST_CASE("A request of 10,000 descriptors is answered whole", "[server]") {
  // Hostile input: the reference sets no bound on the descriptors of a request; the server
  // answers each (every one within 100/day: 100 - 1 = 99 remain on each number's counter).
  Fixture f(messaging);
  std::vector<Desc> many;
  for (int i = 0; i < 10'000; ++i) many.push_back(Desc{{{"to_number", std::to_string(i)}}});
  const auto res = f.ok("messaging", many);
  CHECK(res.overall_code() == Code::OK);
  CHECK(res.statuses(0).limit_remaining() == 99);
  CHECK(res.statuses(9'999).limit_remaining() == 99);
}

TEST_CASE("NUL bytes in values are values like any other", "[server]") {
  // Regression guard: a counter key built by joining values with a separator would let
  // "a\0b" and "a" + "b" share a counter; the key is length-prefixed, so they do not.
  Fixture f(R"(
domain: d
descriptors:
  - key: k
    descriptors:
      - key: j
        rate_limit: {unit: minute, requests_per_unit: 1}
)");
  const std::string nul("a\0b", 3);
  CHECK(f.ok("d", {{{{"k", nul}, {"j", ""}}}}).statuses(0).limit_remaining() == 0);  // 1 - 1
  CHECK(f.ok("d", {{{{"k", "a"}, {"j", std::string("\0b", 2)}}}}).statuses(0).limit_remaining() ==
        0);  // its own counter: 1 - 1
}

TEST_CASE("The over-limit cache answers a counter over its limit without counting", "[server]") {
  // Source: the reference's local cache (LOCAL_CACHE_SIZE_IN_BYTES; base_limiter.go and
  // fixed_cache_impl.go, DoLimit): a key over its limit is remembered for its window; a later
  // call on it is OVER_LIMIT without INCRBY. By default (getHitsAddend with
  // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT false) only that key is skipped: the call's other
  // descriptors are still counted in full.
  ratelimit::server::ServiceSettings settings;
  settings.over_limit_cache_bytes = 1 << 20;
  Fixture f(messaging, settings);
  const Desc marketing{{{"message_type", "marketing"}, {"to_number", "1"}}};  // 5 per day
  const Desc number{{{"to_number", "2"}}};                                    // 100 per day
  f.ok("messaging", {marketing}, 6);  // 6 > 5: over, remembered
  const auto res = f.ok("messaging", {marketing, number});
  CHECK(res.overall_code() == Code::OVER_LIMIT);
  CHECK(res.statuses(0).code() == Code::OVER_LIMIT);
  CHECK(res.statuses(0).limit_remaining() == 0);
  CHECK(res.statuses(1).limit_remaining() == 99);  // counted beside it: 100 - 1
  // Alone, its second hit: 100 - 2 = 98.
  CHECK(f.ok("messaging", {number}).statuses(0).limit_remaining() == 98);
  // The next day the entry has expired with its window: 5 - 1 = 4 remain.
  f.clock.advance(std::chrono::seconds{86400});
  CHECK(f.ok("messaging", {marketing}).statuses(0).limit_remaining() == 4);
}

TEST_CASE("Units week, month and year are the reference's epoch-aligned windows of 7, 30, 365 days",
          "[server]") {
  // Source: the reference's UnitToDivider (src/utils/utilities.go): WEEK 7 * 86400, MONTH
  // 30 * 86400, YEAR 365 * 86400 seconds; CalculateReset: divider - now % divider. Unit names
  // are read in any case (config_impl.go upper-cases them).
  Fixture f(R"(
domain: long
descriptors:
  - key: w
    rate_limit: {unit: Week, requests_per_unit: 2}
  - key: m
    rate_limit: {unit: month, requests_per_unit: 2}
  - key: y
    rate_limit: {unit: YEAR, requests_per_unit: 2}
)");
  using RL = pb::RateLimitResponse::RateLimit;
  // day0 is day 19676 of the epoch: 19676 = 7 * 2810 + 6 = 30 * 655 + 26 = 365 * 53 + 331, so
  // the windows end 1, 4 and 34 days later.
  struct Case {
    const char* key;
    RL::Unit unit;
    std::int64_t reset_s;
  };
  const Case cases[] = {
      {"w", RL::WEEK, 1 * 86400}, {"m", RL::MONTH, 4 * 86400}, {"y", RL::YEAR, 34 * 86400}};
  for (const Case& c : cases) {
    INFO(c.key);
    const auto first = f.ok("long", {{{{c.key, "a"}}}});
    CHECK(first.statuses(0).current_limit().unit() == c.unit);
    CHECK(first.statuses(0).limit_remaining() == 1);  // 2 - 1
    CHECK(first.statuses(0).duration_until_reset().seconds() == c.reset_s);
  }
  // One second before the week's end: still the same window, the third hit is over (3 > 2).
  f.clock.advance(std::chrono::seconds{86400 - 1});
  f.ok("long", {{{{"w", "a"}}}});
  const auto third = f.ok("long", {{{{"w", "a"}}}});
  CHECK(third.overall_code() == Code::OVER_LIMIT);
  CHECK(third.statuses(0).duration_until_reset().seconds() == 1);
  // At the week's end a new window of 604800 s starts: 2 - 1 remain.
  f.clock.advance(std::chrono::seconds{1});
  const auto fresh = f.ok("long", {{{{"w", "a"}}}});
  CHECK(fresh.statuses(0).limit_remaining() == 1);
  CHECK(fresh.statuses(0).duration_until_reset().seconds() == 7 * 86400);
  // The month's window is still the first: its count was 1, now 2 of 2.
  const auto month = f.ok("long", {{{{"m", "a"}}}});
  CHECK(month.statuses(0).limit_remaining() == 0);
  CHECK(month.statuses(0).duration_until_reset().seconds() == 3 * 86400);  // 4 days - 1 day
}

TEST_CASE("A limit override takes WEEK by its wire number 7, as the reference casts it",
          "[server]") {
  // Source: config_impl.go GetLimit casts the override's unit number to the response's enum,
  // where WEEK = 7 (Envoy's rls.proto); UnitToDivider gives 604800 s.
  Fixture f(messaging);
  Desc d{{{"to_number", "206"}}};
  d.override_rpu = 3;
  d.override_unit = 7;
  const auto res = f.ok("messaging", {d});
  CHECK(res.statuses(0).current_limit().unit() == pb::RateLimitResponse::RateLimit::WEEK);
  CHECK(res.statuses(0).limit_remaining() == 2);                         // 3 - 1
  CHECK(res.statuses(0).duration_until_reset().seconds() == 1 * 86400);  // 19676 % 7 = 6
}

TEST_CASE("Rules with the reference's units load with the server's registry", "[server]") {
  const ratelimit::RulesSource year[] = {
      {"y.yaml",
       "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, "
       "requests_per_unit: 1}\n"}};
  // A year (365 days) is a unit of the library's own registry too.
  CHECK_NOTHROW(ratelimit::RulesConfig::from_strings(year));
  CHECK_NOTHROW(ratelimit::RulesConfig::from_strings<ratelimit::server::ServerAlgorithms>(year));
  // The reference's windows have no time zone: refused naming the field, the file and the
  // descriptor's line (3), where the loader reports a limit's parameters.
  const ratelimit::RulesSource zoned[] = {
      {"z.yaml",
       "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: week, "
       "requests_per_unit: 1, time_zone: Europe/Madrid}\n"}};
  CHECK_THROWS_WITH(
      ratelimit::RulesConfig::from_strings<ratelimit::server::ServerAlgorithms>(zoned),
      Catch::StartsWith("z.yaml:3: rate_limit.time_zone = \"Europe/Madrid\""));
}

TEST_CASE("A rule naming a library algorithm is decided by it, a rule without one by the Go window",
          "[server]") {
  // The library's extension `rate_limit.algorithm`. A token bucket of capacity 3 refilled at
  // 3 per minute gains one token every 60 / 3 = 20 s; a denied hit spends nothing.
  Fixture f(R"(
domain: alg
descriptors:
  - key: tb
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: token_bucket}
  - key: none
    rate_limit: {unit: minute, requests_per_unit: 0, algorithm: token_bucket}
  - key: go
    rate_limit: {unit: minute, requests_per_unit: 3}
)");
  // After k hits from full the bucket is full again k * 20 s later (duration_until_reset).
  for (std::uint32_t k = 1; k <= 3; ++k) {
    INFO(k);
    const auto res = f.ok("alg", {{{{"tb", "a"}}}});
    CHECK(res.statuses(0).code() == Code::OK);
    CHECK(res.statuses(0).current_limit().requests_per_unit() == 3);
    CHECK(res.statuses(0).current_limit().unit() == pb::RateLimitResponse::RateLimit::MINUTE);
    CHECK(res.statuses(0).limit_remaining() == 3 - k);
    CHECK(res.statuses(0).duration_until_reset().seconds() == 20 * k);
  }
  // The fourth is denied: the next token comes in 20 s (retry_after).
  const auto denied = f.ok("alg", {{{{"tb", "a"}}}});
  CHECK(denied.overall_code() == Code::OVER_LIMIT);
  CHECK(denied.statuses(0).limit_remaining() == 0);
  CHECK(denied.statuses(0).duration_until_reset().seconds() == 20);
  // A read (the descriptor's hits_addend 0) is a peek: 10 s later still no token, nothing spent.
  f.clock.advance(std::chrono::seconds{10});
  Desc read{{{"tb", "a"}}};
  read.hits = 0;
  CHECK(f.ok("alg", {read}).statuses(0).limit_remaining() == 0);
  // 20 s after the denial one token is back (the denial spent none): admitted, 0 remain.
  f.clock.advance(std::chrono::seconds{10});
  const auto again = f.ok("alg", {{{{"tb", "a"}}}});
  CHECK(again.statuses(0).code() == Code::OK);
  CHECK(again.statuses(0).limit_remaining() == 0);
  // requests_per_unit 0 denies every call; its reset is the unit's length (it never admits).
  const auto none = f.ok("alg", {{{{"none", "a"}}}});
  CHECK(none.statuses(0).code() == Code::OVER_LIMIT);
  CHECK(none.statuses(0).current_limit().requests_per_unit() == 0);
  CHECK(none.statuses(0).duration_until_reset().seconds() == 60);
  // The rule without an algorithm is the Go window: the fourth hit of its minute is over
  // (4 > 3).
  for (int k = 0; k < 3; ++k) f.ok("alg", {{{{"go", "a"}}}});
  CHECK(f.ok("alg", {{{{"go", "a"}}}}).overall_code() == Code::OVER_LIMIT);
}

// All or nothing is refused with a cluster (settings.cpp): one script cannot span its slots.
// Tagged [no_cluster]: server_cluster_test leaves these out.
TEST_CASE("All or nothing: a call's descriptors are counted only if every one is within its limit",
          "[server][no_cluster]") {
  // RATELIMIT_SERVER_ALL_OR_NOTHING (ours): the storage's decide_all, as the library's rule
  // sets decide. Limits: a 1 per minute (Go window), b 3 per minute (Go window), t a token
  // bucket of 2 (a token every 60 / 2 = 30 s).
  const std::string yaml = R"(
domain: aon
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: t
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: token_bucket}
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
)";
  ratelimit::server::ServiceSettings settings;
  settings.all_or_nothing = true;
  Fixture f(yaml, settings);
  const Desc a{{{"a", "x"}}}, b{{{"b", "x"}}}, t{{{"t", "x"}}}, s{{{"s", "x"}}};
  // First call: a 1 <= 1, b 1 <= 3, t 1 of 2: all admitted and counted.
  const auto first = f.ok("aon", {a, b, t});
  CHECK(first.overall_code() == Code::OK);
  CHECK(first.statuses(0).limit_remaining() == 0);  // 1 - 1
  CHECK(first.statuses(1).limit_remaining() == 2);  // 3 - 1
  CHECK(first.statuses(2).limit_remaining() == 1);  // 2 - 1
  // Second: a would be 2 > 1, so nothing is counted; b and t report their counters as they
  // are (the storage's dry run).
  const auto second = f.ok("aon", {a, b, t});
  CHECK(second.overall_code() == Code::OVER_LIMIT);
  CHECK(second.statuses(0).code() == Code::OVER_LIMIT);
  CHECK(second.statuses(0).limit_remaining() == 0);  // 1 - 1
  CHECK(second.statuses(1).code() == Code::OK);
  CHECK(second.statuses(1).limit_remaining() == 2);  // 3 - 1
  CHECK(second.statuses(2).limit_remaining() == 1);  // 2 - 1
  // Proof that b and t were not counted: alone they are at their first call's counts.
  const auto bt = f.ok("aon", {b, t});
  CHECK(bt.overall_code() == Code::OK);
  CHECK(bt.statuses(0).limit_remaining() == 1);  // 3 - 2: the first call and this one
  CHECK(bt.statuses(1).limit_remaining() == 0);  // 2 - 2
  // Two descriptors on one counter are one hit of 2: b is at 2, 2 + 2 > 3, none counted.
  const auto twice = f.ok("aon", {b, b});
  CHECK(twice.overall_code() == Code::OVER_LIMIT);
  CHECK(f.ok("aon", {b}).statuses(0).limit_remaining() == 0);  // 3 - 3: b was at 2
  // A call of one descriptor over its limit counts nothing either (the reference counts every
  // hit): 5 hits on a fresh b counter of 3 are over (5 > 3), and then 1 hit leaves 3 - 1 = 2.
  Desc five{{{"b", "y"}}};
  five.hits = 5;
  CHECK(f.ok("aon", {five}).overall_code() == Code::OVER_LIMIT);
  CHECK(f.ok("aon", {{{{"b", "y"}}}}).statuses(0).limit_remaining() == 2);
  // A shadow-mode limit's denial does not deny the call: it is dropped and the rest decided
  // again.
  f.clock.advance(std::chrono::seconds{60});  // new Go windows
  f.ok("aon", {s});                           // s at 1 of 1
  const auto shadow = f.ok("aon", {s, b});
  CHECK(shadow.overall_code() == Code::OK);
  CHECK(shadow.statuses(0).code() == Code::OK);      // shadow: reported OK, 0 remaining
  CHECK(shadow.statuses(1).limit_remaining() == 2);  // b counted: 3 - 1
}

TEST_CASE("All or nothing: a call that counted nothing reports only its denials to the listener",
          "[server][no_cluster]") {
  // Regression guard: the dry-run admissions of a call that counted nothing were reported to
  // the listener (the Prometheus decisions) as if spent.
  ratelimit::server::ServiceSettings settings;
  settings.all_or_nothing = true;
  auto listener = std::make_shared<rltest::CountingListener>();
  settings.listener = listener;
  Fixture f(R"(
domain: l
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5}
)",
            settings);
  CHECK(f.ok("l", {{{{"a", "x"}}}, {{{"b", "x"}}}}).overall_code() == Code::OVER_LIMIT);
  CHECK(listener->total() == 1);  // a's denial (1 > 0); b's admission was a dry run
  CHECK(listener->count("l.b", ratelimit::Outcome::allowed) == 0);
  f.ok("l", {{{{"b", "x"}}}});
  CHECK(listener->count("l.b", ratelimit::Outcome::allowed) == 1);  // counted: reported
}

TEST_CASE("All or nothing: a library algorithm's limit of 0 makes the call count nothing",
          "[server][no_cluster]") {
  // Regression guard: a token bucket of 0 is denied without the storage, and the call's other
  // descriptors were counted beside it.
  ratelimit::server::ServiceSettings settings;
  settings.all_or_nothing = true;
  Fixture f(R"(
domain: z
descriptors:
  - key: none
    rate_limit: {unit: minute, requests_per_unit: 0, algorithm: token_bucket}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5}
)",
            settings);
  const auto res = f.ok("z", {{{{"none", "x"}}}, {{{"b", "x"}}}});
  CHECK(res.overall_code() == Code::OVER_LIMIT);
  CHECK(res.statuses(1).limit_remaining() == 5);                          // read: 5 - 0
  CHECK(f.ok("z", {{{{"b", "x"}}}}).statuses(0).limit_remaining() == 4);  // 5 - 1: only this
}

TEST_CASE("Without all or nothing every hit is counted, as the reference", "[server]") {
  // The default, as the reference (src/redis/fixed_cache_impl.go, DoLimit and getHitsAddend
  // with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT false): every descriptor's key is INCRBY'd by
  // its hits, whether or not another goes over. Here b (a limit of 0) is over, and a is
  // counted all the same.
  Fixture f(R"(
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 0}
)");
  const Desc a{{{"a", "x"}}}, b{{{"b", "x"}}};
  CHECK(f.ok("d", {a, b}).overall_code() == Code::OVER_LIMIT);
  CHECK(f.ok("d", {a}).statuses(0).limit_remaining() == 3);  // 5 - 1 (beside b) - 1 (alone)
}

TEST_CASE("A library algorithm's limit of 0 named in another's replaces is not applied",
          "[server]") {
  // Regression guard: such a limit has no counter, and dropping it read a hit it lacked.
  Fixture f(R"(
domain: r
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 0, algorithm: token_bucket, name: zero}
  - key: b
    rate_limit:
      unit: minute
      requests_per_unit: 5
      replaces: [{name: zero}]
)");
  const auto res = f.ok("r", {{{{"a", "x"}}}, {{{"b", "x"}}}});
  CHECK(res.overall_code() == Code::OK);
  CHECK_FALSE(res.statuses(0).has_current_limit());  // replaced: not applied
  CHECK(res.statuses(1).limit_remaining() == 4);     // 5 - 1
}

namespace {

// The limits of the reference's integration rules (test/integration/runtime/current/ratelimit/
// config/another.yaml: key2 20 per minute, key3 10 per hour) and of its unit-test rules
// (test/config/basic_config.yaml: key2 20 per minute, key3 1 per hour), written here for the
// cases below.
const std::string another = R"(
domain: another
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
)";
const std::string basic = R"(
domain: test-domain
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 1}
)";

/// Three limits per minute for the cases of STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
const std::string three = R"(
domain: s
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 10}
)";

ratelimit::server::ServiceSettings stop_increment(std::size_t cache_bytes = 0) {
  ratelimit::server::ServiceSettings s;
  s.stop_increment_when_over = true;
  s.over_limit_cache_bytes = cache_bytes;
  return s;
}

}  // namespace

TEST_CASE("By default a descriptor beside one going over is counted in full", "[server]") {
  // Regression: a call with several descriptors read them first and counted only the first
  // going over, so key2 below lost its hits. Source: src/redis/fixed_cache_impl.go, DoLimit and
  // getHitsAddend (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT false: every key INCRBY hits).
  Fixture f(another);
  const Desc key2{{{"key2", "multi2"}}}, key3{{{"key3", "multi2"}}};
  f.ok("another", {key2, key3});                        // key2 1, key3 1
  for (int i = 0; i < 9; ++i) f.ok("another", {key3});  // key3 1 + 9 = 10, not over 10
  const auto res = f.ok("another", {key2, key3});       // key2 2, key3 11 > 10
  CHECK(res.overall_code() == Code::OVER_LIMIT);
  CHECK(res.statuses(0).code() == Code::OK);
  CHECK(res.statuses(0).limit_remaining() == 18);  // 20 - 2
  CHECK(res.statuses(1).code() == Code::OVER_LIMIT);
  CHECK(f.ok("another", {key2}).statuses(0).limit_remaining() == 17);  // 20 - 3
}

TEST_CASE("By default the over-limit cache skips only the cached key, the others are counted",
          "[server]") {
  // Regression: a counter in the over-limit cache made the call's other descriptors only read.
  // Source: src/redis/fixed_cache_impl.go, DoLimit (a key found by IsOverLimitWithLocalCache is
  // left out of the INCRBY pipeline) and getHitsAddend (the others get their full hits when
  // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT is false); src/limiter/base_limiter.go,
  // GetResponseDescriptorStatus (a key over its limit is put in the local cache).
  ratelimit::server::ServiceSettings settings;
  settings.over_limit_cache_bytes = 1000000;
  Fixture f(basic, settings);
  const Desc key2{{{"key2", "lc"}}}, key3{{{"key3", "lc"}}};
  CHECK(f.ok("test-domain", {key3}).statuses(0).code() == Code::OK);          // 1, not over 1
  CHECK(f.ok("test-domain", {key3}).statuses(0).code() == Code::OVER_LIMIT);  // 2 > 1: cached
  const auto res = f.ok("test-domain", {key2, key3});
  CHECK(res.statuses(0).limit_remaining() == 19);  // 20 - 1: counted
  CHECK(res.statuses(1).code() == Code::OVER_LIMIT);
  CHECK(f.ok("test-domain", {key2}).statuses(0).limit_remaining() == 18);  // 20 - 2
}

TEST_CASE("Stop increment when over: a key in the over-limit cache makes the call count nothing",
          "[server]") {
  // Source: src/redis/fixed_cache_impl.go, DoLimit (the cached key is left out of the
  // pipeline, isCacheKeyOverlimit is set) and getHitsAddend (STOP_CACHE_KEY_INCREMENT_WHEN_
  // OVERLIMIT true and isCacheKeyOverlimit: 0 for every other key, an INCRBY 0 that reads).
  // The status of a read is that of its count: after = count, remaining = limit - count.
  Fixture f(basic, stop_increment(1000000));
  const Desc key2{{{"key2", "lc"}}}, key3{{{"key3", "lc"}}};
  f.ok("test-domain", {key3});                                                // 1
  CHECK(f.ok("test-domain", {key3}).statuses(0).code() == Code::OVER_LIMIT);  // 2 > 1: cached
  const auto res = f.ok("test-domain", {key2, key3});
  CHECK(res.overall_code() == Code::OVER_LIMIT);
  CHECK(res.statuses(0).code() == Code::OK);
  CHECK(res.statuses(0).limit_remaining() == 20);  // read: 20 - 0
  CHECK(res.statuses(1).code() == Code::OVER_LIMIT);
  CHECK(f.ok("test-domain", {key2}).statuses(0).limit_remaining() == 19);  // 20 - 1: first count
}

TEST_CASE("Stop increment when over: only the keys going over are counted, the others read",
          "[server]") {
  // Source: src/redis/fixed_cache_impl.go, DoLimit (with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
  // and no key cached, every key is first read with GET, and a key is near when count + hits >
  // limit: base_limiter.go IsOverLimitThresholdReached) and getHitsAddend (when some key is
  // near, the near keys get their hits and every other key 0).
  Fixture f(three, stop_increment());
  const Desc a{{{"a", "x"}}}, b{{{"b", "x"}}}, c{{{"c", "x"}}};
  CHECK(f.ok("s", {a}, 4).statuses(0).limit_remaining() == 1);  // a 4: 5 - 4
  // Read first: a 4 + 2 = 6 > 5 and b 0 + 2 = 2 > 1 go over, c 0 + 2 = 2 <= 10 does not.
  const auto res = f.ok("s", {a, b, c}, 2);
  CHECK(res.overall_code() == Code::OVER_LIMIT);
  CHECK(res.statuses(0).code() == Code::OVER_LIMIT);  // a counted: 6 > 5
  CHECK(res.statuses(1).code() == Code::OVER_LIMIT);  // b counted: 2 > 1
  CHECK(res.statuses(2).code() == Code::OK);
  CHECK(res.statuses(2).limit_remaining() == 10);  // c read: 10 - 0
  // Witnesses by reads (hits_addend 0): a at 6 > 5 and b at 2 > 1 are over (uncounted they
  // would be 4 <= 5 and 0 <= 1); c counted alone now: 10 - 1 = 9.
  Desc read_a = a, read_b = b;
  read_a.hits = read_b.hits = 0;
  CHECK(f.ok("s", {read_a}).statuses(0).code() == Code::OVER_LIMIT);
  CHECK(f.ok("s", {read_b}).statuses(0).code() == Code::OVER_LIMIT);
  CHECK(f.ok("s", {c}).statuses(0).limit_remaining() == 9);
}

TEST_CASE("Stop increment when over: with no key going over, every key is counted", "[server]") {
  // Source: src/redis/fixed_cache_impl.go, getHitsAddend (STOP_CACHE_KEY_INCREMENT_WHEN_
  // OVERLIMIT true, nothing cached and no key near its limit: every key gets its hits).
  Fixture f(three, stop_increment());
  const Desc a{{{"a", "x"}}}, c{{{"c", "x"}}};
  const auto res = f.ok("s", {a, c});  // read first: a 0 + 1 <= 5, c 0 + 1 <= 10
  CHECK(res.overall_code() == Code::OK);
  CHECK(res.statuses(0).limit_remaining() == 4);  // 5 - 1
  CHECK(res.statuses(1).limit_remaining() == 9);  // 10 - 1
  const auto again = f.ok("s", {a, c});
  CHECK(again.statuses(0).limit_remaining() == 3);  // 5 - 2
  CHECK(again.statuses(1).limit_remaining() == 8);  // 10 - 2
}

TEST_CASE("Stop increment when over and all or nothing together are refused", "[server]") {
  // Each decides differently which descriptors a call over its limits counts (none; those
  // going over), so the service refuses the pair naming both.
  ratelimit::server::ServiceSettings s = stop_increment();
  s.all_or_nothing = true;
  CHECK_THROWS_WITH(
      ratelimit::server::Service(ratelimit::server::make_memory_counters(), s),
      Catch::StartsWith("RATELIMIT_SERVER_ALL_OR_NOTHING = true and "
                        "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT = true: choose one"));
}

// --- Answers as the Go service gives them (src/service/ratelimit.go, shouldRateLimitWorker) ---

namespace {

/// The response headers as a map.
std::map<std::string, std::string> headers_of(const pb::RateLimitResponse& res) {
  std::map<std::string, std::string> out;
  for (const auto& h : res.response_headers_to_add()) out[h.key()] = h.value();
  return out;
}

const std::string header_rules = R"(
domain: h
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: q
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: c
    rate_limit: {unit: hour, requests_per_unit: 10}
)";

}  // namespace

TEST_CASE(
    "Headers: the first descriptor with the least remaining, else the last one over its "
    "limit that is not in quota mode, under the LIMIT_*_HEADER names",
    "[server]") {
  // shouldRateLimitWorker: minimumDescriptor is replaced by a status with a limit whose
  // LimitRemaining is strictly below the least so far, and by every OVER_LIMIT status not in
  // quota mode (then the least is 0); reset = UnitToDivider - now % divider (CalculateReset).
  ratelimit::server::ServiceSettings settings;
  settings.response_headers = true;
  settings.limit_header = "X-Limit";
  settings.remaining_header = "X-Remaining";
  settings.reset_header = "X-Reset";
  Fixture f(header_rules, settings);
  f.clock.advance(std::chrono::seconds{15});  // 15 s into the minute and the hour
  const Desc a{{{"a", "1"}}}, b{{{"b", "1"}}}, q{{{"q", "1"}}}, c{{{"c", "1"}}};
  // a: 2 - 1 = 1 left, b: 3 - 1 = 2 left: a is the least.
  auto h = headers_of(f.ok("h", {a, b}));
  CHECK(h["X-Limit"] == "2");
  CHECK(h["X-Remaining"] == "1");
  CHECK(h["X-Reset"] == "45");  // 60 - 15
  // Both over with 3 hits each (a: 1 + 3 = 4 > 2, b: 1 + 3 = 4 > 3): the last over, b.
  h = headers_of(f.ok("h", {a, b}, 3));
  CHECK(h["X-Limit"] == "3");
  CHECK(h["X-Remaining"] == "0");
  // c (hour): 10 - 1 = 9 left, then q: 1 - 1 = 0 < 9, so q; its reset is its minute's.
  h = headers_of(f.ok("h", {c, q}));
  CHECK(h["X-Limit"] == "1");
  CHECK(h["X-Remaining"] == "0");
  CHECK(h["X-Reset"] == "45");
  // q over (2 > 1) in quota mode does not take the headers from b over its limit before it.
  h = headers_of(f.ok("h", {b, q}));
  CHECK(h["X-Limit"] == "3");  // b: 4 + 1 = 5 > 3, over, not quota
  // Without the setting, no headers.
  Fixture off(header_rules);
  CHECK(off.ok("h", {a}).response_headers_to_add_size() == 0);
}

TEST_CASE("QUOTA_MODE: every descriptor is in quota mode, so a call is over only when all are",
          "[server]") {
  // shouldRateLimitWorker: isQuotaMode = globalQuotaMode || limit.QuotaMode for every
  // descriptor that is not unlimited (one without a limit too, always OK); the overall code is
  // OVER_LIMIT iff a non-quota descriptor is over or every quota descriptor is over.
  ratelimit::server::ServiceSettings settings;
  settings.global_quota_mode = true;
  Fixture f(header_rules, settings);
  const Desc a{{{"a", "1"}}}, none{{{"nothing", "1"}}};
  f.ok("h", {a}, 2);  // a at 2 of 2
  const auto mixed = f.ok("h", {a, none});
  CHECK(mixed.statuses(0).code() == Code::OVER_LIMIT);  // 3 > 2: the status still says so
  CHECK(mixed.overall_code() == Code::OK);              // 1 of 2 quota descriptors over
  const auto alone = f.ok("h", {a});
  CHECK(alone.overall_code() == Code::OVER_LIMIT);  // 1 of 1 over
  // Without it, a rule's own quota_mode: q over alone is over, beside a passing a it is not.
  Fixture g(header_rules);
  const Desc q{{{"q", "1"}}}, a2{{{"a", "2"}}};
  g.ok("h", {q});
  CHECK(g.ok("h", {q}).overall_code() == Code::OVER_LIMIT);      // 1 of 1 quota over
  CHECK(g.ok("h", {q, a2}).overall_code() == Code::OVER_LIMIT);  // a2 is not quota: 1 of 1
}

namespace {

const std::string metadata_rules = R"(
domain: md
descriptors:
  - key: a
    metadata: {team: payments, tier: {level: 1, gold: yes}}
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    metadata: {team: search, tier: {zone: eu}, quoted: "yes", list: [1, two]}
    rate_limit: {unit: minute, requests_per_unit: 5}
)";

}  // namespace

TEST_CASE("RESPONSE_DYNAMIC_METADATA: the Struct of the reference's ratelimitToMetadata",
          "[server]") {
  // ratelimitToMetadata: domain; descriptors (entries "k=v", limit as the override's text,
  // hitsAddend when set); hitsAddend when the request's is not 0; metadata merged from the
  // rules of the descriptors that passed (mergeMetadata: a key already there is kept, unless
  // both are structs, which merge). Rules' metadata as yaml.v2 reads it (yes: true; 1: a number).
  ratelimit::server::ServiceSettings settings;
  settings.response_dynamic_metadata = true;
  Fixture f(metadata_rules, settings);
  Desc a{{{"a", "x"}}}, b{{{"b", "y"}}}, o{{{"o", "z"}}, 10, 2};
  b.hits = 2;
  const auto first = f.ok("md", {a, b, o});
  REQUIRE(first.has_dynamic_metadata());
  const auto& m = first.dynamic_metadata().fields();
  CHECK(m.at("domain").string_value() == "md");
  CHECK(m.count("hitsAddend") == 0);  // the request's is 0
  const auto& ds = m.at("descriptors").list_value().values();
  REQUIRE(ds.size() == 3);
  CHECK(ds[0].struct_value().fields().at("entries").list_value().values(0).string_value() == "a=x");
  CHECK(ds[0].struct_value().fields().count("hitsAddend") == 0);
  CHECK(ds[1].struct_value().fields().at("hitsAddend").number_value() == 2);
  CHECK(ds[2].struct_value().fields().at("limit").string_value() ==
        "requests_per_unit:10 unit:MINUTE");
  // All three passed: a's metadata, then b's merged in.
  const auto& md = m.at("metadata").struct_value().fields();
  CHECK(md.at("team").string_value() == "payments");  // a's kept
  const auto& tier = md.at("tier").struct_value().fields();
  CHECK(tier.at("level").number_value() == 1);
  CHECK(tier.at("gold").bool_value());
  CHECK(tier.at("zone").string_value() == "eu");  // merged from b
  CHECK(md.at("quoted").string_value() == "yes");
  CHECK(md.at("list").list_value().values(0).number_value() == 1);
  CHECK(md.at("list").list_value().values(1).string_value() == "two");
  // Second call with hits_addend 1: a is over (1 + 1 = 2 > 1), so only b's metadata.
  const auto second = f.ok("md", {a, b}, 1);
  const auto& m2 = second.dynamic_metadata().fields();
  CHECK(m2.at("hitsAddend").number_value() == 1);
  CHECK(m2.at("metadata").struct_value().fields().at("team").string_value() == "search");
  // Nothing passed with metadata: no "metadata" key.
  CHECK(f.ok("md", {a}).dynamic_metadata().fields().count("metadata") == 0);
  // Off by default.
  Fixture off(metadata_rules);
  CHECK_FALSE(off.ok("md", {a}).has_dynamic_metadata());
}

TEST_CASE("Errors are UNKNOWN with the reference's text", "[server]") {
  // ShouldRateLimit recovers a serviceError and returns it; grpc-go answers UNKNOWN with its
  // text: "no rate limit configuration loaded" before the first configuration.
  auto service = std::make_shared<ratelimit::server::Service>(
      ratelimit::server::make_memory_counters(), ratelimit::server::ServiceSettings{});
  pb::RateLimitRequest req;
  req.set_domain("d");
  req.add_descriptors()->add_entries()->set_key("k");
  pb::RateLimitResponse res;
  const grpc::Status st = service->should_rate_limit(req, res);
  CHECK(st.error_code() == grpc::StatusCode::UNKNOWN);
  CHECK(st.error_message() == "no rate limit configuration loaded");
#if defined(RATELIMIT_SERVER_HAVE_REDIS)
  // A storage failure: the reference's RedisError carries the client's text, UNKNOWN.
  ratelimit::RedisOptions unreachable;
  unreachable.port = 1;  // nothing listens on port 1
  Fixture f(messaging, {}, ratelimit::server::make_redis_counters(unreachable));
  const auto [down, ignored] = f.call("messaging", {{{{"to_number", "1"}}}});
  CHECK(down.error_code() == grpc::StatusCode::UNKNOWN);
  CHECK_FALSE(down.error_message().empty());
#endif
}

TEST_CASE("Each decided descriptor's result reaches the observer with its standing", "[server]") {
  // base_limiter.go GetResponseDescriptorStatus: over iff after > limit; near iff after >
  // floor(limit * NEAR_LIMIT_RATIO); the over-limit cache answers over without the storage.
  std::vector<ratelimit::server::DescriptorResult> seen;
  std::vector<std::string> names;
  std::mutex mutex;
  ratelimit::server::ServiceSettings settings;
  settings.near_limit_ratio = 0.5F;  // near above floor(4 * 0.5) = 2
  settings.over_limit_cache_bytes = 1 << 20;
  settings.observer = [&](const ratelimit::server::DescriptorResult& r) {
    const std::lock_guard lock(mutex);
    names.emplace_back(r.metric);
    seen.push_back(r);
    seen.back().domain = {};  // views die with the call
    seen.back().entries = {};
    seen.back().metric = {};
  };
  Fixture f(R"(
domain: o
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 4}
)",
            settings);
  const Desc k{{{"k", "v"}}};
  const auto plain = f.ok("o", {k});  // 1 of 4
  f.ok("o", {k}, 2);                  // 3 of 4: 3 > 2, near
  f.ok("o", {k}, 2);                  // 5 > 4: over, remembered
  f.ok("o", {k});                     // from the over-limit cache
  REQUIRE(seen.size() == 4);
  CHECK(seen[0].standing == ratelimit::server::LimitStanding::within);
  CHECK(seen[0].count_before == 0);
  CHECK(seen[0].count_after == 1);
  CHECK(seen[0].limit == 4);
  CHECK(seen[0].window_s == 60);
  CHECK(names[0] == "o.k");  // the domain, then the key (RuleSet::metric_name)
  CHECK(seen[1].standing == ratelimit::server::LimitStanding::near);
  CHECK(seen[1].count_before == 1);
  CHECK(seen[1].count_after == 3);
  CHECK(seen[2].standing == ratelimit::server::LimitStanding::over);
  CHECK_FALSE(seen[2].from_local_cache);
  // The Go window's count is known over the limit too (3 -> 5), not from the cache.
  CHECK(seen[2].count_before == 3);
  CHECK(seen[2].count_after == 5);
  CHECK_FALSE(seen[3].count_after.has_value());
  CHECK(seen[3].standing == ratelimit::server::LimitStanding::over);
  CHECK(seen[3].from_local_cache);
  // NEAR_LIMIT_RATIO changes no answer: the first call's status is the plain 4 - 1 = 3 left.
  CHECK(plain.statuses(0).limit_remaining() == 3);
}

// --- Lockouts: rate_limit.block_duration (ours; the library's Lockout, docs/rules.md).

namespace {

// The login rule: 5 failures an hour (the rules' units have no 15 minutes), then locked 1 h.
// `login` runs the Go window (every hit counted, as the reference), `otp` a library algorithm in
// shadow mode.
const std::string lockout_rules = R"(
domain: auth
descriptors:
  - key: login_failure
    rate_limit: {unit: hour, requests_per_unit: 5, block_duration: 1h}
  - key: otp
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window, block_duration: 10m}
  - key: api_key
    rate_limit: {unit: day, requests_per_unit: 100}
)";

std::string header(const pb::RateLimitResponse& res, const std::string& key) {
  for (const auto& h : res.response_headers_to_add())
    if (h.key() == key) return h.value();
  return "(none)";
}

}  // namespace

TEST_CASE("The login rule: a descriptor over its limit is locked out for its block_duration",
          "[server][lockout]") {
  ratelimit::server::ServiceSettings settings;
  settings.response_headers = true;
  auto listener = std::make_shared<rltest::CountingListener>();
  settings.listener = listener;
  std::vector<ratelimit::server::DescriptorResult> results;
  std::mutex results_mutex;
  settings.observer = [&](const ratelimit::server::DescriptorResult& r) {
    const std::lock_guard lock(results_mutex);
    results.push_back(r);
  };
  Fixture f(lockout_rules, settings);
  const Desc alice{{{"login_failure", "alice"}}};
  // Failures at 0..4 min of the hour window that starts at day0: 5 - i - 1 remain.
  for (int i = 0; i < 5; ++i) {
    f.clock.set(std::chrono::seconds{day0_s + 60 * i});
    const auto res = f.ok("auth", {alice});
    CHECK(res.overall_code() == Code::OK);
    CHECK(res.statuses(0).limit_remaining() == static_cast<std::uint32_t>(4 - i));
  }
  // The 6th at 5 min: count 6 > 5, over; its denial locks until 65 min. The Go window alone
  // resets at 60 min (3600 - 300 = 3300 s); the lock's 3600 s is longer: both the status and
  // the reset header say 3600.
  f.clock.set(std::chrono::seconds{day0_s + 300});
  auto res = f.ok("auth", {alice});
  CHECK(res.overall_code() == Code::OVER_LIMIT);
  CHECK(res.statuses(0).duration_until_reset().seconds() == 3600);
  CHECK(header(res, "RateLimit-Reset") == "3600");
  // Locked at 35 min: 65 - 35 = 30 min = 1800 s left; OVER_LIMIT with nothing remaining, the
  // limit as configured.
  f.clock.set(std::chrono::seconds{day0_s + 35 * 60});
  res = f.ok("auth", {alice});
  CHECK(res.overall_code() == Code::OVER_LIMIT);
  CHECK(res.statuses(0).code() == Code::OVER_LIMIT);
  CHECK(res.statuses(0).limit_remaining() == 0);
  CHECK(res.statuses(0).current_limit().requests_per_unit() == 5);
  CHECK(res.statuses(0).duration_until_reset().seconds() == 1800);
  CHECK(header(res, "RateLimit-Remaining") == "0");
  CHECK(header(res, "RateLimit-Reset") == "1800");
  // At 60 min the Go window is a new one (it would admit), but the lock holds 5 min more, and
  // the locked calls are not counted: 300 s left.
  f.clock.set(std::chrono::seconds{day0_s + 3600});
  res = f.ok("auth", {alice});
  CHECK(res.overall_code() == Code::OVER_LIMIT);
  CHECK(res.statuses(0).duration_until_reset().seconds() == 300);
  // Another user is not locked.
  CHECK(f.ok("auth", {{{{"login_failure", "bob"}}}}).overall_code() == Code::OK);
  // At 65 min the lock is over: the window of 60 min counted none of the locked calls, so
  // this is its first hit: 5 - 1 = 4 remain, the window ends in 3600 - 300 = 3300 s.
  f.clock.set(std::chrono::seconds{day0_s + 3900});
  res = f.ok("auth", {alice});
  CHECK(res.overall_code() == Code::OK);
  CHECK(res.statuses(0).limit_remaining() == 4);
  CHECK(res.statuses(0).duration_until_reset().seconds() == 3300);
  // The listener heard 5 + 1 + 1 (bob) admissions, 1 denial by the limit, 2 by the lock; the
  // stats' observer saw the locked calls over their limit, without a count (none was made).
  CHECK(listener->count("auth.login_failure", ratelimit::Outcome::allowed) == 7);
  CHECK(listener->count("auth.login_failure", ratelimit::Outcome::limited) == 1);
  CHECK(listener->count("auth.login_failure", ratelimit::Outcome::locked_out) == 2);
  const std::lock_guard lock(results_mutex);
  REQUIRE(results.size() == 10);  // 5 + 1 + 2 + bob + 1
  CHECK(results[6].standing == ratelimit::server::LimitStanding::over);
  CHECK_FALSE(results[6].count_after.has_value());
  CHECK(results[5].standing == ratelimit::server::LimitStanding::over);
  CHECK(results[5].count_after == 6);  // the Go window's 6th hit
}

TEST_CASE("A lockout in shadow mode locks and reports, but the call stays OK",
          "[server][lockout]") {
  ratelimit::server::ServiceSettings settings;
  auto listener = std::make_shared<rltest::CountingListener>();
  settings.listener = listener;
  Fixture f(lockout_rules, settings);
  const Desc otp{{{"otp", "alice"}}};
  CHECK(f.ok("auth", {otp}).statuses(0).limit_remaining() == 0);  // 1 - 1
  // The 2nd in the minute is over (shadow: OK) and locks for 10 min: 600 s.
  auto res = f.ok("auth", {otp});
  CHECK(res.overall_code() == Code::OK);
  CHECK(res.statuses(0).code() == Code::OK);
  CHECK(res.statuses(0).duration_until_reset().seconds() == 600);
  // 5 min later the fixed window has room again, but the lock is checked as enforced: OK (shadow),
  // nothing remaining, 300 s left of the lock; the listener hears it locked out.
  f.clock.advance(std::chrono::seconds{300});
  res = f.ok("auth", {otp});
  CHECK(res.overall_code() == Code::OK);
  CHECK(res.statuses(0).limit_remaining() == 0);
  CHECK(res.statuses(0).duration_until_reset().seconds() == 300);
  CHECK(listener->count("auth.otp", ratelimit::Outcome::shadow_limited) == 1);
  CHECK(listener->count("auth.otp", ratelimit::Outcome::locked_out) == 1);
  // After the lock (10 min from the denial) the window admits again: 1 - 1 = 0 remain, OK.
  f.clock.advance(std::chrono::seconds{300});
  res = f.ok("auth", {otp});
  CHECK(res.statuses(0).code() == Code::OK);
  CHECK(listener->count("auth.otp", ratelimit::Outcome::allowed) == 2);
}

TEST_CASE("All or nothing: a locked-out descriptor makes the call count nothing",
          "[server][lockout][no_cluster]") {
  ratelimit::server::ServiceSettings settings;
  settings.all_or_nothing = true;
  Fixture f(lockout_rules, settings);
  const Desc alice{{{"login_failure", "alice"}}}, key{{{"api_key", "K"}}};
  for (int i = 0; i < 5; ++i) REQUIRE(f.ok("auth", {alice, key}).overall_code() == Code::OK);
  // The 6th is over (5 + 1 > 5): nothing counted, and the lock is taken (1 h).
  auto res = f.ok("auth", {alice, key});
  CHECK(res.overall_code() == Code::OVER_LIMIT);
  CHECK(res.statuses(0).duration_until_reset().seconds() == 3600);
  // 30 min later: locked (1800 s left), so the call is denied without counting anything.
  f.clock.advance(std::chrono::seconds{1800});
  res = f.ok("auth", {alice, key});
  CHECK(res.overall_code() == Code::OVER_LIMIT);
  CHECK(res.statuses(0).duration_until_reset().seconds() == 1800);  // 3600 - 1800
  // api_key counted only the 5 admitted calls: a dry run reads 100 - 5 = 95.
  CHECK(res.statuses(1).limit_remaining() == 95);
}

TEST_CASE("A lockout is refused at load where the counters keep only the Go window (memcached)",
          "[server][lockout]") {
  ratelimit::server::ServiceSettings settings;
  settings.lockouts = false;  // BACKEND_TYPE=memcache (main.cpp)
  ratelimit::server::Service service(ratelimit::server::make_memory_counters(), settings);
  const ratelimit::RulesSource sources[] = {{"auth.yaml", lockout_rules}};
  CHECK_THROWS_WITH(
      service.reload(
          ratelimit::RulesConfig::from_strings<ratelimit::server::ServerAlgorithms>(sources)),
      "auth.yaml:4: rate_limit.block_duration of rule \"login_failure\": a lockout needs Redis "
      "or the in-process storage (its lock is a library algorithm's state; memcached, "
      "BACKEND_TYPE=memcache, keeps only the Go window)");
  // The server's loader (the rules with ServerAlgorithms) refuses a bad value as the library's.
  const ratelimit::RulesSource bad[] = {{"bad.yaml", R"(domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5, block_duration: 1d}
)"}};
  CHECK_THROWS_WITH(
      ratelimit::RulesConfig::from_strings<ratelimit::server::ServerAlgorithms>(bad),
      "bad.yaml:4: rate_limit.block_duration = \"1d\": not a duration (whole numbers each with "
      "its unit h, m or s, e.g. 1h, 15m, 90s or 1h30m)");
}
