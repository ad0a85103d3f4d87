#pragma once
/// @file xds/xds_client.hpp
/// The xDS config source: a State-of-the-World subscription to the rate limit configuration
/// (`rate_limit_config_type`) over envoy.service.discovery.v3.AggregatedDiscoveryService, as
/// the reference's src/provider/xds_grpc_sotw_provider.go with go-control-plane's ADS client
/// runs it. Each response replaces the whole configuration of a `Service` (a limit unchanged
/// by it keeps its counts, as on a file reload) and is then ACKed; a response that does not
/// load is NACKed and the configuration in force stays.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "discovery.pb.h"
#include "service.hpp"
#include "xds/xds_settings.hpp"

namespace ratelimit::server {

/// jpillora/backoff v1.0.0's `Backoff`, which the reference's xDS client waits by before it
/// reconnects: attempt n (from 0) waits min * factor^n, with jitter a uniform draw between min
/// and that, kept within [min, max]; min <= 0 reads as 100 ms, max <= 0 as 10 s, factor <= 0 as
/// 2, and min >= max always waits max. With the reference's defaults (10 s, 60 s, 0.5, jitter)
/// every wait is 10 s: 10 s * 0.5^n is at most 10 s, and is raised to the minimum.
/// Thread safety: a plain value.
class GoBackoff {
 public:
  GoBackoff(std::chrono::nanoseconds min, std::chrono::nanoseconds max, double factor,
            bool jitter) noexcept
      : min_(min), max_(max), factor_(factor), jitter_(jitter) {}
  /// The wait of attempt `attempt`, with `random` the draw in [0, 1) the jitter uses.
  std::chrono::nanoseconds for_attempt(double attempt, double random) const noexcept;
  /// The wait of the next attempt (the first is attempt 0); the attempts are never reset, as
  /// the reference never resets them.
  std::chrono::nanoseconds next(double random) noexcept { return for_attempt(attempts_++, random); }

 private:
  std::chrono::nanoseconds min_, max_;
  double factor_;
  bool jitter_;
  double attempts_ = 0;
};

/// go-grpc-middleware's BackoffLinearWithJitter(interval, 0.5): `interval` times a uniform
/// factor in [0.5, 1.5) (`random` in [0, 1)); never below 1 ms, so that a refused connection
/// is not retried in a busy loop.
std::chrono::nanoseconds linear_with_jitter(std::chrono::nanoseconds interval,
                                            double random) noexcept;

/// The subscription, on a thread of its own between `start` and `stop`.
/// Thread safety: every member is safe from many threads (`start` once).
class XdsClient {
 public:
  /// Reads the TLS files the settings name; throws `std::invalid_argument` naming the variable
  /// and file when one cannot be read. `merge`: MERGE_DOMAIN_CONFIG, as for files.
  XdsClient(std::shared_ptr<Service> service, XdsSettings settings, DomainMerge merge);
  ~XdsClient();
  XdsClient(const XdsClient&) = delete;
  XdsClient& operator=(const XdsClient&) = delete;

  /// Connects (retrying every CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL with jitter),
  /// subscribes, and after the stream breaks waits by `GoBackoff` and does it again.
  void start();
  /// Ends the stream and the thread; the configuration in force stays.
  void stop();

  /// Waits until the first response has been handled (loaded and ACKed, or refused by the
  /// rules and NACKed; as the reference's NewService waits for the first configuration
  /// event), at most `timeout`. Returns whether it has been.
  bool wait_first_response(std::chrono::milliseconds timeout) const;
  /// Whether the configuration in force came from a response with at least one domain (for
  /// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
  bool loaded() const;
  /// The error of the last response refused, "" after one loaded.
  std::string last_error() const;
  /// How many streams have been opened (1 after the first subscription).
  std::uint64_t streams() const;
  /// How many connection attempts failed (the management server unreachable, or TLS refused).
  std::uint64_t connect_failures() const;

 private:
  void run();
  std::shared_ptr<grpc::Channel> connect();
  void subscribe(const std::shared_ptr<grpc::Channel>& channel);
  envoy::service::discovery::v3::DiscoveryRequest request(const std::string* error) const;
  bool wait(std::chrono::nanoseconds d);
  double draw();

  std::shared_ptr<Service> service_;
  XdsSettings settings_;
  DomainMerge merge_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  grpc::ChannelArguments arguments_;
  std::mt19937_64 random_;

  // What go-control-plane's ADS client remembers across streams: the version of the last
  // response ACKed, the version and nonce of the last received.
  std::string acked_version_;
  std::string received_version_;
  std::string received_nonce_;

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  bool stopping_ = false;
  bool first_handled_ = false;
  bool loaded_ = false;
  std::string error_;
  std::uint64_t streams_ = 0;
  std::uint64_t connect_failures_ = 0;
  grpc::ClientContext* context_ = nullptr;
  std::thread thread_;
};

}  // namespace ratelimit::server
