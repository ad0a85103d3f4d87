#pragma once
/// @file redis/detail/io_lend.hpp
/// The idle connection lent to a blocking caller alone in flight (RedisIoLoop::round_trip_here):
/// the caller's own round trip on it (safe from any thread), and the loop lending it out and
/// taking it back.
/// Members of IoLoopCore (redis/detail/io_core.hpp), run on the I/O thread unless said.

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "io_core.hpp"

namespace ratelimit::detail {

inline IoLoopCore::Lent IoLoopCore::lend(IoNode* node) {
  Conn* c = node->parked_.exchange(nullptr);
  if (c == nullptr) return {};
  // Dead (a caller before failed on it), or closed here because it was readable while idle
  // (the server closed it, or sent what nobody asked for): the loop drops it on its turn.
  if (c->dead || close_if_readable(*c)) {
    give_back(node, c, true);
    return {};
  }
  return Lent(this, node, c);
}

inline bool IoLoopCore::round_trip_here(Lent& lent, IoRequest& req) {
  // A large request (a big batch) goes through the loop, which reads replies while it
  // writes; here the whole request is written before the first read.
  if (!lent || req.wire.size() > round_trip_here_max) {
    lent.release();
    return false;
  }
  Conn* c = lent.conn_;
  IoOutcome outcome = exchange_here(*lent.node_, *c, req);
  lent.release();
  complete(req, std::move(outcome));
  return true;
}

inline IoOutcome IoLoopCore::exchange_here(const IoNode& node, Conn& c, IoRequest& req) {
  std::vector<RedisReplyPtr> got;
  const auto fail = [&](RedisFailureKind kind, const std::string& why) {
    c.close_for_good();
    return IoOutcome{{}, RedisError(kind, node.address().address() + ": " + why, got.size()), {}};
  };
  // Until `events` on c.fd or the deadline: false once it passed. A wait that ends more than
  // pause_gap past its deadline was a pause of the process (as the loop's, see `resumed`):
  // the request gets one more command timeout, once.
  bool resumed = false;
  const auto await = [&](short events) {
    for (;;) {
      const auto start = std::chrono::steady_clock::now();
      const auto left = std::chrono::ceil<std::chrono::nanoseconds>(req.deadline - start);
      if (left.count() <= 0) return false;
      const timespec ts{static_cast<time_t>(left.count() / 1'000'000'000),
                        static_cast<long>(left.count() % 1'000'000'000)};
      pollfd p{c.fd, events, 0};
      const int n = ::ppoll(&p, 1, &ts, nullptr);
      if (n > 0) return true;
      if (n < 0 && errno != EINTR) return true;  // the call that follows names the error
      const auto now = std::chrono::steady_clock::now();
      if (!resumed && now - req.deadline > pause_gap) {
        resumed = true;
        req.deadline = now + node.settings_.command_timeout;
      }
    }
  };
  const auto error = [](const char* what) { return std::string(what) + std::strerror(errno); };
  for (std::size_t off = 0; off < req.wire.size();) {
    const ssize_t n = ::send(c.fd, req.wire.data() + off, req.wire.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!await(POLLOUT)) return fail(RedisFailureKind::timeout, "timed out");
    } else if (n < 0 && errno != EINTR) {
      return fail(RedisFailureKind::io, error("connection failed: "));
    }
  }
  c.queued += req.wire.size();
  c.sent += req.wire.size();
  char buffer[16384];
  while (got.size() < req.replies) {
    void* raw = nullptr;
    if (redisReaderGetReply(c.reader.get(), &raw) != REDIS_OK)
      return fail(RedisFailureKind::io, "protocol error: " + std::string(c.reader->errstr));
    if (raw != nullptr) {
      got.emplace_back(static_cast<redisReply*>(raw));
      continue;
    }
    if (!await(POLLIN)) return fail(RedisFailureKind::timeout, "timed out");
    const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n == 0) return fail(RedisFailureKind::io, "connection closed by the server");
    if (n < 0) return fail(RedisFailureKind::io, error("connection failed: "));
    if (redisReaderFeed(c.reader.get(), buffer, static_cast<std::size_t>(n)) != REDIS_OK)
      return fail(RedisFailureKind::io, "out of memory reading a reply");
  }
  c.answered = true;
  // Bytes beyond the replies asked for: not Redis. This request has its replies; the
  // connection is not used again.
  if (c.reader->pos < c.reader->len) c.close_for_good();
  return IoOutcome{std::move(got), std::nullopt, {}};
}

inline bool IoLoopCore::close_if_readable(Conn& c) noexcept {
  pollfd idle{c.fd, POLLIN, 0};
  if (::poll(&idle, 1, 0) == 0) return false;
  c.close_for_good();
  return true;
}

inline void IoLoopCore::give_back(IoNode* node, Conn* c, bool check) noexcept {
  node->parked_.store(c);
  if (check || node->want_back_.load()) waker_->wake();
}

inline void IoLoopCore::reclaim(IoNode& node) {
  if (!node.lent_ || node.waiting_.empty()) return;
  Conn* c = node.parked_.exchange(nullptr);
  if (c == nullptr) {
    node.want_back_.store(true);
    c = node.parked_.exchange(nullptr);
    if (c == nullptr) return;  // the caller giving it back will wake the loop
  }
  node.want_back_.store(false);
  // Not polled while lent: a server that closed it meanwhile is found here, before a
  // request is put on it.
  if (!node.lent_->dead && !close_if_readable(*node.lent_))
    node.conns_.push_back(std::move(node.lent_));
  node.lent_.reset();
}

inline void IoLoopCore::park(IoNode& node) {
  if (node.lent_ || !node.waiting_.empty()) return;
  auto chosen = node.conns_.end();
  for (auto it = node.conns_.begin(); it != node.conns_.end(); ++it) {
    const Conn& c = **it;
    if (c.dead) continue;
    if (!c.inflight.empty() || has_output(c)) return;
    if (chosen == node.conns_.end() && c.state == Conn::State::ready && c.answered && !c.ssl &&
        c.fd >= 0)
      chosen = it;
  }
  if (chosen == node.conns_.end()) return;
  node.lent_ = std::move(*chosen);
  node.conns_.erase(chosen);
  node.parked_.store(node.lent_.get());
}

}  // namespace ratelimit::detail
