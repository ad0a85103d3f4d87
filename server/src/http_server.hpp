#pragma once
/// @file http_server.hpp
/// The reference service's HTTP side (cpp-httplib): POST /json takes a RateLimitRequest as
/// JSON (protobuf's JSON mapping) and answers the RateLimitResponse as JSON, with status 200,
/// or 429 when the overall code is OVER_LIMIT; GET /healthcheck answers 200 "OK" while
/// healthy, else 500; GET /metrics answers `metrics()` (Prometheus text) when given.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "service.hpp"

namespace httplib {
class Server;
}

namespace ratelimit::server {

/// What a plain GET handler answers.
struct HttpReply {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

/// A GET handler as a plain function of the request's path, so that it moves with whatever
/// HTTP stack serves it. Called on the server's threads: thread-safe, and quick.
using HttpHandler = std::function<HttpReply(const std::string& path)>;

/// A path and its handler: exactly `path`, or every path starting with it when `prefix`.
struct HttpRoute {
  std::string path;
  bool prefix = false;
  HttpHandler handler;
};

/// An HTTP server on its own thread. Thread safety: `port` from any thread; `stop` once.
class HttpServer {
 public:
  /// Listens on host:port (port 0: a free one). `healthy()` is asked per /healthcheck. Throws
  /// `std::runtime_error` naming PORT when it cannot listen.
  HttpServer(std::shared_ptr<Service> service, std::function<bool()> healthy,
             const std::string& host, int port, std::function<std::string()> metrics = nullptr);
  /// A listener of plain GET routes only (the debug and Prometheus listeners); a path no
  /// route takes is answered 404. Throws `std::runtime_error` naming `setting` when it cannot
  /// listen.
  HttpServer(const std::string& host, int port, std::vector<HttpRoute> routes,
             const std::string& setting);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const noexcept { return port_; }
  /// Stops listening and waits for the thread.
  void stop();

 private:
  void add_routes(std::vector<HttpRoute> routes);
  void listen(const std::string& host, int port, const std::string& setting);

  std::shared_ptr<Service> service_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace ratelimit::server
