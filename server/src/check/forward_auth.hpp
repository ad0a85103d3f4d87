#pragma once
/// @file check/forward_auth.hpp
/// The forward-auth check: `GET /check/<domain>` (any method), which NGINX's `auth_request`,
/// Caddy's `forward_auth`, Traefik's `ForwardAuth` and our HAProxy Lua action call before they
/// forward a request. The original request is read from forwarding headers only, never from
/// the check request's own path or query:
///
/// - method: `X-Forwarded-Method`, else `X-Original-Method`;
/// - path with query: `X-Forwarded-Uri`, else `X-Original-URI`;
/// - authority: `X-Forwarded-Host`, else the check request's `Host`;
/// - scheme: `X-Forwarded-Proto`, else "http";
/// - every other header of the check request is a header of the original request (the
///   gateways copy the client's headers onto the check);
/// - the client address: with no trusted proxies configured, the check request's peer; else,
///   when the peer is a trusted proxy, the rightmost `X-Forwarded-For` entry that is not one
///   (all trusted: the leftmost), and when it is not, the peer itself. A client cannot choose
///   its own key: a trusted proxy appends the address it saw.
///
/// The domain's actions (check/actions.hpp) make the descriptors; the server's `Service` decides
/// them (the same rules and counters as Envoy's gRPC calls). Answers: 200 to let the request
/// through (also when no descriptor results or none is limited), the denial status (429, or
/// 403 when the gateway sends `X-RateLimit-Deny-Status: 403`, as NGINX's `auth_request` needs)
/// when over the limit, 503 when the storage fails, 404 for a domain without actions, 400
/// without a method or path header. Both 200 and the denial carry `RateLimit-Policy`,
/// `RateLimit`, `X-RateLimit-Limit`, `-Remaining`, `-Reset`, and the denial `Retry-After`
/// (include/ratelimit/http/headers.hpp), for the limits that applied.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "../http_front.hpp"
#include "../service.hpp"
#include "actions.hpp"

namespace ratelimit::server::check {

/// An IPv4 or IPv6 network. Thread safety: a plain value.
struct Network {
  unsigned char bytes[16] = {};  ///< the address, network order (4 bytes used for IPv4)
  bool v4 = true;                ///< IPv4 (else IPv6)
  unsigned prefix = 32;          ///< the prefix length in bits (0 to 32, or 0 to 128)

  /// "10.0.0.0/8", "::1", "127.0.0.1" (a host). Throws `std::invalid_argument` naming `text`.
  static Network parse(std::string_view text);
  /// Whether `address` (an IP literal) is inside; false for anything that is not IP.
  bool contains(std::string_view address) const;
};

/// Parses a comma-separated list of networks (RATELIMIT_SERVER_TRUSTED_PROXIES); empty: none.
/// Throws `std::invalid_argument` naming the entry that does not parse.
std::vector<Network> parse_networks(std::string_view list);

/// The client's address by the rule above. `forwarded_for`: every X-Forwarded-For value of the
/// check request, in order.
std::string client_address(const std::vector<Network>& trusted, const std::string& peer,
                           const std::vector<std::string_view>& forwarded_for);

/// The actions in force, swapped whole on reload. Thread safety: every member from any thread.
class ActionsHolder {
 public:
  /// The actions in force (empty: no domain) for one check to use throughout.
  std::shared_ptr<const ActionsConfig> get() const;
  /// Serves `config` from now on; checks in flight keep the one they started with.
  void set(std::shared_ptr<const ActionsConfig> config);

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const ActionsConfig> config_ = std::make_shared<ActionsConfig>();
};

/// Registers `/check/` on `routes` (every method: a gateway's check repeats the client's).
void add_check_routes(HttpRoutes& routes, std::shared_ptr<Service> service,
                      std::shared_ptr<const ActionsHolder> actions, std::vector<Network> trusted);

/// The response headers for a decided call (the statuses with a `current_limit`), named
/// after their limit's `name`, else "<domain>.<key>_<value>..." of the descriptor.
std::vector<std::pair<std::string, std::string>> response_headers(
    const envoy::service::ratelimit::v3::RateLimitRequest& request,
    const envoy::service::ratelimit::v3::RateLimitResponse& response);

}  // namespace ratelimit::server::check
