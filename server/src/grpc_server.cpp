#include "grpc_server.hpp"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <arpa/inet.h>

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/server_builder.h>

#include "ascii.hpp"
#include "health.hpp"
#include "rls.grpc.pb.h"

namespace ratelimit::server {

namespace pb = envoy::service::ratelimit::v3;

struct GrpcServer::Handler final : pb::RateLimitService::CallbackService {
  explicit Handler(std::shared_ptr<server::Service> s) : service(std::move(s)) {}
  // The call is finished when the storage answers (at once in process; on the storage's I/O
  // thread on Redis), so no gRPC thread waits for Redis.
  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* context,
                                            const pb::RateLimitRequest* request,
                                            pb::RateLimitResponse* response) override {
    auto* reactor = context->DefaultReactor();
    service->should_rate_limit_async(*request, *response,
                                     [reactor](grpc::Status st) { reactor->Finish(st); });
    return reactor;
  }
  std::shared_ptr<server::Service> service;
};

namespace {

/// An IP address in its binary form ("" when `text` is not one), so that "::1" and
/// "0:0:0:0:0:0:0:1" compare equal.
std::string ip_bytes(std::string text) {
  if (text.size() > 2 && text.front() == '[' && text.back() == ']')
    text = text.substr(1, text.size() - 2);
  unsigned char buf[16];
  if (::inet_pton(AF_INET, text.c_str(), buf) == 1) return std::string(buf, buf + 4);
  if (::inet_pton(AF_INET6, text.c_str(), buf) == 1) return std::string(buf, buf + 16);
  return {};
}

/// Go's crypto/x509 matchHostnames: labels compared without case, a leading "*" label of the
/// pattern matching one label of the host, a trailing dot of the host ignored.
bool host_matches(std::string pattern, std::string host) {
  pattern = ascii_lower(pattern);
  host = ascii_lower(host);
  if (!host.empty() && host.back() == '.') host.pop_back();
  if (pattern.empty() || host.empty()) return false;
  std::vector<std::string> p, h;
  const auto labels = [](const std::string& s, std::vector<std::string>& out) {
    std::string::size_type start = 0;
    while (true) {
      const auto dot = s.find('.', start);
      out.push_back(s.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  };
  labels(pattern, p);
  labels(host, h);
  if (p.size() != h.size()) return false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (i == 0 && p[i] == "*" && !h[i].empty()) continue;
    if (p[i].empty() || p[i] != h[i]) return false;
  }
  return true;
}

/// GRPC_CLIENT_TLS_SAN: after the chain is verified, the client certificate must carry the
/// name among its DNS SANs (or, for an IP address, among its IP SANs), as the Go service's
/// verifyClient checks it with x509.VerifyOptions.DNSName.
class SanVerifier final : public grpc::experimental::ExternalCertificateVerifier {
 public:
  explicit SanVerifier(std::string san) : san_(std::move(san)), ip_(ip_bytes(san_)) {}
  bool Verify(grpc::experimental::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)>, grpc::Status* sync_status) override {
    bool ok = false;
    if (!ip_.empty()) {
      for (const auto& name : request->ip_names())
        ok = ok || ip_bytes(std::string(name.data(), name.size())) == ip_;
    } else {
      for (const auto& name : request->dns_names())
        ok = ok || host_matches(std::string(name.data(), name.size()), san_);
    }
    *sync_status = ok ? grpc::Status::OK
                      : grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                     "the client certificate does not carry the SAN of "
                                     "GRPC_CLIENT_TLS_SAN");
    return true;  // decided here, synchronously
  }
  void Cancel(grpc::experimental::TlsCustomVerificationCheckRequest*) override {}

 private:
  std::string san_;
  std::string ip_;
};

/// A PEM file the server needs at start: readable, with `marker` in it (the Go service fails
/// at start when it cannot load them).
void check_pem(const char* variable, const std::string& path, const char* marker) {
  std::ifstream in(path);
  std::stringstream text;
  if (in) text << in.rdbuf();
  if (!in || text.str().find(marker) == std::string::npos)
    throw std::invalid_argument(std::string(variable) + " = \"" + path +
                                "\": cannot read a PEM file with \"" + marker + "\" from it");
}

int channel_ms(std::chrono::milliseconds d) {
  // 0 is "never" in Go's keepalive.ServerParameters; INT_MAX is gRPC core's infinity.
  if (d.count() <= 0 || d.count() >= INT_MAX) return INT_MAX;
  return static_cast<int>(d.count());
}

}  // namespace

GrpcTransport GrpcTransport::from(const Settings& s) {
  GrpcTransport t;
  t.host = s.grpc_host;
  t.port = static_cast<int>(s.grpc_port);
  t.unix_socket = s.grpc_uds;
  t.max_connection_age =
      std::chrono::duration_cast<std::chrono::milliseconds>(s.grpc_max_connection_age);
  t.max_connection_age_grace =
      std::chrono::duration_cast<std::chrono::milliseconds>(s.grpc_max_connection_age_grace);
  // A positive age under 1 ms is 1 ms, not "never".
  if (s.grpc_max_connection_age.count() > 0 && t.max_connection_age.count() == 0)
    t.max_connection_age = std::chrono::milliseconds{1};
  if (s.grpc_max_connection_age_grace.count() > 0 && t.max_connection_age_grace.count() == 0)
    t.max_connection_age_grace = std::chrono::milliseconds{1};
  t.tls = s.grpc_server_use_tls;
  t.cert_file = s.grpc_server_tls_cert;
  t.key_file = s.grpc_server_tls_key;
  t.client_ca_file = s.grpc_client_tls_cacert;
  t.client_san = s.grpc_client_tls_san;
  return t;
}

std::string GrpcTransport::address() const {
  if (!unix_socket.empty()) return "unix:" + unix_socket;
  std::string h = host;
  // Go's net.JoinHostPort: an empty host is every address; an IPv6 address goes in brackets.
  if (h.empty()) h = "[::]";
  if (h.find(':') != std::string::npos && h.front() != '[') h = "[" + h + "]";
  return h + ":" + std::to_string(port);
}

GrpcServer::GrpcServer(std::shared_ptr<Service> service, const std::string& address)
    : service_(std::move(service)), handler_(std::make_unique<Handler>(service_)) {
  GrpcTransport plain;
  plain.max_connection_age = std::chrono::milliseconds{0};
  plain.max_connection_age_grace = std::chrono::milliseconds{0};
  start(plain, true, address);
}

GrpcServer::GrpcServer(std::shared_ptr<Service> service, const GrpcTransport& transport)
    : service_(std::move(service)), handler_(std::make_unique<Handler>(service_)) {
  start(transport, false, transport.address());
}

void GrpcServer::start(const GrpcTransport& transport, bool plain_address,
                       const std::string& address) {
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!plain_address && transport.tls) {
    check_pem("GRPC_SERVER_TLS_CERT", transport.cert_file, "CERTIFICATE");
    check_pem("GRPC_SERVER_TLS_KEY", transport.key_file, "PRIVATE KEY");
    if (!transport.client_ca_file.empty())
      check_pem("GRPC_CLIENT_TLS_CACERT", transport.client_ca_file, "CERTIFICATE");
    // The files are read again every reload_interval; a changed pair that does not load (or
    // whose key does not match) keeps the previous one, as the Go service's CertProvider.
    const auto interval =
        static_cast<unsigned>(std::max<std::int64_t>(1, transport.reload_interval.count()));
    auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        transport.key_file, transport.cert_file, transport.client_ca_file, interval);
    grpc::experimental::TlsServerCredentialsOptions options(provider);
    options.watch_identity_key_cert_pairs();
    if (transport.client_ca_file.empty()) {
      options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    } else {
      options.watch_root_certs();
      options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
      if (!transport.client_san.empty())
        options.set_certificate_verifier(
            grpc::experimental::ExternalCertificateVerifier::Create<SanVerifier>(
                transport.client_san));
    }
    credentials = grpc::experimental::TlsServerCredentials(options);
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, credentials, &port_);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                             channel_ms(transport.max_connection_age));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                             channel_ms(transport.max_connection_age_grace));
  builder.RegisterService(handler_.get());
  server_ = builder.BuildAndStart();
  const bool unix_socket = address.rfind("unix:", 0) == 0;
  if (!server_ || (!unix_socket && port_ == 0))
    throw std::runtime_error(std::string(unix_socket ? "GRPC_UDS" : "GRPC_HOST, GRPC_PORT") +
                             ": cannot listen on " + address);
  if (unix_socket) port_ = 0;
  set_serving(false);  // as the reference's HealthChecker starts while Redis is unconfirmed
}

void GrpcServer::set_serving(bool serving) {
  if (auto* health = server_->GetHealthCheckService())
    health->SetServingStatus(Health::service_name, serving);
}

GrpcServer::~GrpcServer() { shutdown(std::chrono::milliseconds{0}); }

void GrpcServer::shutdown(std::chrono::milliseconds grace) {
  if (down_) return;
  down_ = true;
  set_serving(false);
  server_->Shutdown(std::chrono::system_clock::now() + grace);
  server_->Wait();
}

}  // namespace ratelimit::server
