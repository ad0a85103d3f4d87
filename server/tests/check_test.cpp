// The forward-auth check's parts in process: descriptors from requests with Envoy's route
// rate_limits semantics (envoyproxy/envoy source/common/router/router_ratelimit.cc, the field
// names of api/envoy/config/route/v3/route_components.proto, RateLimit.Action), the refusal
// of bad actions files, the client address behind trusted proxies, and the HTTP front with
// the check on the server's Service.

#include <memory>
#include <string>
#include <vector>

#include <httplib.h>

#include <catch2/catch.hpp>

#include "check/actions.hpp"
#include "check/forward_auth.hpp"
#include "counters.hpp"
#include "http_front.hpp"
#include "server_algorithms.hpp"
#include "service.hpp"

namespace {

namespace rs = ratelimit::server;
namespace ck = ratelimit::server::check;
using Entries = ck::DescriptorEntries;

ck::OriginalRequest request_with(std::vector<std::pair<std::string, std::string>> headers,
                                 std::string path = "/items?page=2&q=a%20b+c",
                                 std::string client = "192.168.1.77") {
  ck::OriginalRequest r;
  r.method = "GET";
  r.path = std::move(path);
  r.authority = "shop.example";
  r.scheme = "https";
  r.headers = std::move(headers);
  r.client_address = std::move(client);
  return r;
}

std::vector<Entries> descriptors_of(const std::string& rate_limits, const ck::OriginalRequest& r) {
  const auto config = ck::ActionsConfig::parse(
      "domains:\n  - domain: d\n    rate_limits:\n" + rate_limits, "a.yaml");
  REQUIRE(config.domain("d") != nullptr);
  return config.domain("d")->descriptors(r);
}

std::string refusal(const std::string& text) {
  try {
    (void)ck::ActionsConfig::parse(text, "bad.yaml");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("Actions: each rate_limits entry yields one descriptor or none, with Envoy's keys",
          "[check]") {
  const auto r = request_with({{"X-User", "alice"}, {"X-Tag", "a"}, {"x-tag", "b"}});
  SECTION("request_headers: the first value; :path with its query, :method, :authority") {
    CHECK(descriptors_of(R"(      - actions:
          - request_headers: {header_name: x-user, descriptor_key: user}
          - request_headers: {header_name: X-TAG, descriptor_key: tag}
          - request_headers: {header_name: ":path", descriptor_key: path}
          - request_headers: {header_name: ":method", descriptor_key: method}
          - request_headers: {header_name: ":authority", descriptor_key: host}
)",
                         r) == std::vector<Entries>{{{"user", "alice"},
                                                     {"tag", "a"},
                                                     {"path", "/items?page=2&q=a%20b+c"},
                                                     {"method", "GET"},
                                                     {"host", "shop.example"}}});
  }
  SECTION("an absent header drops the whole descriptor; skip_if_absent leaves out its entry") {
    CHECK(descriptors_of(R"(      - actions:
          - generic_key: {descriptor_value: api}
          - request_headers: {header_name: x-missing, descriptor_key: m}
      - actions:
          - generic_key: {descriptor_value: api}
          - request_headers: {header_name: x-missing, descriptor_key: m, skip_if_absent: true}
)",
                         r) == std::vector<Entries>{{{"generic_key", "api"}}});
  }
  SECTION("remote_address and masked_remote_address (default masks 32 and 128)") {
    CHECK(descriptors_of(R"(      - actions:
          - remote_address: {}
          - masked_remote_address: {v4_prefix_mask_len: 24}
          - masked_remote_address: {}
)",
                         r) ==
          std::vector<Entries>{{{"remote_address", "192.168.1.77"},
                                {"masked_remote_address", "192.168.1.0/24"},
                                {"masked_remote_address", "192.168.1.77/32"}}});
    // 2001:db8:1:2::5 masked to /64 keeps the first four groups.
    CHECK(descriptors_of(R"(      - actions:
          - remote_address: {}
          - masked_remote_address: {v6_prefix_mask_len: 64}
)",
                         request_with({}, "/", "2001:db8:1:2::5")) ==
          std::vector<Entries>{{{"remote_address", "2001:db8:1:2::5"},
                                {"masked_remote_address", "2001:db8:1:2::/64"}}});
    // An address that is not IP (a unix socket, a garbled header) cannot make the entry.
    CHECK(descriptors_of("      - actions:\n          - remote_address: {}\n",
                         request_with({}, "/", "not-an-ip"))
              .empty());
  }
  SECTION("header_value_match: key header_match, expect_match, a missing header never matches") {
    const std::string rules = R"(      - actions:
          - header_value_match:
              descriptor_value: alice
              headers: [{name: x-user, string_match: {exact: ALICE, ignore_case: true}}]
      - actions:
          - header_value_match:
              descriptor_value: not-bob
              expect_match: false
              headers: [{name: x-user, exact_match: bob}]
      - actions:
          - header_value_match:
              descriptor_value: tags
              descriptor_key: t
              headers: [{name: x-tag, safe_regex_match: {regex: "a,b"}}]
      - actions:
          - header_value_match:
              descriptor_value: inverted-missing
              headers: [{name: x-missing, exact_match: z, invert_match: true}]
      - actions:
          - header_value_match:
              descriptor_value: absent
              headers: [{name: x-missing, present_match: false}]
)";
    // x-tag's two values are matched joined by ',' ("a,b"); an absent header does not match
    // even inverted, but present_match: false matches its absence.
    CHECK(descriptors_of(rules, r) == std::vector<Entries>{{{"header_match", "alice"}},
                                                           {{"header_match", "not-bob"}},
                                                           {{"t", "tags"}},
                                                           {{"header_match", "absent"}}});
  }
  SECTION("query_parameters and query_parameter_value_match: decoded first values") {
    // q=a%20b+c decodes to "a b c" (%20 and '+' are spaces).
    CHECK(descriptors_of(R"(      - actions:
          - query_parameters: {query_parameter_name: q, descriptor_key: query}
          - query_parameters: {query_parameter_name: absent, descriptor_key: x, skip_if_absent: true}
      - actions:
          - query_parameters: {query_parameter_name: absent, descriptor_key: x}
      - actions:
          - query_parameter_value_match:
              descriptor_value: second-page
              query_parameters: [{name: page, string_match: {exact: "2"}}]
      - actions:
          - query_parameter_value_match:
              descriptor_value: has-q
              descriptor_key: k
              query_parameters: [{name: q, present_match: true}]
)",
                         r) == std::vector<Entries>{{{"query", "a b c"}},
                                                    {{"query_match", "second-page"}},
                                                    {{"k", "has-q"}}});
  }
  SECTION("entries of another stage do not apply (the filter's stage is 0)") {
    CHECK(descriptors_of(R"(      - stage: 1
        actions: [{generic_key: {descriptor_value: one}}]
      - actions: [{generic_key: {descriptor_value: zero}}]
)",
                         r) == std::vector<Entries>{{{"generic_key", "zero"}}});
  }
}

TEST_CASE("Actions: a bad file is refused with file, line and reason", "[check]") {
  CHECK(refusal("domains:\n  - domain: d\n    rate_limits:\n      - actions:\n"
                "          - request_header: {header_name: a, descriptor_key: b}\n") ==
        "bad.yaml:5: actions[].request_header: unknown action");
  CHECK(refusal("domains:\n  - domain: d\n    rate_limits:\n      - actions:\n"
                "          - request_headers: {descriptor_key: b}\n") ==
        "bad.yaml:5: actions[].request_headers.header_name: required");
  CHECK(refusal("domains:\n  - domain: d\n    rate_limits:\n      - actions:\n"
                "          - source_cluster: {}\n") ==
        "bad.yaml:5: actions[].source_cluster: needs Envoy's own state; a gateway's check "
        "cannot produce it");
  CHECK(refusal("domains:\n  - domain: d\n    rate_limits:\n      - actions:\n"
                "          - masked_remote_address: {v4_prefix_mask_len: 33}\n") ==
        "bad.yaml:5: actions[].masked_remote_address.v4_prefix_mask_len: must be an integer "
        "from 0 to 32, not '33'");
  CHECK_THAT(refusal("domains:\n  - domain: d\n    rate_limits:\n      - actions:\n"
                     "          - header_value_match:\n              descriptor_value: v\n"
                     "              headers: [{name: a, safe_regex_match: {regex: \"(\"}}]\n"),
             Catch::StartsWith("bad.yaml:7: actions[].header_value_match.headers.safe_regex_"
                               "match.regex: not a valid RE2 regex"));
  CHECK(refusal("domains:\n  - domain: d\n    rate_limits:\n      - actions: []\n") ==
        "bad.yaml:4: actions: needs a list of at least one action");
  CHECK(refusal("domains: [{domain: d, rate_limits: [], extra: 1}]\n") ==
        "bad.yaml:1: domains[].extra: unknown field");
  // Bounded: more entries than max_entries is refused rather than served.
  std::string many = "domains:\n  - domain: d\n    rate_limits:\n";
  for (std::size_t i = 0; i <= ck::ActionsConfig::max_entries; ++i)
    many += "      - actions: [{generic_key: {descriptor_value: v}}]\n";
  CHECK(refusal(many) == "bad.yaml:4: rate_limits: more than 256 entries");
}

TEST_CASE("Client address: the rightmost X-Forwarded-For entry that is not a trusted proxy",
          "[check]") {
  const auto trusted = ck::parse_networks("127.0.0.1, 10.0.0.0/8,::1");
  // No trusted proxy configured: the peer, whatever the header says.
  CHECK(ck::client_address({}, "127.0.0.1", {"203.0.113.9"}) == "127.0.0.1");
  // A peer that is not a trusted proxy is the client itself.
  CHECK(ck::client_address(trusted, "198.51.100.4", {"203.0.113.9"}) == "198.51.100.4");
  // Behind the trusted 127.0.0.1: the client forged "203.0.113.9", the proxy appended what it
  // saw (198.51.100.4), and a trusted inner hop (10.1.2.3): the rightmost untrusted entry.
  CHECK(ck::client_address(trusted, "127.0.0.1", {"203.0.113.9, 198.51.100.4", "10.1.2.3"}) ==
        "198.51.100.4");
  // Every entry trusted: the leftmost; no header: the peer.
  CHECK(ck::client_address(trusted, "::1", {"10.0.0.1, 10.0.0.2"}) == "10.0.0.1");
  CHECK(ck::client_address(trusted, "::1", {}) == "::1");
  CHECK_THROWS_WITH(ck::parse_networks("10.0.0.0/33"),
                    "'10.0.0.0/33': the prefix length must be 0 to 32");
  CHECK_THROWS_WITH(ck::parse_networks("proxy.example"),
                    "'proxy.example' is not an IP address or network");
}

namespace {

constexpr const char* two_per_minute = R"(domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
)";

/// The check on a Service in process, on a front of 2 threads; time stands still at 30 s
/// into a minute (the fixed window's reset is 30 s away).
struct CheckFixture {
  std::shared_ptr<rs::Service> service;
  std::shared_ptr<ck::ActionsHolder> actions = std::make_shared<ck::ActionsHolder>();
  std::unique_ptr<rs::HttpFront> front;

  explicit CheckFixture(const std::string& actions_yaml, const char* rules = two_per_minute) {
    service = std::make_shared<rs::Service>(rs::make_memory_counters(), rs::ServiceSettings{}, [] {
      return std::chrono::nanoseconds{90'000'000'000};
    });
    const ratelimit::RulesSource sources[] = {{"edge.yaml", rules}};
    service->reload(ratelimit::RulesConfig::from_strings<rs::ServerAlgorithms>(sources));
    actions->set(std::make_shared<const ck::ActionsConfig>(
        ck::ActionsConfig::parse(actions_yaml, "actions.yaml")));
    rs::HttpRoutes routes;
    ck::add_check_routes(routes, service, actions, {});
    rs::HttpFrontOptions options;
    options.threads = 2;
    front = std::make_unique<rs::HttpFront>(std::move(routes), "127.0.0.1", 0, options);
  }
};

constexpr const char* user_actions = R"(domains:
  - domain: edge
    rate_limits:
      - actions:
          - query_parameters: {query_parameter_name: user, descriptor_key: user}
)";

}  // namespace

TEST_CASE(
    "Check: the original request from forwarding headers, never the check's own URL; "
    "200 then the denial with the rate limit headers",
    "[check]") {
  CheckFixture f(user_actions);
  httplib::Client client("127.0.0.1", f.front->port());
  // Caddy appends the original query to the check's URI: user=mallory there must not count.
  const httplib::Headers caddy = {{"X-Forwarded-Method", "GET"},
                                  {"X-Forwarded-Uri", "/items?user=alice"}};
  const auto first = client.Get("/check/edge?user=mallory", caddy);
  REQUIRE(first);
  CHECK(first->status == 200);
  // 2 per minute, 1 spent: 1 left; the window ends 30 s later (90 s is 30 s into a minute).
  CHECK(first->get_header_value("RateLimit-Policy") == "\"edge.user_alice\";q=2;w=60");
  CHECK(first->get_header_value("RateLimit") == "\"edge.user_alice\";r=1;t=30");
  CHECK(first->get_header_value("X-RateLimit-Remaining") == "1");
  CHECK_FALSE(first->has_header("Retry-After"));
  // NGINX's headers name the same request: the second of alice's two.
  const httplib::Headers nginx = {{"X-Original-Method", "GET"},
                                  {"X-Original-URI", "/items?user=alice"},
                                  {"X-RateLimit-Deny-Status", "403"}};
  const auto second = client.Get("/check/edge", nginx);
  REQUIRE(second);
  CHECK(second->status == 200);
  CHECK(second->get_header_value("X-RateLimit-Remaining") == "0");
  // The third is over: NGINX asked for 403, the others get 429; Retry-After is the window's
  // remaining 30 s.
  const auto third = client.Get("/check/edge", nginx);
  REQUIRE(third);
  CHECK(third->status == 403);
  CHECK(third->get_header_value("Retry-After") == "30");
  CHECK(third->get_header_value("RateLimit") == "\"edge.user_alice\";r=0;t=30");
  const auto fourth = client.Get("/check/edge", caddy);
  REQUIRE(fourth);
  CHECK(fourth->status == 429);
  // A request that yields no descriptor is let through without a decision.
  const auto none = client.Get("/check/edge", httplib::Headers{{"X-Forwarded-Method", "GET"},
                                                               {"X-Forwarded-Uri", "/items"}});
  REQUIRE(none);
  CHECK(none->status == 200);
  CHECK_FALSE(none->has_header("RateLimit"));
  // Errors: an unknown domain, and a check without the original request.
  const auto unknown = client.Get("/check/other", caddy);
  REQUIRE(unknown);
  CHECK(unknown->status == 404);
  const auto bare = client.Get("/check/edge");
  REQUIRE(bare);
  CHECK(bare->status == 400);
}

TEST_CASE("Check: a reload of the actions keeps the counts", "[check]") {
  CheckFixture f(user_actions);
  httplib::Client client("127.0.0.1", f.front->port());
  const httplib::Headers h = {
      {"X-Forwarded-Method", "GET"}, {"X-Forwarded-Uri", "/items?user=bob"}, {"X-User", "bob"}};
  REQUIRE(client.Get("/check/edge", h)->status == 200);
  // The same descriptor from another action (a header instead of the query): the same counter.
  f.actions->set(std::make_shared<const ck::ActionsConfig>(ck::ActionsConfig::parse(
      R"(domains:
  - domain: edge
    rate_limits:
      - actions:
          - request_headers: {header_name: x-user, descriptor_key: user}
)",
      "actions.yaml")));
  const auto second = client.Get("/check/edge", h);
  REQUIRE(second);
  CHECK(second->status == 200);
  CHECK(second->get_header_value("X-RateLimit-Remaining") == "0");  // 2 - 2
  CHECK(client.Get("/check/edge", h)->status == 429);
}

TEST_CASE("HTTP front: routes, 404 and 405, and bounded requests", "[check]") {
  rs::HttpRoutes routes;
  routes.on("GET", "/a", [](const rs::HttpRequest& r) {
    return rs::HttpResponse{200, "text/plain", "a from " + r.peer, {{"X-Seen", "1"}}};
  });
  routes.on("POST", "/echo", [](const rs::HttpRequest& r) {
    return rs::HttpResponse{200, "text/plain", r.body, {}};
  });
  rs::HttpFrontOptions options;
  options.threads = 1;
  options.max_body = 16;
  options.connection_memory = 8 * 1024;
  rs::HttpFront front(std::move(routes), "127.0.0.1", 0, options);
  httplib::Client client("127.0.0.1", front.port());
  const auto a = client.Get("/a");
  REQUIRE(a);
  CHECK(a->body == "a from 127.0.0.1");
  CHECK(a->get_header_value("X-Seen") == "1");
  CHECK(client.Get("/b")->status == 404);
  CHECK(client.Post("/a", "", "text/plain")->status == 405);
  CHECK(client.Post("/echo", "0123456789abcdef", "text/plain")->body == "0123456789abcdef");
  CHECK(client.Post("/echo", "0123456789abcdefg", "text/plain")->status == 413);  // 17 > 16
  // A head larger than the connection's memory (8 KiB) is refused, not buffered.
  const auto huge = client.Get("/a", httplib::Headers{{"X-Big", std::string(16 * 1024, 'x')}});
  if (huge) CHECK(huge->status >= 400);
  CHECK_THROWS_AS(rs::HttpFront(rs::HttpRoutes{}, "not-an-address", 0), std::runtime_error);
}

TEST_CASE("Check: a descriptor locked out (block_duration) answers the lock's time in Retry-After",
          "[check][lockout]") {
  // 2 per minute, then locked 10 min (docs/rules.md, "Lockouts"); time stands still at 90 s.
  CheckFixture f(user_actions, R"(domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, block_duration: 10m}
)");
  httplib::Client client("127.0.0.1", f.front->port());
  const httplib::Headers h = {{"X-Forwarded-Method", "GET"},
                              {"X-Forwarded-Uri", "/items?user=carol"}};
  REQUIRE(client.Get("/check/edge", h)->status == 200);
  REQUIRE(client.Get("/check/edge", h)->status == 200);
  // The third is over and locks: the window would reset in 30 s, the lock holds 600 s.
  const auto third = client.Get("/check/edge", h);
  REQUIRE(third);
  CHECK(third->status == 429);
  CHECK(third->get_header_value("Retry-After") == "600");
  // Locked: denied with the lock's time left (the clock stands still: 600 s), not counted.
  const auto fourth = client.Get("/check/edge", h);
  REQUIRE(fourth);
  CHECK(fourth->status == 429);
  CHECK(fourth->get_header_value("Retry-After") == "600");
  CHECK(fourth->get_header_value("X-RateLimit-Remaining") == "0");
}
