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

#include "service.hpp"

namespace httplib {
class Server;
}

namespace ratelimit::server {

/// An HTTP server on its own thread. Thread safety: `port` from any thread; `stop` once.
class HttpServer {
 public:
  /// Listens on host:port (port 0: a free one). `healthy()` is asked per /healthcheck. Throws
  /// `std::runtime_error` naming PORT when it cannot listen.
  HttpServer(std::shared_ptr<Service> service, std::function<bool()> healthy,
             const std::string& host, int port, std::function<std::string()> metrics = nullptr);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const noexcept { return port_; }
  /// Stops listening and waits for the thread.
  void stop();

 private:
  std::shared_ptr<Service> service_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};
  int port_ = 0;
};

}  // namespace ratelimit::server
