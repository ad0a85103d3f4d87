#include "service.hpp"

#include <future>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "call.hpp"
#include "counting.hpp"
#include "dynamic_metadata.hpp"
#include "go_window.hpp"
#include "over_limit_cache.hpp"
#include "plan.hpp"
#include "response.hpp"
#include "server_algorithms.hpp"

namespace ratelimit::server {
namespace {

namespace pb = envoy::service::ratelimit::v3;

std::string what(const std::exception_ptr& err) {
  try {
    std::rethrow_exception(err);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

Service::Service(std::shared_ptr<Counters> counters, ServiceSettings settings, Now now)
    : counters_(std::move(counters)), settings_(std::move(settings)), now_(std::move(now)) {
  check_counting_modes(settings_.all_or_nothing, settings_.stop_increment_when_over);
  if (settings_.over_limit_cache_bytes > 0 && !settings_.all_or_nothing)
    cache_ = std::make_unique<OverLimitCache>(settings_.over_limit_cache_bytes);
}

Service::~Service() = default;

std::chrono::nanoseconds Service::system_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::system_clock::now().time_since_epoch());
}

void Service::reload(RulesConfig config) {
  // A rule is served by the algorithm it names; its parameters are checked now, so that a
  // limit no model can hold is refused with its line rather than failing every call.
  for (const Rules& rules : config.domains())
    for (const Rule& r : rules.rules()) {
      bool known = false;
      ServerAlgorithms::visit(r.algorithm.name, [&]<class M>() {
        known = true;
        if (r.blocks() || std::is_same_v<M, GoWindowModel>) return;
        try {
          (void)M::from_rate(r.rate);
        } catch (const std::invalid_argument& e) {
          throw std::invalid_argument(r.source + ":" + std::to_string(r.line) +
                                      ": rate_limit.algorithm = \"" +
                                      std::string(r.algorithm.name) + "\": " + e.what());
        }
      });
      if (r.locks_out() && !settings_.lockouts)
        throw std::invalid_argument(
            r.source + ":" + std::to_string(r.line) + ": rate_limit.block_duration of rule \"" +
            r.name +
            "\": a lockout needs Redis or the in-process storage (its lock is a library "
            "algorithm's state; memcached, BACKEND_TYPE=memcache, keeps only the Go window)");
      if (!known)  // a configuration loaded with another registry
        throw std::invalid_argument(r.source + ":" + std::to_string(r.line) +
                                    ": rate_limit.algorithm = \"" + std::string(r.algorithm.name) +
                                    "\": not an algorithm of this server (load the rules with "
                                    "ServerAlgorithms)");
    }
  auto next = std::make_shared<Served>();
  next->rules = std::move(config);
  // The rules' metadata as the Structs the dynamic metadata merges (read once per reload; the
  // rules' addresses are stable inside the served configuration).
  for (const Rules& rules : next->rules.domains())
    for (const Rule& r : rules.rules()) {
      if (r.metadata.empty()) continue;
      try {
        if (auto s = metadata_struct(r.metadata)) next->metadata.emplace(&r, std::move(*s));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(r.source + ":" + std::to_string(r.line) + ": " + e.what());
      }
    }
  const std::lock_guard lock(mutex_);
  served_ = std::move(next);
}

std::shared_ptr<const RulesConfig> Service::config() const {
  const std::lock_guard lock(mutex_);
  if (!served_) return nullptr;
  return std::shared_ptr<const RulesConfig>(served_, &served_->rules);
}

grpc::Status Service::should_rate_limit(const pb::RateLimitRequest& request,
                                        pb::RateLimitResponse& response) {
  // Shared: `done` may still be returning on the I/O thread when the wait ends.
  auto promise = std::make_shared<std::promise<grpc::Status>>();
  auto status = promise->get_future();
  should_rate_limit_async(request, response,
                          [promise](grpc::Status st) { promise->set_value(std::move(st)); });
  return status.get();
}

void Service::should_rate_limit_async(const pb::RateLimitRequest& request,
                                      pb::RateLimitResponse& response,
                                      std::function<void(grpc::Status)> done) {
  if (!settings_.stats && !settings_.call_timer)
    return decide_async(request, response, std::move(done));
  // The reference's interceptor (src/metrics/metrics.go): every call counted and timed; our
  // /metrics times every call too.
  const auto start = std::chrono::steady_clock::now();
  decide_async(request, response, [this, start, done = std::move(done)](grpc::Status st) {
    const auto elapsed = std::chrono::steady_clock::now() - start;
    if (settings_.stats) settings_.stats->on_call("ShouldRateLimit", elapsed);
    if (settings_.call_timer) settings_.call_timer(elapsed);
    done(std::move(st));
  });
}

void Service::decide_async(const pb::RateLimitRequest& request, pb::RateLimitResponse& response,
                           std::function<void(grpc::Status)> done) {
  auto call = std::make_shared<Call>();
  call->response = &response;
  {
    const std::lock_guard lock(mutex_);
    call->served = served_;
  }
  if (grpc::Status st = plan_call(request, settings_, *call); !st.ok()) {
    // A panic of the service's own (ratelimit.go ShouldRateLimit): service_error.
    if (settings_.stats) settings_.stats->on_error(stats::CallError::service);
    return done(st);
  }
  call->now = now_();
  // The listener's decision latency, sampled as the library samples it (1 in 64 per thread):
  // from here to the answer, the counting's own time.
  if (settings_.listener && ratelimit::detail::sample_latency())
    call->latency_from = std::chrono::steady_clock::now();
  auto answer = [this, call, done = std::move(done)](std::exception_ptr err) {
    // The reference returns the storage's error (a RedisError) to grpc-go: UNKNOWN, its text.
    if (err) {
      // A RedisError (ratelimit.go ShouldRateLimit): redis_error.
      if (settings_.stats) settings_.stats->on_error(stats::CallError::redis);
      return done(grpc::Status(grpc::StatusCode::UNKNOWN, what(err)));
    }
    build_response(*call, settings_);
    done(grpc::Status::OK);
  };
  // Lockouts around the counting: the locks checked before, taken after (neither reaches the
  // storage when no rule of the call has a lockout).
  Counted counted = [this, call, answer = std::move(answer)](std::exception_ptr err) {
    if (err) return answer(err);
    take_locks(counters_, call, answer);
  };
  Counted checked = [this, call, counted = std::move(counted)](std::exception_ptr err) {
    if (err) return counted(err);
    if (settings_.all_or_nothing)
      count_all_or_nothing(counters_, call, counted);
    else
      count_each(counters_, cache_.get(), settings_.stop_increment_when_over, call, counted);
  };
  check_locks(counters_, std::move(call), std::move(checked));
}

}  // namespace ratelimit::server
