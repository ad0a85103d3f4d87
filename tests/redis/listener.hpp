#pragma once
/// @file listener.hpp
/// Misbehaving servers on loopback for the Redis fault tests: a listener whose connections are
/// served by the test's own function (a black hole, a trickling proxy), and a plain connect.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "support/redis_backend.hpp"

namespace rltest {

/// A loopback listener on an ephemeral port. Each accepted connection is handed to `serve` on
/// its own thread; stop() shuts every socket down and joins the threads.
class Listener {
 public:
  template <class Serve>
  explicit Listener(Serve serve) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd_, 16) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this, serve] {
      for (;;) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 20) <= 0) {
          if (stopping_) return;
          continue;
        }
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        const std::lock_guard lock(mutex_);
        sockets_.push_back(c);
        workers_.emplace_back([this, serve, c] { serve(c, stopping_); });
      }
    });
  }
  ~Listener() { stop(); }
  int port() const { return port_; }
  /// Sockets the workers opened themselves (the proxy's upstream), closed by stop() too.
  void adopt(int fd) {
    const std::lock_guard lock(mutex_);
    sockets_.push_back(fd);
  }
  void stop() {
    if (stopping_.exchange(true)) return;
    acceptor_.join();
    std::vector<std::thread> workers;
    {
      const std::lock_guard lock(mutex_);
      for (const int s : sockets_) ::shutdown(s, SHUT_RDWR);
      workers.swap(workers_);
    }
    for (auto& w : workers) w.join();
    for (const int s : sockets_) ::close(s);
    ::close(fd_);
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mutex_;
  std::vector<int> sockets_;
  std::vector<std::thread> workers_;
};

inline int connect_to(const RedisEndpoint& e) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(e.port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(s);
    return -1;
  }
  return s;
}

/// A proxy to `upstream` that passes requests at once and trickles replies one byte per
/// `gap`: a Redis that answers, too slowly to be of use. It sends with MSG_NOSIGNAL: the library
/// closes a connection whose decisions passed their deadline, and a write(2) to it would raise
/// SIGPIPE in the test process (it did, when a fresh storage's first call began carrying the
/// script's body).
class TrickleProxy {
 public:
  TrickleProxy(RedisEndpoint upstream, std::chrono::milliseconds gap)
      : listener_([this, upstream, gap](int client, const std::atomic<bool>& stopping) {
          const int server = connect_to(upstream);
          if (server < 0) return;
          listener_.adopt(server);
          char buf[4096];
          pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
          while (!stopping) {
            if (::poll(p, 2, 20) <= 0) continue;
            if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {  // requests pass at once
              const auto n = ::read(client, buf, sizeof buf);
              if (n <= 0 || ::send(server, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n)
                return;
            }
            if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {  // replies: a byte, then a gap
              if (::read(server, buf, 1) != 1 || ::send(client, buf, 1, MSG_NOSIGNAL) != 1) return;
              std::this_thread::sleep_for(gap);
            }
          }
        }) {}
  int port() const { return listener_.port(); }
  void stop() { listener_.stop(); }

 private:
  Listener listener_;
};

/// A server that accepts connections and never reads or writes.
class BlackHole {
 public:
  BlackHole()
      : listener_([](int, const std::atomic<bool>& stopping) {
          while (!stopping) std::this_thread::sleep_for(std::chrono::milliseconds{10});
        }) {}
  int port() const { return listener_.port(); }
  void stop() { listener_.stop(); }

 private:
  Listener listener_;
};

}  // namespace rltest
