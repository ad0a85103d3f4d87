#include "http_server.hpp"

#include <google/protobuf/util/json_util.h>

namespace ratelimit::server {

namespace pb = envoy::service::ratelimit::v3;

void add_service_routes(HttpRoutes& routes, std::shared_ptr<Service> service,
                        std::function<bool()> healthy, std::function<std::string()> metrics) {
  if (metrics)
    routes.on("GET", "/metrics", [metrics](const HttpRequest&) {
      return HttpResponse{200, "text/plain; version=0.0.4", metrics(), {}};
    });
  // src/server/health.go, ServeHTTP: "OK", or status 500 with an empty body.
  routes.on("GET", "/healthcheck", [healthy](const HttpRequest&) {
    const bool ok = healthy();
    return HttpResponse{ok ? 200 : 500, "text/plain", ok ? "OK" : "", {}};
  });
  routes.on_async(
      "POST", "/json",
      [svc = std::move(service)](const HttpRequest& req, std::function<void(HttpResponse)> reply) {
        auto request = std::make_shared<pb::RateLimitRequest>();
        const auto parsed = google::protobuf::util::JsonStringToMessage(req.body, request.get());
        if (!parsed.ok())
          return reply({400,
                        "text/plain",
                        "invalid RateLimitRequest JSON: " + std::string(parsed.message()),
                        {}});
        auto response = std::make_shared<pb::RateLimitResponse>();
        svc->should_rate_limit_async(
            *request, *response, [request, response, reply = std::move(reply)](grpc::Status st) {
              if (!st.ok())
                return reply({st.error_code() == grpc::StatusCode::UNAVAILABLE ? 503 : 400,
                              "text/plain",
                              st.error_message(),
                              {}});
              std::string body;
              (void)google::protobuf::util::MessageToJsonString(*response, &body);
              reply({response->overall_code() == pb::RateLimitResponse::OVER_LIMIT ? 429 : 200,
                     "application/json",
                     std::move(body),
                     {}});
            });
      });
}

HttpRoutes HttpServer::routes(std::shared_ptr<Service> service, std::function<bool()> healthy,
                              std::function<std::string()> metrics) {
  HttpRoutes r;
  add_service_routes(r, std::move(service), std::move(healthy), std::move(metrics));
  return r;
}

HttpServer::HttpServer(std::shared_ptr<Service> service, std::function<bool()> healthy,
                       const std::string& host, int port, std::function<std::string()> metrics)
    : front_(routes(std::move(service), std::move(healthy), std::move(metrics)), host, port) {}

HttpRoutes HttpServer::get_routes(std::vector<HttpRoute> routes) {
  HttpRoutes r;
  for (HttpRoute& route : routes) {
    const auto reply_of = [](const HttpReply& x) {
      return HttpResponse{x.status, x.content_type, x.body, {}};
    };
    if (route.prefix)
      r.prefix_async("GET", route.path,
                     [h = route.handler, reply_of](const HttpRequest& q,
                                                   std::function<void(HttpResponse)> reply) {
                       reply(reply_of(h(q.path)));
                     });
    else
      r.on("GET", route.path,
           [h = route.handler, reply_of](const HttpRequest& q) { return reply_of(h(q.path)); });
  }
  return r;
}

HttpServer::HttpServer(const std::string& host, int port, std::vector<HttpRoute> routes,
                       const std::string& setting)
    : front_(get_routes(std::move(routes)), host, port, one_thread(), setting) {}

HttpFrontOptions HttpServer::one_thread() {
  // The debug and Prometheus listeners answer an operator or a scraper now and then: one thread
  // each, so that PORT's pool (RATELIMIT_SERVER_HTTP_THREADS) stays the server's HTTP capacity.
  HttpFrontOptions o;
  o.threads = 1;
  return o;
}

}  // namespace ratelimit::server
