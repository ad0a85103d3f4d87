#pragma once
/// @file http_front.hpp
/// The server's HTTP listeners: a small route table (`HttpRoutes`) served by an event-driven
/// front (`HttpFront`, on GNU libmicrohttpd). Every HTTP listener of the server (PORT's /json,
/// /healthcheck, /metrics and /check/<domain>, and any debug or Prometheus listener) is one
/// `HttpFront` over its own `HttpRoutes`.
///
/// Why libmicrohttpd and not cpp-httplib: cpp-httplib gives each accepted connection a thread
/// of its pool for as long as the connection stays open, so a gateway holding 1,000 keep-alive
/// connections needs 1,000 threads or has all but `pool` of them wait unserved. libmicrohttpd
/// with poll() and a fixed thread pool multiplexes any number of connections on `threads`
/// threads, and can suspend a connection while its answer waits for the storage (Redis), so a
/// thread is never held by a call in flight (server/README.md has the measurement).

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ratelimit::server {

/// One HTTP request as a handler sees it. Header names keep the client's case; look them up
/// with `header`. Thread safety: a plain value.
struct HttpRequest {
  std::string method;  ///< "GET", "POST", ...
  std::string path;    ///< the request target's path, percent-decoded, without the query
  std::vector<std::pair<std::string, std::string>> headers;  ///< in arrival order
  std::string body;  ///< at most `HttpFrontOptions::max_body`
  std::string peer;  ///< the peer's IP address ("127.0.0.1", "::1"); empty when unknown

  /// The first value of header `name` (case-insensitive), or nullptr.
  const std::string* header(std::string_view name) const;
};

/// One HTTP response. Thread safety: a plain value.
struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  ///< besides Content-Type
};

/// Answers a request at once (a plain function: the debug and Prometheus listeners' kind).
using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;
/// Answers a request later: `reply` must be called exactly once, from any thread (e.g. the
/// storage's I/O thread). The request stays valid until then.
using AsyncHttpHandler =
    std::function<void(const HttpRequest&, std::function<void(HttpResponse)> reply)>;

/// A route table: exact paths and path prefixes per method ("*": any method). A request's path is
/// looked up exactly first, then by the longest registered prefix; no match gives 404, a path known
/// under another method 405. Thread safety: build it before handing it to an `HttpFront`;
/// afterwards it is read only.
class HttpRoutes {
 public:
  /// Serves `method path` with a handler that answers at once.
  HttpRoutes& on(std::string method, std::string path, HttpHandler handler);
  /// Serves `method path` with a handler that answers later.
  HttpRoutes& on_async(std::string method, std::string path, AsyncHttpHandler handler);
  /// Serves every path that starts with `prefix` (e.g. "/check/"), answering later.
  HttpRoutes& prefix_async(std::string method, std::string prefix, AsyncHttpHandler handler);

  /// The handler for a request, or nullptr with `status` set to 404 or 405.
  const AsyncHttpHandler* find(std::string_view method, std::string_view path, int& status) const;

 private:
  struct Route {
    std::string method;
    std::string path;
    bool prefix = false;
    AsyncHttpHandler handler;
  };
  std::vector<Route> routes_;
};

/// How an `HttpFront` bounds its resources.
struct HttpFrontOptions {
  /// Threads serving connections (1 to 256); the front never starts more, whatever the number
  /// of connections.
  unsigned threads = 4;
  /// Open connections at most (further ones are closed on accept).
  unsigned max_connections = 4096;
  /// Bytes per connection for the request line, headers and the response's headers: a request
  /// whose head does not fit is answered 431 (libmicrohttpd's connection memory limit).
  std::size_t connection_memory = 32 * 1024;
  /// A request body longer than this is answered 413.
  std::size_t max_body = 1024 * 1024;
  /// An idle keep-alive connection is closed after this many seconds.
  unsigned idle_timeout_seconds = 120;
};

/// An HTTP/1.1 listener (keep-alive, pipelining as libmicrohttpd serves them) on a fixed pool
/// of threads. Thread safety: `port` from any thread; `stop` once (the destructor calls it).
class HttpFront {
 public:
  /// Listens on host:port (an IPv4 or IPv6 literal, or "0.0.0.0"; port 0: a free one). Throws
  /// `std::runtime_error` starting with `what` (e.g. "PORT") when it cannot listen, and
  /// `std::invalid_argument` for options out of range.
  HttpFront(HttpRoutes routes, const std::string& host, int port, HttpFrontOptions options = {},
            std::string what = "PORT");
  ~HttpFront();
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  /// The port listened on (the one chosen when 0 was asked).
  int port() const noexcept;
  /// Stops accepting, waits for the answers in flight, and stops the threads.
  void stop();

  /// libmicrohttpd's side (http_front.cpp).
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ratelimit::server
