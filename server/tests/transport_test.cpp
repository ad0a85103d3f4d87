// The gRPC transport as the Go service's settings describe it (src/server/server_impl.go
// newServer and startGrpc, src/settings/settings.go GrpcServerTlsConfig, src/server/tls.go
// verifyClient): TLS with certificate files reloaded on change, mutual TLS with
// GRPC_CLIENT_TLS_SAN, a unix socket (GRPC_UDS), IPv6 (GRPC_HOST="::"), and GOAWAY after
// GRPC_MAX_CONNECTION_AGE. Certificates: scripts/tls_certs.sh, named by
// RATELIMIT_TEST_TLS_CERTS (scripts/test.sh makes them).

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "counters.hpp"
#include "grpc_server.hpp"
#include "http_server.hpp"
#include "rls.grpc.pb.h"
#include "server_algorithms.hpp"
#include "service.hpp"
#include "settings.hpp"

namespace {

namespace rs = ratelimit::server;
namespace pb = envoy::service::ratelimit::v3;

rs::Settings transport_env(const std::map<std::string, std::string>& env) {
  return rs::read_settings(
      [&](const std::string& name) -> std::optional<std::string> {
        const auto it = env.find(name);
        if (it == env.end()) return std::nullopt;
        return it->second;
      },
      {}, {});
}

/// The test certificates' directory; fails the test when they were not made.
std::string cert(const std::string& name) {
  const char* dir = std::getenv("RATELIMIT_TEST_TLS_CERTS");
  if (dir == nullptr || *dir == '\0')
    throw std::runtime_error(
        "the transport tests need the test certificates: run them through scripts/test.sh, or "
        "run scripts/tls_certs.sh DIR and set RATELIMIT_TEST_TLS_CERTS=DIR");
  const std::string path = std::string(dir) + "/" + name;
  if (!std::filesystem::exists(path))
    throw std::runtime_error("RATELIMIT_TEST_TLS_CERTS has no " + name +
                             " (made by an older scripts/tls_certs.sh?)");
  return path;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A fresh directory, removed at the end.
struct Scratch {
  Scratch() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() /
           ("ratelimit_transport_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path path;
};

/// A service with one rule: domain d, key k, 1000 per minute.
std::shared_ptr<rs::Service> service() {
  auto s = std::make_shared<rs::Service>(rs::make_memory_counters(), rs::ServiceSettings{});
  const ratelimit::RulesSource sources[] = {
      {"a.yaml",
       "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, "
       "requests_per_unit: 1000}\n"}};
  s->reload(ratelimit::RulesConfig::from_strings<rs::ServerAlgorithms>(sources));
  return s;
}

/// One ShouldRateLimit call on `channel`; its status.
grpc::Status call(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = pb::RateLimitService::NewStub(channel);
  pb::RateLimitRequest req;
  req.set_domain("d");
  auto* e = req.add_descriptors()->add_entries();
  e->set_key("k");
  e->set_value("v");
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds{10});
  pb::RateLimitResponse res;
  const auto st = stub->ShouldRateLimit(&ctx, req, &res);
  if (st.ok() && res.overall_code() != pb::RateLimitResponse::OK)
    return {grpc::StatusCode::INTERNAL, "unexpected overall code"};
  return st;
}

/// A channel to 127.0.0.1:port over TLS trusting `ca`, presenting `client` (a name of the test
/// certificates, without .crt/.key) when not empty. The server's certificate names localhost
/// and 127.0.0.1.
std::shared_ptr<grpc::Channel> tls_channel(int port, const std::string& ca,
                                           const std::string& client = "") {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = read_file(cert(ca));
  if (!client.empty()) {
    o.pem_cert_chain = read_file(cert(client + ".crt"));
    o.pem_private_key = read_file(cert(client + ".key"));
  }
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("localhost");
  // A new connection for every channel: the tests compare handshakes.
  args.SetInt("grpc.use_local_subchannel_pool", 1);
  return grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), grpc::SslCredentials(o),
                                   args);
}

std::shared_ptr<grpc::Channel> plain_channel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt("grpc.use_local_subchannel_pool", 1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

/// Whether this host can bind ::1 (a container may have no IPv6).
bool have_ipv6_loopback() {
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

TEST_CASE("Transport: GRPC_SERVER_USE_TLS serves TLS; the certificate files are reloaded",
          "[transport]") {
  Scratch dir;
  const auto crt = dir.path / "tls.crt";
  const auto key = dir.path / "tls.key";
  std::filesystem::copy_file(cert("server.crt"), crt);
  std::filesystem::copy_file(cert("server.key"), key);
  const auto settings = transport_env({{"GRPC_HOST", "127.0.0.1"},
                                       {"GRPC_PORT", "0"},
                                       {"GRPC_SERVER_USE_TLS", "true"},
                                       {"GRPC_SERVER_TLS_CERT", crt.string()},
                                       {"GRPC_SERVER_TLS_KEY", key.string()},
                                       // Envoy Gateway's; read by no Go version: no effect.
                                       {"GRPC_SERVER_TLS_CA_CERT", cert("ca.crt")}});
  rs::GrpcServer server(service(), rs::GrpcTransport::from(settings));
  CHECK(call(tls_channel(server.port(), "ca.crt")).ok());  // no client certificate asked
  // A client that does not speak TLS, or does not trust the issuer, is refused.
  CHECK(call(plain_channel("127.0.0.1:" + std::to_string(server.port()))).error_code() ==
        grpc::StatusCode::UNAVAILABLE);
  CHECK(call(tls_channel(server.port(), "other-ca.crt")).error_code() ==
        grpc::StatusCode::UNAVAILABLE);
  // The pair replaced on disk (a certificate from the unrelated CA, same names): new
  // connections get it once the server has read the files again (checked every second).
  std::filesystem::copy_file(cert("other-server.crt"), crt,
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(cert("other-server.key"), key,
                             std::filesystem::copy_options::overwrite_existing);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{60};
  bool reloaded = false;
  while (!reloaded && std::chrono::steady_clock::now() < deadline)
    reloaded = call(tls_channel(server.port(), "other-ca.crt")).ok();
  CHECK(reloaded);
  CHECK(call(tls_channel(server.port(), "ca.crt")).error_code() == grpc::StatusCode::UNAVAILABLE);
}

TEST_CASE(
    "Transport: GRPC_CLIENT_TLS_CACERT requires a client certificate; "
    "GRPC_CLIENT_TLS_SAN its name",
    "[transport]") {
  const auto settings = transport_env({{"GRPC_HOST", "127.0.0.1"},
                                       {"GRPC_PORT", "0"},
                                       {"GRPC_SERVER_USE_TLS", "true"},
                                       {"GRPC_SERVER_TLS_CERT", cert("server.crt")},
                                       {"GRPC_SERVER_TLS_KEY", cert("server.key")},
                                       {"GRPC_CLIENT_TLS_CACERT", cert("ca.crt")},
                                       {"GRPC_CLIENT_TLS_SAN", "client.ratelimit.test"}});
  rs::GrpcServer server(service(), rs::GrpcTransport::from(settings));
  const int port = server.port();
  // client.crt carries DNS:client.ratelimit.test; other-client.crt, from the same CA,
  // DNS:other.ratelimit.test; no certificate at all.
  CHECK(call(tls_channel(port, "ca.crt", "client")).ok());
  CHECK(call(tls_channel(port, "ca.crt", "other-client")).error_code() ==
        grpc::StatusCode::UNAVAILABLE);
  CHECK(call(tls_channel(port, "ca.crt")).error_code() == grpc::StatusCode::UNAVAILABLE);

  // Without GRPC_CLIENT_TLS_SAN any client certificate of the CA will do.
  const auto any_name = transport_env({{"GRPC_HOST", "127.0.0.1"},
                                       {"GRPC_PORT", "0"},
                                       {"GRPC_SERVER_USE_TLS", "true"},
                                       {"GRPC_SERVER_TLS_CERT", cert("server.crt")},
                                       {"GRPC_SERVER_TLS_KEY", cert("server.key")},
                                       {"GRPC_CLIENT_TLS_CACERT", cert("ca.crt")}});
  rs::GrpcServer second(service(), rs::GrpcTransport::from(any_name));
  CHECK(call(tls_channel(second.port(), "ca.crt", "other-client")).ok());
  CHECK(call(tls_channel(second.port(), "ca.crt")).error_code() == grpc::StatusCode::UNAVAILABLE);

  // A wildcard SAN covers one label, as Go's x509 matches host names: *.clients.ratelimit.test
  // covers a.clients.ratelimit.test (any case), not a.b.clients.ratelimit.test.
  for (const auto& [san, ok] :
       std::vector<std::pair<std::string, bool>>{{"a.clients.ratelimit.test", true},
                                                 {"A.Clients.Ratelimit.Test", true},
                                                 {"a.b.clients.ratelimit.test", false},
                                                 {"clients.ratelimit.test", false}}) {
    INFO(san);
    auto transport = rs::GrpcTransport::from(any_name);
    transport.client_san = san;
    rs::GrpcServer wild(service(), transport);
    CHECK(call(tls_channel(wild.port(), "ca.crt", "wildcard-client")).ok() == ok);
  }

  // A certificate file that cannot be read is refused at start, naming the variable.
  auto broken = rs::GrpcTransport::from(any_name);
  broken.cert_file = "/nonexistent/tls.crt";
  CHECK_THROWS_WITH(rs::GrpcServer(service(), broken),
                    Catch::StartsWith("GRPC_SERVER_TLS_CERT = \"/nonexistent/tls.crt\""));
}

TEST_CASE("Transport: GRPC_UDS listens on a unix socket", "[transport]") {
  Scratch dir;
  const auto socket = (dir.path / "ratelimit.sock").string();
  const auto settings = transport_env({{"GRPC_UDS", socket}, {"GRPC_PORT", "0"}});
  rs::GrpcServer server(service(), rs::GrpcTransport::from(settings));
  CHECK(std::filesystem::is_socket(socket));
  CHECK(call(plain_channel("unix:" + socket)).ok());
}

TEST_CASE("Transport: GRPC_HOST=\"::\" listens on IPv6 and IPv4", "[transport]") {
  const auto settings = transport_env({{"GRPC_HOST", "::"}, {"GRPC_PORT", "0"}});
  CHECK(rs::GrpcTransport::from(settings).address() == "[::]:0");
  rs::GrpcServer server(service(), rs::GrpcTransport::from(settings));
  REQUIRE(server.port() > 0);
  CHECK(call(plain_channel("127.0.0.1:" + std::to_string(server.port()))).ok());
  if (have_ipv6_loopback())
    CHECK(call(plain_channel("[::1]:" + std::to_string(server.port()))).ok());
  else
    WARN("no IPv6 loopback on this host: only IPv4 was tried");
}

TEST_CASE("Transport: HOST=\"::\" serves HTTP on IPv6 and IPv4", "[transport]") {
  rs::HttpServer http(
      service(), [] { return true; }, "::", 0, [] { return std::string(); });
  httplib::Client v4("127.0.0.1", http.port());
  const auto ok = v4.Get("/healthcheck");
  REQUIRE(ok);
  CHECK(ok->status == 200);
  if (have_ipv6_loopback()) {
    httplib::Client v6("::1", http.port());
    const auto ok6 = v6.Get("/healthcheck");
    REQUIRE(ok6);
    CHECK(ok6->status == 200);
  }
}

TEST_CASE("Transport: GRPC_MAX_CONNECTION_AGE sends GOAWAY; the client connects again",
          "[transport]") {
  // A connection older than 1 s (+/-10%) is sent GOAWAY, and closed 1 s later. The channel
  // leaves READY when its connection goes away: the client saw the GOAWAY (nothing else closes
  // it here).
  const auto settings = transport_env({{"GRPC_HOST", "127.0.0.1"},
                                       {"GRPC_PORT", "0"},
                                       {"GRPC_MAX_CONNECTION_AGE", "1s"},
                                       {"GRPC_MAX_CONNECTION_AGE_GRACE", "1s"}});
  rs::GrpcServer server(service(), rs::GrpcTransport::from(settings));
  const auto channel = plain_channel("127.0.0.1:" + std::to_string(server.port()));
  REQUIRE(call(channel).ok());
  // On a slow machine the GOAWAY may already have come.
  if (channel->GetState(false) == GRPC_CHANNEL_READY)
    CHECK(channel->WaitForStateChange(GRPC_CHANNEL_READY,
                                      std::chrono::system_clock::now() + std::chrono::seconds{60}));
  CHECK(channel->GetState(false) != GRPC_CHANNEL_READY);
  CHECK(call(channel).ok());  // a new connection

  // Go's defaults: 24 hours, then 1 hour.
  const auto defaults = transport_env({{"GRPC_HOST", "127.0.0.1"}, {"GRPC_PORT", "0"}});
  CHECK(rs::GrpcTransport::from(defaults).max_connection_age == std::chrono::hours{24});
  CHECK(rs::GrpcTransport::from(defaults).max_connection_age_grace == std::chrono::hours{1});
}
