#pragma once
/// @file http_server.hpp
/// The reference service's HTTP side on PORT: POST /json takes a RateLimitRequest as JSON
/// (protobuf's JSON mapping) and answers the RateLimitResponse as JSON, with status 200, or 429
/// when the overall code is OVER_LIMIT; GET /healthcheck answers 200 "OK" while healthy, else
/// 500; GET /metrics answers `metrics()` (Prometheus text) when given. Served by `HttpFront`
/// (http_front.hpp), beside any other routes (the forward-auth check, check/forward_auth.hpp).

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "http_front.hpp"
#include "service.hpp"

namespace ratelimit::server {

/// Adds /json, /healthcheck and (when `metrics` is set) /metrics to `routes`. /json decides
/// without holding a thread while the storage answers (`Service::should_rate_limit_async`).
/// `healthy()` is asked per /healthcheck, from the front's threads.
void add_service_routes(HttpRoutes& routes, std::shared_ptr<Service> service,
                        std::function<bool()> healthy,
                        std::function<std::string()> metrics = nullptr);

/// What a plain GET route of the debug and Prometheus listeners answers.
struct HttpReply {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

/// A plain GET route: exactly `path`, or every path starting with it when `prefix`; its handler
/// is a function of the request's path, called on the front's threads (thread-safe, quick).
struct HttpRoute {
  std::string path;
  bool prefix = false;
  std::function<HttpReply(const std::string& path)> handler;
};

/// PORT's listener with the service routes only, or a listener of plain GET routes. Thread safety:
/// `port` from any thread; `stop` once.
class HttpServer {
 public:
  /// Listens on host:port (port 0: a free one). Throws `std::runtime_error` naming PORT when it
  /// cannot listen.
  HttpServer(std::shared_ptr<Service> service, std::function<bool()> healthy,
             const std::string& host, int port, std::function<std::string()> metrics = nullptr);
  /// A listener of plain GET routes only (the debug and Prometheus listeners), on one thread; a
  /// path no route takes is answered 404. Throws `std::runtime_error` naming `setting` when it
  /// cannot listen.
  HttpServer(const std::string& host, int port, std::vector<HttpRoute> routes,
             const std::string& setting);

  int port() const noexcept { return front_.port(); }
  /// Stops listening and waits for the answers in flight.
  void stop() { front_.stop(); }

 private:
  static HttpRoutes routes(std::shared_ptr<Service> service, std::function<bool()> healthy,
                           std::function<std::string()> metrics);
  static HttpRoutes get_routes(std::vector<HttpRoute> routes);
  static HttpFrontOptions one_thread();
  HttpFront front_;
};

}  // namespace ratelimit::server
