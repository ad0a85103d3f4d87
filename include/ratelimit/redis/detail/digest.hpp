#pragma once
/// @file redis/detail/digest.hpp
/// Digests in lower-case hex (OpenSSL's EVP): the SHA1 that names a script for EVALSHA, and the
/// SHA-256 that names a client key too long to appear as itself in a Redis key (keys.hpp).

#include <openssl/evp.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace ratelimit::detail {

/// Appends the digest of `bytes` under `md` (e.g. EVP_sha1(), EVP_sha256()) to `out`, in
/// lower-case hex. Throws std::runtime_error if OpenSSL fails (it does not for these digests).
inline void append_hex_digest(std::string& out, std::string_view bytes, const EVP_MD* md) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &size, md, nullptr) != 1)
    throw std::runtime_error("ratelimit: OpenSSL could not compute a digest");
  static constexpr char hex[] = "0123456789abcdef";
  for (unsigned int i = 0; i < size; ++i) {
    out.push_back(hex[digest[i] >> 4]);
    out.push_back(hex[digest[i] & 0xF]);
  }
}

}  // namespace ratelimit::detail
