#pragma once
/// @file redis/detail/connection.hpp
/// One hiredis connection with RAII ownership, timeouts, and pipelined round trips.

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../options.hpp"

namespace ratelimit::detail {

/// A Redis server's address. Kept apart from the pool so a cluster can hold one pool per node.
struct RedisNode {
  std::string host;
  int port = 6379;

  std::string address() const { return host + ":" + std::to_string(port); }
  friend bool operator==(const RedisNode&, const RedisNode&) = default;
};

/// What every connection to a node is opened with.
struct RedisConnectionSettings {
  std::chrono::milliseconds connect_timeout{200};
  std::chrono::milliseconds command_timeout{100};
  std::string password;
  int db = 0;
};

/// A failure to reach Redis or to get a usable reply.
class RedisError : public std::runtime_error {
 public:
  RedisError(RedisFailureKind kind, const std::string& message, std::size_t replies_read = 0)
      : std::runtime_error(message), kind_(kind), replies_read_(replies_read) {}
  RedisFailureKind kind() const noexcept { return kind_; }
  /// How many replies of a pipeline arrived before it failed (0: none of it is known to have
  /// run, unless the server died after running it).
  std::size_t replies_read() const noexcept { return replies_read_; }

 private:
  RedisFailureKind kind_;
  std::size_t replies_read_;
};

struct RedisReplyDeleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
/// An owned hiredis reply.
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

struct RedisContextDeleter {
  void operator()(redisContext* c) const noexcept { redisFree(c); }
};

/// One command: its arguments, binary-safe.
using RedisCommand = std::vector<std::string>;

/// hiredis writes with write(2): a peer that closed the socket raises SIGPIPE, whose default
/// action kills the process. A library must not change the process's signal handling, so the
/// signal is blocked on this thread around I/O, and one raised meanwhile is consumed.
class SigpipeGuard {
 public:
  SigpipeGuard() noexcept {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeGuard() {
    const int saved_errno = errno;
    if (!was_pending_) {
      sigset_t pending;
      sigemptyset(&pending);
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{0, 0};
        while (sigtimedwait(&pipe_, nullptr, &zero) == -1 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    errno = saved_errno;
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
  bool was_pending_ = false;
};

/// What is left of `deadline` at `now`, rounded up to whole ms (so a call that started a few us
/// ago still gets the full timeout and no extra syscall), capped at `cap`; 0 once it passed.
inline std::chrono::milliseconds time_left(std::chrono::steady_clock::time_point deadline,
                                           std::chrono::steady_clock::time_point now,
                                           std::chrono::milliseconds cap) noexcept {
  if (now >= deadline) return std::chrono::milliseconds{0};
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
  return left < cap ? left : cap;
}

inline timeval to_timeval(std::chrono::milliseconds d) noexcept {
  timeval tv{};
  tv.tv_sec = static_cast<decltype(tv.tv_sec)>(d.count() / 1000);
  tv.tv_usec = static_cast<decltype(tv.tv_usec)>((d.count() % 1000) * 1000);
  return tv;
}

/// One open connection. Not thread-safe: the pool hands it to one thread at a time.
class RedisConnection {
 public:
  /// Connects within settings.connect_timeout, sets the command timeout, AUTH and SELECT; with
  /// `budget` (what is left of a decision's command timeout), within that too.
  /// Throws RedisError(connect) on any failure.
  static RedisConnection open(const RedisNode& node, const RedisConnectionSettings& settings,
                              std::chrono::milliseconds budget = std::chrono::milliseconds::max()) {
    SigpipeGuard guard;
    RedisConnection c;
    const auto connect_timeout =
        budget < settings.connect_timeout ? budget : settings.connect_timeout;
    c.ctx_.reset(
        redisConnectWithTimeout(node.host.c_str(), node.port, to_timeval(connect_timeout)));
    if (!c.ctx_) throw RedisError(RedisFailureKind::connect, node.address() + ": out of memory");
    if (c.ctx_->err != 0)
      throw RedisError(RedisFailureKind::connect,
                       node.address() + ": cannot connect: " + std::string(c.ctx_->errstr));
    c.timeout_ = budget < settings.command_timeout ? budget : settings.command_timeout;
    if (redisSetTimeout(c.ctx_.get(), to_timeval(c.timeout_)) != REDIS_OK)
      throw RedisError(RedisFailureKind::connect, node.address() + ": cannot set the timeout");
    std::vector<RedisCommand> setup;
    if (!settings.password.empty()) setup.push_back({"AUTH", settings.password});
    if (settings.db != 0) setup.push_back({"SELECT", std::to_string(settings.db)});
    if (!setup.empty()) {
      try {
        for (const auto& reply : c.pipeline(setup))
          if (reply->type == REDIS_REPLY_ERROR)
            throw RedisError(RedisFailureKind::connect,
                             node.address() + ": " + std::string(reply->str, reply->len));
      } catch (const RedisError& e) {
        throw RedisError(RedisFailureKind::connect, e.what());
      }
    }
    return c;
  }

  /// Sends every command in one write and reads one reply per command, in order, each socket
  /// wait bounded by `timeout` (unchanged if 0). Throws RedisError(timeout or io) when the
  /// connection fails; it is then unusable.
  std::vector<RedisReplyPtr> pipeline(const std::vector<RedisCommand>& commands,
                                      std::chrono::milliseconds timeout = {}) {
    SigpipeGuard guard;
    if (timeout.count() > 0 && timeout != timeout_) {
      if (redisSetTimeout(ctx_.get(), to_timeval(timeout)) != REDIS_OK) fail(0);
      timeout_ = timeout;
    }
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& cmd : commands) {
      argv.clear();
      lens.clear();
      for (const auto& arg : cmd) {
        argv.push_back(arg.data());
        lens.push_back(arg.size());
      }
      if (redisAppendCommandArgv(ctx_.get(), static_cast<int>(argv.size()), argv.data(),
                                 lens.data()) != REDIS_OK)
        fail(0);
    }
    std::vector<RedisReplyPtr> replies;
    replies.reserve(commands.size());
    for (std::size_t i = 0; i < commands.size(); ++i) {
      void* raw = nullptr;
      if (redisGetReply(ctx_.get(), &raw) != REDIS_OK || raw == nullptr) fail(replies.size());
      replies.emplace_back(static_cast<redisReply*>(raw));
    }
    return replies;
  }

 private:
  RedisConnection() = default;

  [[noreturn]] void fail(std::size_t replies_read) {
    broken_errno_ = errno;
    // hiredis reports a read past the socket timeout as an I/O error with EAGAIN.
    const std::string what = ctx_->errstr;
    const bool timed_out =
        ctx_->err == REDIS_ERR_IO && (broken_errno_ == EAGAIN || broken_errno_ == EWOULDBLOCK ||
                                      what.find("temporarily unavailable") != std::string::npos);
    throw RedisError(timed_out ? RedisFailureKind::timeout : RedisFailureKind::io,
                     std::string(timed_out ? "timed out: " : "connection failed: ") + what,
                     replies_read);
  }

  std::unique_ptr<redisContext, RedisContextDeleter> ctx_;
  std::chrono::milliseconds timeout_{0};  ///< the socket timeout currently set
  int broken_errno_ = 0;
};

}  // namespace ratelimit::detail
