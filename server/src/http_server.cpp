#include "http_server.hpp"

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <thread>

#include <google/protobuf/util/json_util.h>
#include <httplib.h>

namespace ratelimit::server {

namespace pb = envoy::service::ratelimit::v3;

HttpServer::HttpServer(std::shared_ptr<Service> service, std::function<bool()> healthy,
                       const std::string& host, int port, std::function<std::string()> metrics)
    : service_(std::move(service)), server_(std::make_unique<httplib::Server>()) {
  if (metrics)
    server_->Get("/metrics", [metrics](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics(), "text/plain; version=0.0.4");
    });
  server_->Get("/healthcheck", [healthy](const httplib::Request&, httplib::Response& res) {
    // src/server/health.go, ServeHTTP: "OK", or status 500 with an empty body.
    if (healthy()) {
      res.status = 200;
      res.set_content("OK", "text/plain");
    } else {
      res.status = 500;
    }
  });
  server_->Post("/json", [svc = service_](const httplib::Request& req, httplib::Response& res) {
    pb::RateLimitRequest request;
    const auto parsed = google::protobuf::util::JsonStringToMessage(req.body, &request);
    if (!parsed.ok()) {
      res.status = 400;
      res.set_content("invalid RateLimitRequest JSON: " + std::string(parsed.message()),
                      "text/plain");
      return;
    }
    pb::RateLimitResponse response;
    const grpc::Status st = svc->should_rate_limit(request, response);
    if (!st.ok()) {
      res.status = st.error_code() == grpc::StatusCode::UNAVAILABLE ? 503 : 400;
      res.set_content(st.error_message(), "text/plain");
      return;
    }
    std::string body;
    (void)google::protobuf::util::MessageToJsonString(response, &body);
    res.status = response.overall_code() == pb::RateLimitResponse::OVER_LIMIT ? 429 : 200;
    res.set_content(body, "application/json");
  });
  listen(host, port, "PORT");
}

HttpServer::HttpServer(const std::string& host, int port, std::vector<HttpRoute> routes,
                       const std::string& setting)
    : server_(std::make_unique<httplib::Server>()) {
  add_routes(std::move(routes));
  listen(host, port, setting);
}

void HttpServer::add_routes(std::vector<HttpRoute> routes) {
  for (HttpRoute& r : routes) {
    // cpp-httplib matches a pattern as a whole regex: the path is escaped.
    std::string pattern;
    for (char c : r.path) {
      if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) pattern += '\\';
      pattern += c;
    }
    if (r.prefix) pattern += ".*";
    server_->Get(pattern,
                 [h = std::move(r.handler)](const httplib::Request& req, httplib::Response& res) {
                   HttpReply reply = h(req.path);
                   res.status = reply.status;
                   res.set_content(std::move(reply.body), reply.content_type);
                 });
  }
}

void HttpServer::listen(const std::string& host, int port, const std::string& setting) {
  port_ =
      port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (port_ <= 0)
    throw std::runtime_error(setting + ": cannot listen on " + host + ":" + std::to_string(port));
  auto ended = std::make_shared<std::atomic<bool>>(false);
  thread_ = std::thread([this, ended] {
    server_->listen_after_bind();
    ended->store(true);
  });
  // cpp-httplib's stop() does nothing until the listening loop runs: a stop that came first
  // would leave the thread listening and its join waiting forever.
  while (!server_->is_running() && !ended->load()) std::this_thread::yield();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

}  // namespace ratelimit::server
