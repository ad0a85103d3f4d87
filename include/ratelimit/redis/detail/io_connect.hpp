#pragma once
/// @file redis/detail/io_connect.hpp
/// A connection's life on the I/O thread: resolving the node's name, connecting (address by
/// address), TLS, AUTH/SELECT, ready (with the node's eviction-policy check), and failing.
/// Members of IoLoopCore (redis/detail/io_core.hpp), run on the I/O thread unless said.

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <string_view>

#include "io_core.hpp"

namespace ratelimit::detail {

inline void IoLoopCore::service(IoNode& node, SteadyTime now) {
  for (auto& c : node.conns_) {
    if (c->dead) continue;
    if (c->state == Conn::State::resolving) resolved(node, *c);
    if (!c->dead && c->state != Conn::State::ready && now >= c->connect_deadline)
      fail_conn(*c, RedisFailureKind::connect, "cannot connect: timed out");
  }
  while (!node.waiting_.empty() && node.waiting_.front()->finished) node.waiting_.pop_front();
  if (node.waiting_.empty()) return;
  std::size_t ready = 0, opening = 0, busy = 0;
  for (const auto& c : node.conns_) {
    if (c->dead) continue;
    if (c->state == Conn::State::ready) {
      ++ready;
      busy += c->inflight.empty() ? 0u : 1u;
    } else {
      ++opening;
    }
  }
  // A lent connection counts: it comes back (pool_size bounds the connections).
  const std::size_t alive = ready + opening + (node.lent_ ? 1 : 0);
  if (opening == 0 && alive < connections_ && busy == ready) open(node, now);
  if (ready == 0) return;
  while (!node.waiting_.empty()) {
    std::shared_ptr<Pending> p = std::move(node.waiting_.front());
    node.waiting_.pop_front();
    if (p->finished) continue;
    Conn* best = nullptr;
    for (const auto& c : node.conns_)
      if (!c->dead && c->state == Conn::State::ready &&
          (best == nullptr || c->inflight.size() < best->inflight.size()))
        best = c.get();
    p->conn = best;
    p->start = best->queued;
    best->queued += p->req.wire.size();
    best->inflight.push_back(std::move(p));
  }
  for (auto& c : node.conns_)
    if (!c->dead && c->state == Conn::State::ready) flush(node, *c);
}

inline void IoLoopCore::open(IoNode& node, SteadyTime now) {
  auto c = std::make_unique<Conn>();
  c->node = &node;
  c->connect_deadline = now + node.settings_.connect_timeout;
  c->opened_at = now;
  if (!c->reader) throw std::bad_alloc();
  Conn& conn = *c;
  node.conns_.push_back(std::move(c));
  resolved(node, conn);
}

inline void IoLoopCore::resolved(IoNode& node, Conn& c) {
  const auto now = std::chrono::steady_clock::now();
  if (node.addresses_.empty() || now - node.resolved_at_ > std::chrono::minutes{1}) {
    if (!node.resolving_)
      node.resolving_.emplace(node.address().host, node.address().port,
                              [waker = waker_] { waker->wake(); });
    auto r = node.resolving_->take();
    if (!r) return;
    node.resolving_.reset();
    if (!r->error.empty() || r->addresses.empty())
      return fail_conn(c, RedisFailureKind::connect,
                       "cannot resolve: " + (r->error.empty() ? "no address" : r->error));
    node.addresses_ = std::move(r->addresses);
    node.resolved_at_ = now;
  }
  c.addresses = node.addresses_;
  connect_next(node, c, "");
}

inline void IoLoopCore::connect_next(IoNode& node, Conn& c, std::string last_error) {
  (void)node;
  if (c.fd >= 0) {
    ::close(c.fd);
    c.fd = -1;
  }
  while (c.next_address < c.addresses.size()) {
    std::string error;
    const int fd = start_connect(c.addresses[c.next_address++], error);
    if (fd >= 0) {
      c.fd = fd;
      c.state = Conn::State::connecting;
      return;
    }
    last_error = std::move(error);
  }
  fail_conn(c, RedisFailureKind::connect, "cannot connect: " + last_error);
}

inline void IoLoopCore::handle(Conn& c, short revents) {
  IoNode& node = owner(c);
  if (c.dead) return;
  if (c.state == Conn::State::connecting) {
    if ((revents & (POLLOUT | POLLERR | POLLHUP)) == 0) return;
    std::string error = connect_error(c.fd);
    if (!error.empty()) return connect_next(node, c, std::move(error));
    c.connected_at = c.secured_at = std::chrono::steady_clock::now();
    if (!node.settings_.tls.enabled) return handshake(node, c);
    SslCtxPtr ctx = make_tls_context(node.settings_.tls, error);
    if (ctx)
      c.ssl = make_tls_session(ctx.get(), c.fd, node.address().host, node.settings_.tls, error);
    if (!c.ssl) return fail_conn(c, RedisFailureKind::connect, error);
    c.state = Conn::State::securing;
    return secure(node, c);
  }
  if (c.state == Conn::State::securing) return secure(node, c);
  if ((revents & POLLOUT) != 0) flush(node, c);
  if (!c.dead && (revents & (POLLIN | POLLERR | POLLHUP)) != 0) read(node, c);
}

inline void IoLoopCore::secure(IoNode& node, Conn& c) {
  ERR_clear_error();
  const int rc = SSL_connect(c.ssl.get());
  if (rc == 1) {
    c.secured_at = std::chrono::steady_clock::now();
    return handshake(node, c);
  }
  const int e = SSL_get_error(c.ssl.get(), rc);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    c.tls_want_write = e == SSL_ERROR_WANT_WRITE;
    return;
  }
  fail_conn(c, RedisFailureKind::connect, tls_failure(c.ssl.get(), "handshake"));
}

inline void IoLoopCore::handshake(IoNode& node, Conn& c) {
  const RedisConnectionSettings& s = node.settings_;
  std::string wire;
  c.handshake_left = 0;
  if (!s.password.empty()) {
    if (s.username.empty())
      append_command(wire, {"AUTH", s.password});
    else
      append_command(wire, {"AUTH", s.username, s.password});
    ++c.handshake_left;
  }
  if (s.db != 0) {
    append_command(wire, {"SELECT", std::to_string(s.db)});
    ++c.handshake_left;
  }
  if (c.handshake_left == 0) return ready(node, c);
  c.state = Conn::State::handshaking;
  c.queued += wire.size();
  c.handshake = std::move(wire);
  flush(node, c);
}

inline void IoLoopCore::ready(IoNode& node, Conn& c) {
  c.state = Conn::State::ready;
  if (node.settings_.on_connected) {
    try {
      node.settings_.on_connected(node.address(), c.connected_at - c.opened_at,
                                  c.secured_at - c.connected_at,
                                  std::chrono::steady_clock::now() - c.opened_at);
    } catch (...) {  // a monitoring hook must not change the connection
    }
  }
  if (!node.settings_.on_eviction_policy || node.policy_asked_) return;
  node.policy_asked_ = true;
  auto p = std::make_shared<Pending>();
  p->node = &node;
  IoRequest& req = p->req;
  append_command(req.wire, {"INFO", "memory"});
  req.replies = 1;
  req.deadline = std::chrono::steady_clock::now() + node.settings_.command_timeout;
  IoNode* n = &node;
  req.done = [n](IoOutcome&& o) {
    if (!o.error && o.replies.front()->type != REDIS_REPLY_ERROR)
      report_policy(*n, *o.replies.front());
  };
  deadlines_.push(Deadline{req.deadline, p});
  node.waiting_.push_front(std::move(p));
}

inline void IoLoopCore::report_policy(const IoNode& node, const redisReply& reply) {
  if (reply.type != REDIS_REPLY_STRING) return;
  const std::string_view text(reply.str, reply.len);
  constexpr std::string_view field = "maxmemory_policy:";
  const auto at = text.find(field);
  if (at == std::string_view::npos) return;
  const auto start = at + field.size();
  const auto end = text.find_first_of("\r\n", start);
  try {
    node.settings_.on_eviction_policy(node.address(), std::string(text.substr(start, end - start)));
  } catch (...) {
  }
}

inline void IoLoopCore::fail_conn(Conn& c, RedisFailureKind kind, const std::string& message) {
  if (c.dead) return;
  IoNode& node = owner(c);
  // A connection that never became usable (TLS refused after its handshake, AUTH, the
  // server closing at once) is a failure to connect, whatever call noticed it: the requests
  // waiting for it fail now instead of trying new connections until their deadline.
  // So is one that broke before its first reply: over TLS 1.3, a server that refuses the
  // client's certificate says so only after the client's handshake has completed.
  if (c.state != Conn::State::ready || (kind == RedisFailureKind::io && !c.answered))
    kind = RedisFailureKind::connect;
  c.close_for_good();
  const std::string what = node.address().address() + ": " + message;
  std::vector<std::shared_ptr<Pending>> unsent;
  for (auto& p : c.inflight) {
    if (p->finished) continue;
    if (p->start >= c.sent) {
      p->conn = nullptr;
      unsent.push_back(std::move(p));
    } else {
      finish(*p, IoOutcome{{}, RedisError(kind, what, p->got.size()), {}});
    }
  }
  c.inflight.clear();
  for (auto it = unsent.rbegin(); it != unsent.rend(); ++it)
    node.waiting_.push_front(std::move(*it));
  const bool others =
      std::any_of(node.conns_.begin(), node.conns_.end(), [](const auto& o) { return !o->dead; });
  if (kind == RedisFailureKind::connect && !others) {
    auto waiting = std::move(node.waiting_);
    node.waiting_.clear();
    for (auto& p : waiting) finish(*p, IoOutcome{{}, RedisError(kind, what), {}});
  }
}

}  // namespace ratelimit::detail
