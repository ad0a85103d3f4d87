#pragma once
/// @file redis/detail/socket.hpp
/// A non-blocking TCP socket to a Redis node, and the name resolution it needs, for the I/O
/// thread (redis/detail/io_loop.hpp). Only the bytes are ours: hiredis formats the commands and
/// parses the replies.

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ratelimit::detail {

/// One resolved address of a node.
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t size = 0;
  int family = AF_UNSPEC;
};

/// The addresses of `host:port`, or the resolver's error.
struct Resolved {
  std::vector<SocketAddress> addresses;
  std::string error;
};

inline Resolved resolve(const std::string& host, int port, bool numeric_only) {
  if (port == 0) {  // a Unix domain socket: the path is the address
    Resolved out;
    SocketAddress s;
    sockaddr_un un{};
    un.sun_family = AF_UNIX;
    if (host.size() >= sizeof un.sun_path) {
      out.error = "socket path longer than " + std::to_string(sizeof un.sun_path - 1) + " bytes";
      return out;
    }
    std::memcpy(un.sun_path, host.data(), host.size());
    std::memcpy(&s.storage, &un, sizeof un);
    s.size = static_cast<socklen_t>(sizeof un);
    s.family = AF_UNIX;
    out.addresses.push_back(s);
    return out;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (numeric_only ? AI_NUMERICHOST : 0);
  addrinfo* list = nullptr;
  Resolved out;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list);
  if (rc != 0) {
    out.error = ::gai_strerror(rc);
    return out;
  }
  for (const addrinfo* a = list; a != nullptr; a = a->ai_next) {
    SocketAddress s;
    std::memcpy(&s.storage, a->ai_addr, a->ai_addrlen);
    s.size = a->ai_addrlen;
    s.family = a->ai_family;
    out.addresses.push_back(s);
  }
  ::freeaddrinfo(list);
  return out;
}

/// A name being resolved off the I/O thread: getaddrinfo blocks for as long as DNS takes, and
/// the I/O thread must keep every other decision's deadline meanwhile. A numeric address
/// resolves at once, on the calling thread.
/// Thread safety: `ready`/`take` from one thread; the resolver thread only fills the result.
class Resolution {
 public:
  /// Starts resolving; `wake` is called (from another thread) when a name's result is in.
  template <class Wake>
  Resolution(std::string host, int port, Wake wake) : state_(std::make_shared<State>()) {
    Resolved numeric = resolve(host, port, true);
    if (numeric.error.empty()) {
      state_->result = std::move(numeric);
      state_->done = true;
      return;
    }
    // The thread owns what it touches (the state and the wake-up), so the loop may be gone by
    // the time a slow DNS answers.
    std::thread([state = state_, host = std::move(host), port, wake = std::move(wake)]() mutable {
      Resolved r = resolve(host, port, false);
      {
        std::lock_guard lock(state->mutex);
        state->result = std::move(r);
        state->done = true;
      }
      wake();
    }).detach();
  }

  /// The result once it is in.
  std::optional<Resolved> take() {
    std::lock_guard lock(state_->mutex);
    if (!state_->done) return std::nullopt;
    return std::move(state_->result);
  }

 private:
  struct State {
    std::mutex mutex;
    bool done = false;
    Resolved result;
  };
  std::shared_ptr<State> state_;
};

/// Opens a non-blocking socket and starts connecting to `a`. Returns the descriptor (the connect
/// completes when it polls writable: see `connect_error`), or -1 with `error` set.
inline int start_connect(const SocketAddress& a, std::string& error) {
  const int fd = ::socket(a.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::strerror(errno);
    return -1;
  }
  if (a.family == AF_INET || a.family == AF_INET6) {
    const int one = 1;  // a decision is one small write: never wait for Nagle
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a.storage), a.size) != 0 &&
      errno != EINPROGRESS) {
    error = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

/// After a connecting socket polled writable: empty if connected, else why not.
inline std::string connect_error(int fd) {
  int error = 0;
  socklen_t size = sizeof error;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) return std::strerror(errno);
  return error == 0 ? std::string{} : std::string(std::strerror(error));
}

}  // namespace ratelimit::detail
