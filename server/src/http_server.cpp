#include "http_server.hpp"

#include <stdexcept>

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
    const bool ok = healthy();
    res.status = ok ? 200 : 500;
    res.set_content(ok ? "OK" : "NOT OK", "text/plain");
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
  port_ =
      port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (port_ <= 0)
    throw std::runtime_error("PORT: cannot listen on " + host + ":" + std::to_string(port));
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    listen_returned_ = true;
  });
  // Return once it accepts: a stop() before the thread is listening would not reach it (httplib
  // stops only a running server), and the thread would then listen for ever.
  while (!server_->is_running() && !listen_returned_) std::this_thread::yield();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

}  // namespace ratelimit::server
