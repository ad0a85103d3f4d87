#pragma once
/// @file redis/detail/tls.hpp
/// TLS for the I/O thread's sockets (OpenSSL): a context built from `RedisTlsOptions` each time
/// a connection opens (so replaced certificate files are read again), a session on a connected
/// non-blocking socket with host-name verification and SNI, and readable errors.

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>

#include "../options.hpp"

namespace ratelimit::detail {

struct SslCtxDeleter {
  void operator()(SSL_CTX* c) const noexcept { SSL_CTX_free(c); }
};
struct SslDeleter {
  void operator()(SSL* s) const noexcept { SSL_free(s); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxDeleter>;
using SslPtr = std::unique_ptr<SSL, SslDeleter>;

/// OpenSSL's oldest queued error as text (and the queue cleared), or `fallback`.
inline std::string openssl_error(const std::string& fallback) {
  std::string text;
  while (const unsigned long e = ERR_get_error()) {
    if (text.empty()) {
      char buf[256];
      ERR_error_string_n(e, buf, sizeof buf);
      text = buf;
    }
  }
  return text.empty() ? fallback : text;
}

/// True for an IPv4 or IPv6 literal (no SNI for those; the certificate needs an IP SAN).
inline bool is_ip_literal(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

/// A client context per `o`; null with `error` set if a file cannot be used.
inline SslCtxPtr make_tls_context(const RedisTlsOptions& o, std::string& error) {
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx) {
    error = "TLS: " + openssl_error("cannot create a context");
    return nullptr;
  }
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  // Writes are retried after WANT_WRITE from a buffer that may have moved, and may be partial.
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (o.verify_peer) {
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
    const bool custom = !o.ca_file.empty() || !o.ca_dir.empty();
    const int ok = custom ? SSL_CTX_load_verify_locations(
                                ctx.get(), o.ca_file.empty() ? nullptr : o.ca_file.c_str(),
                                o.ca_dir.empty() ? nullptr : o.ca_dir.c_str())
                          : SSL_CTX_set_default_verify_paths(ctx.get());
    if (ok != 1) {
      error = "TLS: cannot load the CA (ca_file = \"" + o.ca_file + "\", ca_dir = \"" + o.ca_dir +
              "\"): " + openssl_error("unreadable");
      return nullptr;
    }
  } else {
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
  }
  if (!o.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx.get(), o.cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx.get(), o.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx.get()) != 1) {
      error = "TLS: cannot use the client certificate (cert_file = \"" + o.cert_file +
              "\", key_file = \"" + o.key_file + "\"): " + openssl_error("unreadable");
      return nullptr;
    }
  }
  return ctx;
}

/// A client session on connected socket `fd` to `host` (the name to verify unless
/// `o.server_name` gives one); the handshake is driven by `SSL_connect` from the loop.
inline SslPtr make_tls_session(SSL_CTX* ctx, int fd, const std::string& host,
                               const RedisTlsOptions& o, std::string& error) {
  SslPtr ssl(SSL_new(ctx));
  if (!ssl || SSL_set_fd(ssl.get(), fd) != 1) {
    error = "TLS: " + openssl_error("cannot create a session");
    return nullptr;
  }
  const std::string& name = o.server_name.empty() ? host : o.server_name;
  if (!is_ip_literal(name)) SSL_set_tlsext_host_name(ssl.get(), name.c_str());
  if (o.verify_peer && SSL_set1_host(ssl.get(), name.c_str()) != 1) {
    error = "TLS: cannot verify against the name \"" + name + "\"";
    return nullptr;
  }
  SSL_set_connect_state(ssl.get());
  return ssl;
}

/// Why a TLS call failed: the certificate check's verdict when that is what failed.
inline std::string tls_failure(SSL* ssl, const std::string& what) {
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK)
    return "TLS " + what + ": server certificate refused: " + X509_verify_cert_error_string(verify);
  return "TLS " + what + ": " + openssl_error("the peer closed the connection");
}

}  // namespace ratelimit::detail
