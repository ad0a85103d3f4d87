#include "http_front.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include <microhttpd.h>

#include "ascii.hpp"

namespace ratelimit::server {

namespace {

/// The peer's address as text; an IPv4-mapped IPv6 address as its IPv4 form.
std::string peer_address(MHD_Connection* connection) {
  const MHD_ConnectionInfo* info =
      MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  if (info == nullptr || info->client_addr == nullptr) return {};
  char text[INET6_ADDRSTRLEN] = {};
  const sockaddr* sa = info->client_addr;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
  } else if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
      inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], text, sizeof text);
    else
      inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
  }
  return text;
}

}  // namespace

const std::string* HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (ascii_iequals(k, name)) return &v;
  return nullptr;
}

HttpRoutes& HttpRoutes::on(std::string method, std::string path, HttpHandler handler) {
  return on_async(
      std::move(method), std::move(path),
      [h = std::move(handler)](const HttpRequest& req, std::function<void(HttpResponse)> reply) {
        reply(h(req));
      });
}

HttpRoutes& HttpRoutes::on_async(std::string method, std::string path, AsyncHttpHandler handler) {
  routes_.push_back({std::move(method), std::move(path), false, std::move(handler)});
  return *this;
}

HttpRoutes& HttpRoutes::prefix_async(std::string method, std::string prefix,
                                     AsyncHttpHandler handler) {
  routes_.push_back({std::move(method), std::move(prefix), true, std::move(handler)});
  return *this;
}

const AsyncHttpHandler* HttpRoutes::find(std::string_view method, std::string_view path,
                                         int& status) const {
  const Route* best = nullptr;
  bool other_method = false;
  for (const Route& r : routes_) {
    const bool matches = r.prefix ? path.starts_with(r.path) : path == r.path;
    if (!matches) continue;
    if (r.method != "*" && r.method != method) {
      other_method = true;
      continue;
    }
    if (!r.prefix) return &r.handler;
    if (best == nullptr || r.path.size() > best->path.size()) best = &r;
  }
  if (best != nullptr) return &best->handler;
  status = other_method ? 405 : 404;
  return nullptr;
}

/// One request in flight: its parsed form, and the hand-over of the answer between the
/// handler (any thread) and the connection's thread. Shared with the reply callback, so a late
/// reply never touches freed memory.
struct Exchange {
  HttpRequest request;
  bool too_large = false;
  bool started = false;
  std::mutex mutex;
  bool answered = false;   ///< `response` is set
  bool suspended = false;  ///< the connection waits for `response`
  HttpResponse response;
};

struct HttpFront::Impl {
  HttpRoutes routes;
  HttpFrontOptions options;
  MHD_Daemon* daemon = nullptr;
  int port = 0;
  std::mutex mutex;
  std::condition_variable idle;
  std::size_t in_flight = 0;  ///< handlers started and not answered yet

  static MHD_Result queue(MHD_Connection* connection, const HttpResponse& r) {
    MHD_Response* response = MHD_create_response_from_buffer(
        r.body.size(), const_cast<char*>(r.body.data()), MHD_RESPMEM_MUST_COPY);
    if (response == nullptr) return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, r.content_type.c_str());
    for (const auto& [k, v] : r.headers) MHD_add_response_header(response, k.c_str(), v.c_str());
    const MHD_Result result =
        MHD_queue_response(connection, static_cast<unsigned>(r.status), response);
    MHD_destroy_response(response);
    return result;
  }

  static MHD_Result on_header(void* cls, MHD_ValueKind, const char* key, const char* value) {
    auto* request = static_cast<HttpRequest*>(cls);
    request->headers.emplace_back(key, value == nullptr ? "" : value);
    return MHD_YES;
  }

  static MHD_Result access(void* cls, MHD_Connection* connection, const char* url,
                           const char* method, const char*, const char* upload_data,
                           size_t* upload_data_size, void** con_cls) {
    auto* self = static_cast<Impl*>(cls);
    if (*con_cls == nullptr) {  // the head has arrived
      auto holder = new std::shared_ptr<Exchange>(std::make_shared<Exchange>());
      HttpRequest& req = (*holder)->request;
      req.method = method;
      req.path = url;
      req.peer = peer_address(connection);
      MHD_get_connection_values(connection, MHD_HEADER_KIND, &Impl::on_header, &req);
      *con_cls = holder;
      return MHD_YES;
    }
    const std::shared_ptr<Exchange> ex = *static_cast<std::shared_ptr<Exchange>*>(*con_cls);
    if (*upload_data_size != 0) {  // a piece of the body
      if (ex->request.body.size() + *upload_data_size > self->options.max_body)
        ex->too_large = true;
      else
        ex->request.body.append(upload_data, *upload_data_size);
      *upload_data_size = 0;
      return MHD_YES;
    }
    if (ex->started) {  // resumed: the answer is there
      std::lock_guard lock(ex->mutex);
      return queue(connection, ex->response);
    }
    ex->started = true;
    if (ex->too_large) return queue(connection, {413, "text/plain", "request body too large", {}});
    int status = 404;
    const AsyncHttpHandler* handler =
        self->routes.find(ex->request.method, ex->request.path, status);
    if (handler == nullptr)
      return queue(connection,
                   {status, "text/plain", status == 404 ? "not found" : "method not allowed", {}});
    {
      std::lock_guard lock(self->mutex);
      ++self->in_flight;
    }
    (*handler)(ex->request, [self, ex, connection](HttpResponse response) {
      {
        std::lock_guard lock(ex->mutex);
        ex->response = std::move(response);
        ex->answered = true;
        // Resumed under the exchange's lock, so the connection is suspended before (the
        // handler's thread suspends under it too) and not yet freed.
        if (ex->suspended) MHD_resume_connection(connection);
      }
      std::lock_guard lock(self->mutex);
      if (--self->in_flight == 0) self->idle.notify_all();
    });
    std::lock_guard lock(ex->mutex);
    if (ex->answered) return queue(connection, ex->response);
    ex->suspended = true;
    MHD_suspend_connection(connection);
    return MHD_YES;
  }

  static void completed(void*, MHD_Connection*, void** con_cls, MHD_RequestTerminationCode) {
    delete static_cast<std::shared_ptr<Exchange>*>(*con_cls);
    *con_cls = nullptr;
  }
};

HttpFront::HttpFront(HttpRoutes routes, const std::string& host, int port, HttpFrontOptions options,
                     std::string what)
    : impl_(std::make_unique<Impl>()) {
  if (options.threads < 1 || options.threads > 256)
    throw std::invalid_argument(what + ": threads = " + std::to_string(options.threads) +
                                ": must be 1 to 256");
  impl_->routes = std::move(routes);
  impl_->options = options;
  sockaddr_storage addr{};
  // poll(), not epoll: libmicrohttpd's epoll loop takes the ready connections 128 at a time
  // and, after a full batch, waits again (with the idle timeout as its limit) before serving
  // the batch; when exactly 128 requests were ready at once (a burst on a loaded machine),
  // they stay unread until some other socket stirs, or are closed unanswered by the idle
  // timeout. poll() is level-triggered and every wait serves all the ready connections.
  unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME;
  auto* in = reinterpret_cast<sockaddr_in*>(&addr);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (inet_pton(AF_INET, host.c_str(), &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons(static_cast<uint16_t>(port));
  } else if (inet_pton(AF_INET6, host.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(static_cast<uint16_t>(port));
    // "::" takes IPv4 too (a dual-stack socket), as Go's wildcard listener does.
    flags |= host == "::" ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
  } else {
    throw std::runtime_error(what + ": cannot listen on " + host + ":" + std::to_string(port) +
                             ": not an IP address");
  }
  impl_->daemon = MHD_start_daemon(
      flags, static_cast<uint16_t>(port), nullptr, nullptr, &Impl::access, impl_.get(),
      MHD_OPTION_SOCK_ADDR, reinterpret_cast<sockaddr*>(&addr), MHD_OPTION_THREAD_POOL_SIZE,
      static_cast<unsigned>(options.threads), MHD_OPTION_CONNECTION_LIMIT,
      static_cast<unsigned>(options.max_connections), MHD_OPTION_CONNECTION_MEMORY_LIMIT,
      static_cast<size_t>(options.connection_memory), MHD_OPTION_CONNECTION_TIMEOUT,
      static_cast<unsigned>(options.idle_timeout_seconds), MHD_OPTION_NOTIFY_COMPLETED,
      &Impl::completed, nullptr,
      // SO_REUSEADDR: a restarted server binds its port although connections of the previous
      // one linger in TIME_WAIT.
      MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_END);
  if (impl_->daemon == nullptr)
    throw std::runtime_error(what + ": cannot listen on " + host + ":" + std::to_string(port));
  const MHD_DaemonInfo* info = MHD_get_daemon_info(impl_->daemon, MHD_DAEMON_INFO_BIND_PORT);
  impl_->port = info != nullptr ? info->port : port;
}

HttpFront::~HttpFront() { stop(); }

int HttpFront::port() const noexcept { return impl_->port; }

void HttpFront::stop() {
  if (impl_->daemon == nullptr) return;
  // Stop accepting; a suspended connection must be resumed before the daemon stops, so wait
  // for every answer in flight (each comes from the storage's completion).
  const MHD_socket listener = MHD_quiesce_daemon(impl_->daemon);
  {
    std::unique_lock lock(impl_->mutex);
    impl_->idle.wait(lock, [&] { return impl_->in_flight == 0; });
  }
  MHD_stop_daemon(impl_->daemon);
  if (listener != MHD_INVALID_SOCKET) close(listener);
  impl_->daemon = nullptr;
}

}  // namespace ratelimit::server
