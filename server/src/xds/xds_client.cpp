#include "xds/xds_client.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include <grpcpp/create_channel.h>

#include "discovery.grpc.pb.h"
#include "xds/xds_rules.hpp"

namespace ratelimit::server {

namespace pb = envoy::service::discovery::v3;
using std::chrono::nanoseconds;

nanoseconds GoBackoff::for_attempt(double attempt, double random) const noexcept {
  // jpillora/backoff v1.0.0, Backoff.ForAttempt.
  const nanoseconds min = min_ <= nanoseconds{0} ? std::chrono::milliseconds{100} : min_;
  const nanoseconds max = max_ <= nanoseconds{0} ? std::chrono::seconds{10} : max_;
  if (min >= max) return max;
  const double factor = factor_ <= 0 ? 2.0 : factor_;
  const double minf = static_cast<double>(min.count());
  double durf = minf * std::pow(factor, attempt);
  if (jitter_) durf = random * (durf - minf) + minf;
  // Past int64 (Go's maxInt64 less 512, as it compares), the maximum.
  if (!(durf <= 9223372036854775295.0)) return max;
  const nanoseconds dur{static_cast<std::int64_t>(durf)};
  return std::clamp(dur, min, max);
}

nanoseconds linear_with_jitter(nanoseconds interval, double random) noexcept {
  // go-grpc-middleware retry.BackoffLinearWithJitter: interval * (1 + 0.5 * (2 * random - 1)).
  const double d = static_cast<double>(interval.count()) * (1.0 + 0.5 * (2.0 * random - 1.0));
  return std::max<nanoseconds>(nanoseconds{static_cast<std::int64_t>(d)},
                               std::chrono::milliseconds{1});
}

namespace {

std::string read_pem(const std::string& variable, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in || text.str().empty())
    throw std::invalid_argument(variable + " = \"" + path + "\": cannot read the file");
  return text.str();
}

/// The system's trusted CAs, which the reference trusts besides CONFIG_GRPC_XDS_SERVER_TLS_CACERT
/// (Go's x509.SystemCertPool); "" when the system has no bundle.
std::string system_roots() {
  const char* env = std::getenv("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH");
  for (const char* path : {env, "/etc/ssl/certs/ca-certificates.crt"}) {
    if (path == nullptr) continue;
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (in && !text.str().empty()) return text.str();
  }
  return "";
}

}  // namespace

XdsClient::XdsClient(std::shared_ptr<Service> service, XdsSettings settings, DomainMerge merge)
    : service_(std::move(service)),
      settings_(std::move(settings)),
      merge_(merge),
      random_(std::random_device{}()) {
  if (settings_.use_tls) {
    grpc::SslCredentialsOptions tls;
    if (!settings_.server_ca.empty())
      tls.pem_root_certs = read_pem("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", settings_.server_ca) +
                           "\n" + system_roots();
    // As the reference (utils.TlsConfigFromFiles): a client certificate when both are set.
    if (!settings_.client_cert.empty() && !settings_.client_key.empty()) {
      tls.pem_cert_chain = read_pem("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", settings_.client_cert);
      tls.pem_private_key = read_pem("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", settings_.client_key);
    }
    credentials_ = grpc::SslCredentials(tls);
    if (!settings_.server_san.empty()) arguments_.SetSslTargetNameOverride(settings_.server_san);
  } else {
    credentials_ = grpc::InsecureChannelCredentials();
  }
  if (settings_.max_message_bytes > 0)
    arguments_.SetMaxReceiveMessageSize(static_cast<int>(settings_.max_message_bytes));
  // Each connection attempt on a fresh subchannel: one shared with an earlier channel would
  // still be in gRPC's own reconnect backoff, and the retry interval would not be ours.
  arguments_.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
}

XdsClient::~XdsClient() { stop(); }

void XdsClient::start() {
  thread_ = std::thread([this] { run(); });
}

void XdsClient::stop() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool XdsClient::wait_first_response(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [this] { return first_handled_; });
}

bool XdsClient::loaded() const {
  const std::lock_guard lock(mutex_);
  return loaded_;
}

std::string XdsClient::last_error() const {
  const std::lock_guard lock(mutex_);
  return error_;
}

std::uint64_t XdsClient::streams() const {
  const std::lock_guard lock(mutex_);
  return streams_;
}

std::uint64_t XdsClient::connect_failures() const {
  const std::lock_guard lock(mutex_);
  return connect_failures_;
}

double XdsClient::draw() { return std::uniform_real_distribution<double>(0.0, 1.0)(random_); }

bool XdsClient::wait(nanoseconds d) {
  std::unique_lock lock(mutex_);
  return !changed_.wait_for(lock, d, [this] { return stopping_; });
}

void XdsClient::run() {
  GoBackoff backoff(settings_.backoff_initial, settings_.backoff_max, settings_.backoff_factor,
                    settings_.backoff_jitter);
  std::cerr << "ratelimit_server: xds: subscribing to " << rate_limit_config_type << " at "
            << settings_.server_url << " as node \"" << settings_.node_id << "\"\n";
  for (bool first = true;; first = false) {
    if (!first) {
      // As the reference: after a broken stream, a wait by the backoff, then a new connection.
      const nanoseconds d = backoff.next(draw());
      std::cerr << "ratelimit_server: xds: reconnecting in "
                << std::chrono::duration_cast<std::chrono::milliseconds>(d).count() << " ms\n";
      if (!wait(d)) return;
    }
    const auto channel = connect();
    if (!channel) return;
    subscribe(channel);
    const std::lock_guard lock(mutex_);
    if (stopping_) return;
  }
}

std::shared_ptr<grpc::Channel> XdsClient::connect() {
  while (true) {
    auto channel = grpc::CreateCustomChannel(settings_.server_url, credentials_, arguments_);
    // One connection attempt: from IDLE through CONNECTING to READY or TRANSIENT_FAILURE.
    auto state = channel->GetState(true);
    const auto give_up = std::chrono::system_clock::now() + std::chrono::seconds{20};
    while (state == GRPC_CHANNEL_IDLE || state == GRPC_CHANNEL_CONNECTING) {
      channel->WaitForStateChange(
          state, std::chrono::system_clock::now() + std::chrono::milliseconds{200});
      {
        const std::lock_guard lock(mutex_);
        if (stopping_) return nullptr;
      }
      if (std::chrono::system_clock::now() > give_up) break;
      state = channel->GetState(true);
    }
    if (state == GRPC_CHANNEL_READY) return channel;
    {
      const std::lock_guard lock(mutex_);
      ++connect_failures_;
    }
    const nanoseconds d = linear_with_jitter(settings_.connect_retry_interval, draw());
    std::cerr << "ratelimit_server: xds: cannot connect to " << settings_.server_url
              << " (retrying in "
              << std::chrono::duration_cast<std::chrono::milliseconds>(d).count() << " ms)\n";
    if (!wait(d)) return nullptr;
  }
}

pb::DiscoveryRequest XdsClient::request(const std::string* error) const {
  // As go-control-plane's ADS client sends every request: the node, the type, no resource
  // names (every resource of the type), the version last ACKed, the nonce last received.
  pb::DiscoveryRequest r;
  r.set_version_info(acked_version_);
  auto* node = r.mutable_node();
  node->set_id(settings_.node_id);
  auto* fields = node->mutable_metadata()->mutable_fields();
  for (const auto& [key, value] : settings_.node_metadata) (*fields)[key].set_string_value(value);
  r.set_type_url(std::string(rate_limit_config_type));
  r.set_response_nonce(received_nonce_);
  if (error != nullptr) r.mutable_error_detail()->set_message(*error);
  return r;
}

void XdsClient::subscribe(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = pb::AggregatedDiscoveryService::NewStub(channel);
  grpc::ClientContext context;
  for (const auto& [name, value] : settings_.additional_headers) context.AddMetadata(name, value);
  {
    const std::lock_guard lock(mutex_);
    if (stopping_) return;
    context_ = &context;
    ++streams_;
  }
  auto stream = stub->StreamAggregatedResources(&context);
  // The first request of a stream is go-control-plane's InitConnect, an Ack: the last response
  // received counts as ACKed from then on (a NACKed one too, as there).
  acked_version_ = received_version_;
  bool open = stream->Write(request(nullptr));
  pb::DiscoveryResponse response;
  while (open && stream->Read(&response)) {
    received_version_ = response.version_info();
    received_nonce_ = response.nonce();
    std::string error;
    bool decoded = false;
    std::size_t domains = 0;
    try {
      const auto sources = decode_resources(response.resources());
      decoded = true;
      RulesConfig config = rules_config(sources, merge_);
      domains = config.domains().size();
      // In force before the ACK leaves: a call after the management server saw the ACK is
      // decided by this configuration.
      service_->reload(std::move(config));
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (error.empty()) {
      acked_version_ = received_version_;
      std::cerr << "ratelimit_server: xds: version \"" << received_version_ << "\" in force ("
                << response.resources_size() << " resources)\n";
    } else {
      std::cerr << "ratelimit_server: xds: version \"" << received_version_
                << "\" refused: " << error << " (the previous configuration stays in force)\n";
    }
    {
      const std::lock_guard lock(mutex_);
      // The reference's service waits for its first configuration event, which a response
      // that does not decode never sends.
      if (decoded) first_handled_ = true;
      if (error.empty()) loaded_ = domains > 0;
      error_ = error;
    }
    changed_.notify_all();
    open = stream->Write(request(error.empty() ? nullptr : &error));
  }
  const grpc::Status status = stream->Finish();
  {
    const std::lock_guard lock(mutex_);
    context_ = nullptr;
    if (stopping_) return;
  }
  std::cerr << "ratelimit_server: xds: stream ended: " << status.error_code() << " "
            << status.error_message() << "\n";
}

}  // namespace ratelimit::server
