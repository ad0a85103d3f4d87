#pragma once
/// @file delay_proxy.hpp
/// A TCP proxy on loopback for tests that need distance: it forwards every connection made to
/// its own port to a target (a redis-server), holding each chunk of bytes for a one-way delay
/// plus a random jitter, and can be partitioned (it then drops every byte in both directions,
/// a black hole: connections stay open and nothing arrives, as across a broken WAN link).
///
/// Delays are real time (the network's), never the library's time: tests keep deciding on a
/// ManualClock and use the proxy only to make round trips slow or to cut them. Order within a
/// connection is kept (a chunk never overtakes the one before it), as TCP keeps it.
///
/// One thread, poll(2), non-blocking sockets. Settings change at any time from any thread and
/// take effect within a millisecond.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace rltest {

/// See the file comment. Thread safety: the setters and `port` are safe from any thread; the
/// proxy stops (closing every connection) when the object dies.
class DelayProxy {
 public:
  /// Listens on 127.0.0.1 (a free port) and forwards to `target_host:target_port`.
  /// Throws std::runtime_error if it cannot listen.
  DelayProxy(std::string target_host, int target_port)
      : target_host_(std::move(target_host)), target_port_(target_port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (listen_fd_ < 0) throw std::runtime_error("DelayProxy: socket failed");
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listen_fd_, 64) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ::close(listen_fd_);
      throw std::runtime_error("DelayProxy: cannot listen on loopback");
    }
    port_ = ntohs(a.sin_port);
    set_nonblocking(listen_fd_);
    thread_ = std::thread([this] { run(); });
  }
  ~DelayProxy() {
    stop_.store(true);
    thread_.join();
    for (auto& p : pairs_) p.close_both();
    ::close(listen_fd_);
  }
  DelayProxy(const DelayProxy&) = delete;
  DelayProxy& operator=(const DelayProxy&) = delete;

  /// The proxy's own port on 127.0.0.1.
  int port() const noexcept { return port_; }

  /// One-way delay added to every chunk, each direction (a round trip pays it twice).
  void set_delay(std::chrono::milliseconds d) { delay_us_.store(d.count() * 1000); }
  /// Up to this much more, uniformly at random, per chunk (order is kept).
  void set_jitter(std::chrono::milliseconds j) { jitter_us_.store(j.count() * 1000); }
  /// true: drop every byte both ways (queued ones too) until set back to false.
  void set_partitioned(bool on) { partitioned_.store(on); }
  bool partitioned() const noexcept { return partitioned_.load(); }

 private:
  using Clock = std::chrono::steady_clock;

  struct Chunk {
    Clock::time_point due;
    std::string bytes;
  };
  /// One direction of a connection: bytes read from `from`, waiting for their time to `to`.
  struct Flow {
    int from = -1, to = -1;
    std::deque<Chunk> queue;
    Clock::time_point last_due{};
  };
  struct Pair {
    Flow up, down;  ///< client -> target, target -> client
    bool dead = false;
    void close_both() {
      if (up.from >= 0) ::close(up.from);
      if (up.to >= 0) ::close(up.to);
      up.from = up.to = down.from = down.to = -1;
      dead = true;
    }
  };

  static void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

  int connect_target() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(target_port_));
    if (::inet_pton(AF_INET, target_host_.c_str(), &a.sin_addr) != 1 ||
        ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      return -1;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    set_nonblocking(fd);
    return fd;
  }

  void accept_all() {
    for (;;) {
      const int c = ::accept(listen_fd_, nullptr, nullptr);
      if (c < 0) return;
      const int t = connect_target();  // loopback: a blocking connect is immediate
      if (t < 0) {
        ::close(c);
        continue;
      }
      const int one = 1;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      set_nonblocking(c);
      Pair p;
      p.up.from = c;
      p.up.to = t;
      p.down.from = t;
      p.down.to = c;
      pairs_.push_back(std::move(p));
    }
  }

  /// Reads what `f.from` has; queues it with its delivery time, or drops it when partitioned.
  /// False when the connection ended.
  bool read_flow(Flow& f) {
    char buf[16384];
    for (;;) {
      const ssize_t n = ::read(f.from, buf, sizeof buf);
      if (n == 0) return false;
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      if (partitioned_.load()) continue;
      const std::int64_t jitter = jitter_us_.load();
      std::int64_t extra = 0;
      if (jitter > 0) extra = std::uniform_int_distribution<std::int64_t>(0, jitter)(rng_);
      auto due = Clock::now() + std::chrono::microseconds{delay_us_.load() + extra};
      if (due < f.last_due) due = f.last_due;  // never overtake the chunk before
      f.last_due = due;
      f.queue.push_back({due, std::string(buf, static_cast<std::size_t>(n))});
    }
  }

  /// Writes the chunks whose time has come. False when the connection ended.
  bool write_flow(Flow& f) {
    if (partitioned_.load()) f.queue.clear();
    const auto now = Clock::now();
    while (!f.queue.empty() && f.queue.front().due <= now) {
      std::string& b = f.queue.front().bytes;
      const ssize_t n = ::send(f.to, b.data(), b.size(), MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      if (static_cast<std::size_t>(n) < b.size()) {
        b.erase(0, static_cast<std::size_t>(n));
        return true;  // the socket is full: the rest next turn
      }
      f.queue.pop_front();
    }
    return true;
  }

  void run() {
    while (!stop_.load()) {
      std::vector<pollfd> fds;
      fds.push_back({listen_fd_, POLLIN, 0});
      for (auto& p : pairs_) {
        fds.push_back({p.up.from, POLLIN, 0});
        fds.push_back({p.down.from, POLLIN, 0});
      }
      // 1 ms turns: a queued chunk is late by at most that, and settings apply within it.
      ::poll(fds.data(), fds.size(), 1);
      if (fds[0].revents & POLLIN) accept_all();
      for (std::size_t i = 0; i < pairs_.size(); ++i) {
        Pair& p = pairs_[i];
        if (p.dead) continue;
        const bool ok =
            read_flow(p.up) && read_flow(p.down) && write_flow(p.up) && write_flow(p.down);
        if (!ok) p.close_both();
      }
      std::erase_if(pairs_, [](const Pair& p) { return p.dead; });
    }
  }

  std::string target_host_;
  int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<std::int64_t> delay_us_{0}, jitter_us_{0};
  std::atomic<bool> partitioned_{false}, stop_{false};
  std::vector<Pair> pairs_;  ///< proxy thread only (and the destructor, after it joined)
  std::mt19937_64 rng_{12345};
  std::thread thread_;
};

}  // namespace rltest
