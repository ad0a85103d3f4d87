// ShouldRateLimit throughput and latency, measured by a C++ client on grpc++'s completion-queue
// API (a script client tops out below the server), against three servers built from the same
// grpc++ in the same run: a no-op server that answers OK at once (the transport's floor), this
// server counting in process, and, when RATELIMIT_BENCH_REDIS=host:port is set, this server
// counting on Redis. Each runs first at full load (the peak), then at half the peak's rate
// (latency at a load the server keeps up with).
//
//   ratelimit_server_bench [seconds per run, default 3] [calls in flight, default 64]
//       all in one process, a table on stdout
//   ratelimit_server_bench --serve
//       noop|inprocess|statsdoff|statsd|redis|redisfloor|memcache|memcachefloor [host:port]
//       one server on a free loopback port: prints "port N", serves until SIGTERM or SIGINT
//       (redis: this server on the Redis at host:port; redisfloor: the Redis path's floor, a
//       minimal server that sends each call's Go commands there and answers; memcache: this
//       server on the memcached at host:port; memcachefloor: the memcache path's floor, a
//       minimal server doing each call's Go operations there (get, incr, add); statsdoff and
//       statsd: in process with our /metrics and the stats as ratelimit_server sets them,
//       USE_STATSD=false, or true with the statsd daemon at host:port)
//   ratelimit_server_bench --serve http-noop [threads, default 4]
//       the forward-auth check's floor for bench/run --gateways: ratelimit_server's HTTP front
//       (HttpFront, the same options) answering every /check/<domain> 200 "OK\n" at once,
//       without building descriptors or deciding; prints "port N" like the others
//   ratelimit_server_bench --drive PORT SECONDS IN_FLIGHT RATE
//       one client run (RATE 0: flat out, else calls started per second): prints
//       "calls_per_s p50_us p99_us errors"
// The last two let bench/run put server and client in separate processes, each pinned to its
// own CPU, and interleave the servers' runs.

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <ratelimit/metrics/prometheus.hpp>
#include <ratelimit/rules.hpp>

#ifdef RATELIMIT_SERVER_HAVE_REDIS
#include <ratelimit/redis/options.hpp>
#endif
#ifdef RATELIMIT_BENCH_HAVE_LIBEVENT
#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <deque>
#include <mutex>
#endif

#include "counters.hpp"
#include "grpc_server.hpp"
#include "http_front.hpp"
#include "rls.grpc.pb.h"
#include "server_algorithms.hpp"
#include "service.hpp"
#include "stats/runtime.hpp"

namespace {

namespace pb = envoy::service::ratelimit::v3;
using Clock = std::chrono::steady_clock;

/// The floor: a server that answers every call OK without looking at it.
struct NoopService final : pb::RateLimitService::CallbackService {
  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* ctx,
                                            const pb::RateLimitRequest*,
                                            pb::RateLimitResponse* res) override {
    res->set_overall_code(pb::RateLimitResponse::OK);
    res->add_statuses()->set_code(pb::RateLimitResponse::OK);
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
};

struct Result {
  double per_second = 0;
  double p50_us = 0, p99_us = 0;
  long errors = 0;
};

/// Runs `seconds` of calls with `in_flight` outstanding; `rate` > 0 paces the starts to that
/// many per second (open loop), 0 runs flat out.
Result drive(int port, double seconds, int in_flight, double rate) {
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  auto stub = pb::RateLimitService::NewStub(channel);
  grpc::CompletionQueue cq;
  struct Call {
    grpc::ClientContext ctx;
    pb::RateLimitResponse res;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<pb::RateLimitResponse>> rpc;
    Clock::time_point start;
  };
  std::vector<pb::RateLimitRequest> requests(1000);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    requests[i].set_domain("bench");
    auto* e = requests[i].add_descriptors()->add_entries();
    e->set_key("client");
    // Appended, not "c" + std::to_string(i): g++ 12 at -O3 (bench/run's Release) reports a false
    // -Wrestrict in that operator+.
    std::string value = "c";
    value += std::to_string(i);
    e->set_value(value);
  }
  std::size_t next = 0;
  const auto begin = Clock::now();
  const auto end =
      begin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  long started = 0;
  const auto start_one = [&] {
    auto* c = new Call;
    c->start = Clock::now();
    c->rpc = stub->AsyncShouldRateLimit(&c->ctx, requests[next++ % requests.size()], &cq);
    c->rpc->Finish(&c->res, &c->status, c);
    ++started;
  };
  const auto due = [&](Clock::time_point now) {
    if (rate <= 0) return true;
    return static_cast<double>(started) < std::chrono::duration<double>(now - begin).count() * rate;
  };
  std::vector<double> latencies;
  latencies.reserve(1 << 20);
  long errors = 0;
  int outstanding = 0;
  for (; outstanding < in_flight && due(Clock::now()); ++outstanding) start_one();
  while (outstanding > 0 || Clock::now() < end) {
    void* tag = nullptr;
    bool ok = false;
    const auto status =
        cq.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + std::chrono::microseconds{200});
    const auto now = Clock::now();
    if (status == grpc::CompletionQueue::GOT_EVENT) {
      auto* c = static_cast<Call*>(tag);
      if (!ok || !c->status.ok()) ++errors;
      latencies.push_back(std::chrono::duration<double, std::micro>(now - c->start).count());
      delete c;
      --outstanding;
    } else if (status == grpc::CompletionQueue::SHUTDOWN) {
      break;
    }
    while (now < end && outstanding < in_flight && due(now)) {
      start_one();
      ++outstanding;
    }
  }
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - begin).count();
  Result r;
  r.per_second = static_cast<double>(latencies.size()) / elapsed;
  r.errors = errors;
  if (!latencies.empty()) {
    std::sort(latencies.begin(), latencies.end());
    r.p50_us = latencies[latencies.size() / 2];
    r.p99_us = latencies[latencies.size() * 99 / 100];
  }
  return r;
}

void report(const char* name, int port, double seconds, int in_flight, double floor_peak) {
  const Result peak = drive(port, seconds, in_flight, 0);
  const Result half = drive(port, seconds, in_flight, peak.per_second / 2);
  std::printf("%-22s %12.0f %8.2f %10.0f %10.0f %12.0f %10.0f %7ld\n", name, peak.per_second,
              floor_peak > 0 ? peak.per_second / floor_peak : 1.0, peak.p50_us, peak.p99_us,
              half.p50_us, half.p99_us, peak.errors + half.errors);
  std::fflush(stdout);
}

std::shared_ptr<ratelimit::server::Service> service_on(
    std::shared_ptr<ratelimit::server::Counters> counters,
    ratelimit::server::ServiceSettings settings = {}) {
  auto service =
      std::make_shared<ratelimit::server::Service>(std::move(counters), std::move(settings));
  const ratelimit::RulesSource sources[] = {
      {"bench.yaml",
       "domain: bench\ndescriptors:\n  - key: client\n    rate_limit: {unit: second, "
       "requests_per_unit: 1000000000}\n"}};
  // As ratelimit_server loads its rules: a rule without `algorithm` is the Go window, counted
  // under the Go service's keys (INCRBY and EXPIRE on Redis, get/incr on memcache).
  service->reload(
      ratelimit::RulesConfig::from_strings<ratelimit::server::ServerAlgorithms>(sources));
  return service;
}

/// A Redis storage for the benchmark from "host:port".
std::shared_ptr<ratelimit::server::Counters> redis_counters(
    [[maybe_unused]] const std::string& hp) {
#ifdef RATELIMIT_SERVER_HAVE_REDIS
  ratelimit::RedisOptions options;
  options.host = hp.substr(0, hp.rfind(':'));
  options.port = std::atoi(hp.substr(hp.rfind(':') + 1).c_str());
  options.key_prefix = "ratelimit_server_bench:";
  return ratelimit::server::make_redis_counters(options);
#else
  return nullptr;
#endif
}

#ifdef RATELIMIT_BENCH_HAVE_LIBEVENT
/// The Redis path's floor: each call's Go commands (INCRBY and EXPIRE of the Go service's key)
/// sent with hiredis's async API on one connection as soon as the call arrives, pipelined
/// across concurrent calls by one libevent loop, and the call answered OK on INCRBY's reply.
/// What any server on that path pays; the server's ratio to it is its own cost.
class RedisFloorService final : public pb::RateLimitService::CallbackService {
 public:
  RedisFloorService(const std::string& host, int port) {
    base_ = event_base_new();
    ctx_ = redisAsyncConnect(host.c_str(), port);
    if (base_ == nullptr || ctx_ == nullptr || ctx_->err != 0)
      throw std::runtime_error("redisfloor: cannot connect to " + host);
    redisLibeventAttach(ctx_, base_);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    wake_ = event_new(base_, wake_fd_, EV_READ | EV_PERSIST, &on_wake, this);
    event_add(wake_, nullptr);
    loop_ = std::thread([this] { event_base_dispatch(base_); });
  }
  RedisFloorService(const RedisFloorService&) = delete;
  RedisFloorService& operator=(const RedisFloorService&) = delete;
  ~RedisFloorService() override {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake();
    loop_.join();
    event_free(wake_);
    ::close(wake_fd_);
    event_base_free(base_);
  }

  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* ctx,
                                            const pb::RateLimitRequest* req,
                                            pb::RateLimitResponse* res) override {
    res->set_overall_code(pb::RateLimitResponse::OK);
    res->add_statuses()->set_code(pb::RateLimitResponse::OK);
    // cache_key.go's key for a per-second limit: domain_key_value_<now>.
    std::string key = req->domain() + "_";
    for (const auto& d : req->descriptors())
      for (const auto& e : d.entries()) key += e.key() + "_" + e.value() + "_";
    key += std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count());
    auto* r = ctx->DefaultReactor();
    {
      const std::lock_guard lock(mutex_);
      queue_.emplace_back(std::move(key), r);
    }
    wake();
    return r;
  }

 private:
  void wake() {
    const std::uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }

  static void on_wake(evutil_socket_t fd, short, void* self_ptr) {
    auto* self = static_cast<RedisFloorService*>(self_ptr);
    std::uint64_t n = 0;
    (void)!::read(fd, &n, sizeof n);
    std::vector<std::pair<std::string, grpc::ServerUnaryReactor*>> calls;
    bool stop = false;
    {
      const std::lock_guard lock(self->mutex_);
      calls.swap(self->queue_);
      stop = self->stop_;
    }
    for (auto& [key, reactor] : calls) {
      redisAsyncCommand(self->ctx_, &on_reply, reactor, "INCRBY %b 1", key.data(), key.size());
      redisAsyncCommand(self->ctx_, nullptr, nullptr, "EXPIRE %b 1", key.data(), key.size());
    }
    if (stop) {
      event_del(self->wake_);
      redisAsyncDisconnect(self->ctx_);  // the loop ends with its last event
    }
  }

  static void on_reply(redisAsyncContext*, void* reply, void* reactor) {
    auto* r = static_cast<grpc::ServerUnaryReactor*>(reactor);
    const auto* rep = static_cast<const redisReply*>(reply);
    if (rep != nullptr && rep->type == REDIS_REPLY_INTEGER)
      r->Finish(grpc::Status::OK);
    else
      r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "redis"));
  }

  event_base* base_ = nullptr;
  redisAsyncContext* ctx_ = nullptr;
  int wake_fd_ = -1;
  event* wake_ = nullptr;
  std::mutex mutex_;
  std::vector<std::pair<std::string, grpc::ServerUnaryReactor*>> queue_;
  bool stop_ = false;
  std::thread loop_;
};

/// The memcache path's floor: each call's operations as the Go service's memcache backend
/// does them (src/memcached/cache_impl.go: `get` of the key, then `incr`, and on a miss `add`
/// with the window as expiry, `incr` again if another writer added it first), in memcached's
/// text protocol on one connection (libevent), sent as soon as the call arrives and pipelined
/// across concurrent calls; the call is answered OK on the `get`'s reply, as Go answers before
/// it counts. What any server on that path pays; the server's ratio to it is its own cost.
class MemcacheFloorService final : public pb::RateLimitService::CallbackService {
 public:
  MemcacheFloorService(const std::string& host, int port) {
    base_ = event_base_new();
    if (base_ == nullptr) throw std::runtime_error("memcachefloor: no event base");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1)
      throw std::runtime_error("memcachefloor: expected an IPv4 address, not " + host);
    bev_ = bufferevent_socket_new(base_, -1, BEV_OPT_CLOSE_ON_FREE);
    if (bev_ == nullptr ||
        bufferevent_socket_connect(bev_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      throw std::runtime_error("memcachefloor: cannot connect to " + host);
    const int one = 1;
    (void)::setsockopt(bufferevent_getfd(bev_), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    bufferevent_setcb(bev_, &on_read, nullptr, nullptr, this);
    bufferevent_enable(bev_, EV_READ | EV_WRITE);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    wake_ = event_new(base_, wake_fd_, EV_READ | EV_PERSIST, &on_wake, this);
    event_add(wake_, nullptr);
    loop_ = std::thread([this] { event_base_dispatch(base_); });
  }
  MemcacheFloorService(const MemcacheFloorService&) = delete;
  MemcacheFloorService& operator=(const MemcacheFloorService&) = delete;
  ~MemcacheFloorService() override {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake();
    loop_.join();
    bufferevent_free(bev_);
    event_free(wake_);
    ::close(wake_fd_);
    event_base_free(base_);
  }

  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* ctx,
                                            const pb::RateLimitRequest* req,
                                            pb::RateLimitResponse* res) override {
    res->set_overall_code(pb::RateLimitResponse::OK);
    res->add_statuses()->set_code(pb::RateLimitResponse::OK);
    // cache_key.go's key for a per-second limit: domain_key_value_<now>.
    std::string key = req->domain() + "_";
    for (const auto& d : req->descriptors())
      for (const auto& e : d.entries()) key += e.key() + "_" + e.value() + "_";
    key += std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count());
    auto* r = ctx->DefaultReactor();
    {
      const std::lock_guard lock(mutex_);
      queue_.emplace_back(std::move(key), r);
    }
    wake();
    return r;
  }

 private:
  /// A reply awaited on the connection, in order: a get's (answers `reactor`), or a counting
  /// step's on `key`.
  struct Awaited {
    enum class Kind { get, incr, add, incr_again } kind;
    std::string key;
    grpc::ServerUnaryReactor* reactor = nullptr;
  };

  void wake() {
    const std::uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }

  static void on_wake(evutil_socket_t fd, short, void* self_ptr) {
    auto* self = static_cast<MemcacheFloorService*>(self_ptr);
    std::uint64_t n = 0;
    (void)!::read(fd, &n, sizeof n);
    std::vector<std::pair<std::string, grpc::ServerUnaryReactor*>> calls;
    bool stop = false;
    {
      const std::lock_guard lock(self->mutex_);
      calls.swap(self->queue_);
      stop = self->stop_;
    }
    evbuffer* out = bufferevent_get_output(self->bev_);
    for (auto& [key, reactor] : calls) {
      evbuffer_add_printf(out, "get %s\r\nincr %s 1\r\n", key.c_str(), key.c_str());
      self->awaited_.push_back({Awaited::Kind::get, key, reactor});
      self->awaited_.push_back({Awaited::Kind::incr, std::move(key), nullptr});
    }
    if (stop) {
      for (auto& a : self->awaited_)
        if (a.reactor != nullptr) a.reactor->Finish(grpc::Status::CANCELLED);
      self->awaited_.clear();
      event_base_loopbreak(self->base_);
    }
  }

  static void on_read(bufferevent* bev, void* self_ptr) {
    auto* self = static_cast<MemcacheFloorService*>(self_ptr);
    evbuffer* in = bufferevent_get_input(bev);
    evbuffer* out = bufferevent_get_output(bev);
    while (!self->awaited_.empty()) {
      Awaited& a = self->awaited_.front();
      if (a.kind == Awaited::Kind::get) {
        // VALUE <key> <flags> <bytes>\r\n<data>\r\nEND\r\n or END\r\n: only "END" matters.
        const evbuffer_ptr end = evbuffer_search(in, "END\r\n", 5, nullptr);
        if (end.pos < 0) return;
        evbuffer_drain(in, static_cast<std::size_t>(end.pos) + 5);
        a.reactor->Finish(grpc::Status::OK);
        self->awaited_.pop_front();
        continue;
      }
      std::size_t len = 0;
      char* line = evbuffer_readln(in, &len, EVBUFFER_EOL_CRLF_STRICT);
      if (line == nullptr) return;
      const std::string reply(line, len);
      std::free(line);
      Awaited done = std::move(a);
      self->awaited_.pop_front();
      if (done.kind == Awaited::Kind::incr && reply == "NOT_FOUND") {
        evbuffer_add_printf(out, "add %s 0 1 1\r\n1\r\n", done.key.c_str());
        self->awaited_.push_back({Awaited::Kind::add, std::move(done.key), nullptr});
      } else if (done.kind == Awaited::Kind::add && reply == "NOT_STORED") {
        evbuffer_add_printf(out, "incr %s 1\r\n", done.key.c_str());
        self->awaited_.push_back({Awaited::Kind::incr_again, std::move(done.key), nullptr});
      }
    }
  }

  event_base* base_ = nullptr;
  bufferevent* bev_ = nullptr;
  int wake_fd_ = -1;
  event* wake_ = nullptr;
  std::mutex mutex_;
  std::vector<std::pair<std::string, grpc::ServerUnaryReactor*>> queue_;
  bool stop_ = false;
  std::deque<Awaited> awaited_;  // the loop thread's only
  std::thread loop_;
};
#endif

/// Blocks SIGTERM and SIGINT in every thread (call before any thread starts), then, from
/// `wait_for_stop`, waits for one of them.
sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

int serve(const std::string& kind, const std::string& redis) {
  const sigset_t set = stop_signals();
  int sig = 0;
  if (kind == "http-noop") {
    // The same front and options as ratelimit_server's PORT (RATELIMIT_SERVER_HTTP_THREADS,
    // default 4), the same route kind (an asynchronous prefix route), answered at once.
    ratelimit::server::HttpFrontOptions options;
    if (!redis.empty()) options.threads = static_cast<unsigned>(std::atoi(redis.c_str()));
    ratelimit::server::HttpRoutes routes;
    routes.prefix_async("*", "/check/",
                        [](const ratelimit::server::HttpRequest&,
                           std::function<void(ratelimit::server::HttpResponse)> reply) {
                          reply({200, "text/plain", "OK\n", {}});
                        });
    ratelimit::server::HttpFront front(std::move(routes), "127.0.0.1", 0, options);
    std::printf("port %d\n", front.port());
    std::fflush(stdout);
    sigwait(&set, &sig);
    front.stop();
    return 0;
  }
  if (kind == "noop") {
    NoopService noop;
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&noop);
    const auto server = builder.BuildAndStart();
    std::printf("port %d\n", port);
    std::fflush(stdout);
    sigwait(&set, &sig);
    server->Shutdown();
    return 0;
  }
#ifdef RATELIMIT_BENCH_HAVE_LIBEVENT
  if (kind == "redisfloor" && !redis.empty()) {
    RedisFloorService floor(redis.substr(0, redis.rfind(':')),
                            std::atoi(redis.substr(redis.rfind(':') + 1).c_str()));
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&floor);
    const auto server = builder.BuildAndStart();
    std::printf("port %d\n", port);
    std::fflush(stdout);
    sigwait(&set, &sig);
    server->Shutdown();
    return 0;
  }
  if (kind == "memcachefloor" && !redis.empty()) {
    MemcacheFloorService floor(redis.substr(0, redis.rfind(':')),
                               std::atoi(redis.substr(redis.rfind(':') + 1).c_str()));
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&floor);
    const auto server = builder.BuildAndStart();
    std::printf("port %d\n", port);
    std::fflush(stdout);
    sigwait(&set, &sig);
    server->Shutdown();
    return 0;
  }
#endif
  // In process as ratelimit_server sets it up (main.cpp): our /metrics' exporter and call
  // timer, and the stats: statsdoff as USE_STATSD=false, statsd as USE_STATSD=true over TCP to
  // the daemon at host:port.
  if (kind == "statsdoff" || (kind == "statsd" && !redis.empty())) {
    ratelimit::server::stats::Options o;
    o.use_statsd = kind == "statsd";
    if (o.use_statsd) {
      o.statsd_host = redis.substr(0, redis.rfind(':'));
      o.statsd_port = std::atoi(redis.substr(redis.rfind(':') + 1).c_str());
    }
    ratelimit::server::stats::Runtime stats(o);
    auto exporter = std::make_shared<ratelimit::PrometheusExporter>();
    ratelimit::server::ServiceSettings settings;
    settings.listener = exporter;
    settings.call_timer = [exporter](std::chrono::nanoseconds d) { exporter->record_call(d); };
    settings.stats = stats.observer();
    settings.observer = stats.descriptor_observer();
    ratelimit::server::GrpcServer server(
        service_on(ratelimit::server::make_memory_counters(), std::move(settings)), "127.0.0.1:0");
    std::printf("port %d\n", server.port());
    std::fflush(stdout);
    sigwait(&set, &sig);
    server.shutdown(std::chrono::seconds{1});
    stats.stop();
    return 0;
  }
  std::shared_ptr<ratelimit::server::Counters> counters;
  if (kind == "inprocess") {
    counters = ratelimit::server::make_memory_counters();
  } else if (kind == "redis" && !redis.empty()) {
    counters = redis_counters(redis);
  } else if (kind == "memcache" && !redis.empty()) {
    ratelimit::server::MemcacheOptions options;
    options.servers = {redis};
    counters = ratelimit::server::make_memcache_counters(options);
  }
  if (!counters) {
    std::fprintf(stderr,
                 "--serve: noop, inprocess, statsdoff, statsd HOST:PORT, redis HOST:PORT, "
                 "redisfloor HOST:PORT (redis needs hiredis, redisfloor libevent too), "
                 "memcache HOST:PORT, memcachefloor HOST:PORT (libevent) or http-noop "
                 "[THREADS]\n");
    return 2;
  }
  ratelimit::server::GrpcServer server(service_on(std::move(counters)), "127.0.0.1:0");
  std::printf("port %d\n", server.port());
  std::fflush(stdout);
  sigwait(&set, &sig);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--serve") == 0)
    return serve(argv[2], argc > 3 ? argv[3] : "");
  if (argc == 6 && std::strcmp(argv[1], "--drive") == 0) {
    const Result r =
        drive(std::atoi(argv[2]), std::atof(argv[3]), std::atoi(argv[4]), std::atof(argv[5]));
    std::printf("%.0f %.1f %.1f %ld\n", r.per_second, r.p50_us, r.p99_us, r.errors);
    return 0;
  }
  const double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
  const int in_flight = argc > 2 ? std::atoi(argv[2]) : 64;
  std::printf("ShouldRateLimit, one descriptor, %d calls in flight, %.1f s per run\n", in_flight,
              seconds);
  std::printf("%-22s %12s %8s %10s %10s %12s %10s %7s\n", "server", "peak calls/s", "x floor",
              "p50 us", "p99 us", "half: p50", "half: p99", "errors");

  NoopService noop;
  int noop_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &noop_port);
  builder.RegisterService(&noop);
  const auto noop_server = builder.BuildAndStart();
  const Result floor = drive(noop_port, seconds, in_flight, 0);
  const Result floor_half = drive(noop_port, seconds, in_flight, floor.per_second / 2);
  std::printf("%-22s %12.0f %8.2f %10.0f %10.0f %12.0f %10.0f %7ld\n", "no-op (floor)",
              floor.per_second, 1.0, floor.p50_us, floor.p99_us, floor_half.p50_us,
              floor_half.p99_us, floor.errors + floor_half.errors);
  std::fflush(stdout);
  noop_server->Shutdown();

  {
    ratelimit::server::GrpcServer server(service_on(ratelimit::server::make_memory_counters()),
                                         "127.0.0.1:0");
    report("in process", server.port(), seconds, in_flight, floor.per_second);
  }
#ifdef RATELIMIT_SERVER_HAVE_REDIS
  if (const char* redis = std::getenv("RATELIMIT_BENCH_REDIS")) {
    ratelimit::server::GrpcServer server(service_on(redis_counters(redis)), "127.0.0.1:0");
    report("Redis", server.port(), seconds, in_flight, floor.per_second);
  }
#endif
  return 0;
}
