#pragma once
/// @file redis/detail/io_transfer.hpp
/// Bytes on a ready connection: requests written straight from their own bytes (sendmsg, or
/// staged for TLS), replies read into hiredis's reader and handed to the requests in order.
/// Members of IoLoopCore (redis/detail/io_core.hpp), run on the I/O thread unless said.

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include "io_core.hpp"

namespace ratelimit::detail {

inline void IoLoopCore::flush(IoNode& node, Conn& c) {
  if (c.ssl) return flush_tls(node, c);
  while (has_output(c)) {
    iovec parts[64];
    std::size_t count = 0;
    if (c.handshake_pos < c.handshake.size()) {
      parts[count++] = {c.handshake.data() + c.handshake_pos, c.handshake.size() - c.handshake_pos};
    } else {
      std::size_t offset = c.write_offset;
      for (std::size_t i = c.write_index; i < c.inflight.size() && count < 64; ++i) {
        std::string& w = c.inflight[i]->req.wire;
        parts[count++] = {w.data() + offset, w.size() - offset};
        offset = 0;
      }
    }
    msghdr msg{};
    msg.msg_iov = parts;
    msg.msg_iovlen = count;
    const ssize_t n = ::sendmsg(c.fd, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0)
      return fail_conn(c, RedisFailureKind::io,
                       "connection failed: " + std::string(std::strerror(errno)));
    advance(c, static_cast<std::size_t>(n));
  }
}

inline void IoLoopCore::flush_tls(IoNode& node, Conn& c) {
  (void)node;
  c.tls_want_write = false;
  for (;;) {
    if (c.tls_out.empty()) stage(c, std::size_t{1} << 16);
    if (c.tls_out.empty()) return;
    ERR_clear_error();
    const int n = SSL_write(c.ssl.get(), c.tls_out.data(), static_cast<int>(c.tls_out.size()));
    if (n > 0) {
      c.tls_out.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    const int e = SSL_get_error(c.ssl.get(), n);
    if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
      c.tls_want_write = e == SSL_ERROR_WANT_WRITE;
      return;
    }
    // The peer may have said why it closed (TLS 1.3 refuses a missing client certificate
    // only after the handshake): its alert is read before the failure is named.
    std::string why = tls_failure(c.ssl.get(), "write");
    char byte = 0;
    ERR_clear_error();
    if (SSL_read(c.ssl.get(), &byte, 1) <= 0 && ERR_peek_error() != 0)
      why = tls_failure(c.ssl.get(), "write");
    return fail_conn(c, RedisFailureKind::io, why);
  }
}

inline void IoLoopCore::stage(Conn& c, std::size_t limit) {
  while (has_output(c) && c.tls_out.size() < limit) {
    std::string_view from;
    if (c.handshake_pos < c.handshake.size()) {
      from = std::string_view(c.handshake).substr(c.handshake_pos);
    } else {
      from = std::string_view(c.inflight[c.write_index]->req.wire).substr(c.write_offset);
    }
    from = from.substr(0, limit - c.tls_out.size());
    c.tls_out.append(from);
    advance(c, from.size());
  }
}

inline void IoLoopCore::advance(Conn& c, std::size_t n) noexcept {
  c.sent += n;
  if (c.handshake_pos < c.handshake.size()) {
    c.handshake_pos += n;
    return;
  }
  while (n > 0) {
    const std::size_t left = c.inflight[c.write_index]->req.wire.size() - c.write_offset;
    if (n < left) {
      c.write_offset += n;
      return;
    }
    n -= left;
    ++c.write_index;
    c.write_offset = 0;
  }
}

inline void IoLoopCore::read(IoNode& node, Conn& c) {
  if (c.ssl && c.tls_want_write) flush_tls(node, c);  // a read may have needed a write
  for (int chunk = 0; chunk < 4 && !c.dead; ++chunk) {
    ssize_t n = 0;
    if (c.ssl) {
      ERR_clear_error();
      const int r = SSL_read(c.ssl.get(), buffer_.data(), static_cast<int>(buffer_.size()));
      if (r <= 0) {
        const int e = SSL_get_error(c.ssl.get(), r);
        if (e == SSL_ERROR_WANT_READ) return;
        if (e == SSL_ERROR_WANT_WRITE) {
          c.tls_want_write = true;
          return;
        }
        return fail_conn(c, RedisFailureKind::io,
                         e == SSL_ERROR_ZERO_RETURN ? std::string("connection closed by the server")
                                                    : tls_failure(c.ssl.get(), "read"));
      }
      n = r;
    } else {
      n = ::recv(c.fd, buffer_.data(), buffer_.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0)
        return fail_conn(c, RedisFailureKind::io,
                         n == 0 ? std::string("connection closed by the server")
                                : "connection failed: " + std::string(std::strerror(errno)));
    }
    if (redisReaderFeed(c.reader.get(), buffer_.data(), static_cast<std::size_t>(n)) != REDIS_OK)
      return fail_conn(c, RedisFailureKind::io, "out of memory reading a reply");
    for (;;) {
      void* raw = nullptr;
      if (redisReaderGetReply(c.reader.get(), &raw) != REDIS_OK)
        return fail_conn(c, RedisFailureKind::io,
                         "protocol error: " + std::string(c.reader->errstr));
      if (raw == nullptr) break;
      deliver(node, c, RedisReplyPtr(static_cast<redisReply*>(raw)));
      if (c.dead) return;
    }
    if (static_cast<std::size_t>(n) < buffer_.size()) return;
  }
}

inline void IoLoopCore::deliver(IoNode& node, Conn& c, RedisReplyPtr reply) {
  (void)node;
  c.answered = true;
  if (c.handshake_left > 0) {
    if (reply->type == REDIS_REPLY_ERROR)
      return fail_conn(c, RedisFailureKind::connect, std::string(reply->str, reply->len));
    if (--c.handshake_left == 0) ready(node, c);
    return;
  }
  // Redis answers each command as it reads it, so replies to a long request come while its
  // tail is still being written; but none can come before its first byte went out.
  if (c.inflight.empty() || (c.write_index == 0 && c.write_offset == 0))
    return fail_conn(c, RedisFailureKind::io, "a reply nobody asked for");
  Pending& p = *c.inflight.front();
  p.got.push_back(std::move(reply));
  if (!p.finished && p.got.size() < p.req.replies) return;
  if (c.write_index == 0)  // all its replies, yet not all of it written: not Redis
    return fail_conn(c, RedisFailureKind::io, "replies to a request not yet sent");
  std::shared_ptr<Pending> done = std::move(c.inflight.front());
  c.inflight.pop_front();
  --c.write_index;  // its last reply came, so its last byte went out
  finish_later(*done, IoOutcome{std::move(done->got), std::nullopt, {}});
}

}  // namespace ratelimit::detail
