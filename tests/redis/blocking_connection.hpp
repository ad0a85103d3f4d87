#pragma once
/// @file blocking_connection.hpp
/// A blocking hiredis connection for the tests' own traffic (admin commands, checking that a
/// server answers, setting up users and clusters): RAII ownership, one deadline per round trip,
/// pipelined round trips. The library's connections all belong to its I/O thread
/// (redis/detail/io_loop.hpp); this was its first, blocking, pool and is kept for the tests.
///
/// The socket is non-blocking and waited on with poll, so a deadline bounds the whole round
/// trip: connect, every partial write and every partial read (hiredis's own socket timeouts
/// would bound each read(2) alone). hiredis formats the commands and parses the replies (its
/// public redisBufferWrite, redisBufferRead and redisGetReplyFromReader).

#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <ratelimit/redis/detail/connection.hpp>

namespace rltest {

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

/// Waits until `fd` is ready for `events` (POLLIN, POLLOUT) or `deadline` passes. False on
/// timeout. poll's timeout is whole ms, rounded up, so a wait ends at most about 1 ms (plus the
/// kernel's timer slack) after the deadline.
inline bool wait_ready(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = time_left(deadline, std::chrono::steady_clock::now(),
                                std::chrono::milliseconds{std::int64_t{1} << 30});
    if (left.count() == 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n > 0) return true;  // ready, or an error/hang-up the next read or write reports
    if (n < 0 && errno != EINTR) return true;
  }
}

/// One open connection. Not thread-safe.
class BlockingConnection {
 public:
  /// Connects within settings.connect_timeout (and before `deadline`), then AUTH and SELECT
  /// before `deadline`. Throws ratelimit::detail::RedisError(connect) on any failure.
  static BlockingConnection open(const ratelimit::detail::RedisNode& node,
                                 const ratelimit::detail::RedisConnectionSettings& settings,
                                 std::chrono::steady_clock::time_point deadline) {
    SigpipeGuard guard;
    BlockingConnection c;
    const auto connect_by =
        std::min(deadline, std::chrono::steady_clock::now() +
                               std::chrono::milliseconds(settings.connect_timeout));
    c.ctx_.reset(node.is_unix() ? redisConnectUnixNonBlock(node.host.c_str())
                                : redisConnectNonBlock(node.host.c_str(), node.port));
    if (!c.ctx_)
      throw ratelimit::detail::RedisError(ratelimit::RedisFailureKind::connect,
                                          node.address() + ": out of memory");
    if (c.ctx_->err != 0)
      throw ratelimit::detail::RedisError(
          ratelimit::RedisFailureKind::connect,
          node.address() + ": cannot connect: " + std::string(c.ctx_->errstr));
    if (!wait_ready(c.ctx_->fd, POLLOUT, connect_by))
      throw ratelimit::detail::RedisError(ratelimit::RedisFailureKind::connect,
                                          node.address() + ": cannot connect: timed out");
    int error = 0;
    socklen_t size = sizeof error;
    if (::getsockopt(c.ctx_->fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0 || error != 0)
      throw ratelimit::detail::RedisError(
          ratelimit::RedisFailureKind::connect,
          node.address() + ": cannot connect: " + std::string(std::strerror(error)));
    std::vector<ratelimit::detail::RedisCommand> setup;
    if (!settings.password.empty()) {
      if (settings.username.empty())
        setup.push_back({"AUTH", settings.password});
      else
        setup.push_back({"AUTH", settings.username, settings.password});
    }
    if (settings.db != 0) setup.push_back({"SELECT", std::to_string(settings.db)});
    if (!setup.empty()) {
      try {
        for (const auto& reply : c.pipeline(setup, deadline))
          if (reply->type == REDIS_REPLY_ERROR)
            throw ratelimit::detail::RedisError(
                ratelimit::RedisFailureKind::connect,
                node.address() + ": " + std::string(reply->str, reply->len));
      } catch (const ratelimit::detail::RedisError& e) {
        throw ratelimit::detail::RedisError(ratelimit::RedisFailureKind::connect, e.what());
      }
    }
    c.command_timeout_ = settings.command_timeout;
    return c;
  }

  /// As above, before connect_timeout + command_timeout from now.
  static BlockingConnection open(const ratelimit::detail::RedisNode& node,
                                 const ratelimit::detail::RedisConnectionSettings& settings) {
    return open(
        node, settings,
        std::chrono::steady_clock::now() + settings.connect_timeout + settings.command_timeout);
  }

  /// As below, before the settings' command_timeout from now.
  std::vector<ratelimit::detail::RedisReplyPtr> pipeline(
      const std::vector<ratelimit::detail::RedisCommand>& commands) {
    return pipeline(commands, std::chrono::steady_clock::now() + command_timeout_);
  }

  /// Sends every command in one pipeline and reads one reply per command, in order, all of it
  /// before `deadline`. Throws ratelimit::detail::RedisError(timeout or io) when the connection
  /// fails; it is then unusable.
  std::vector<ratelimit::detail::RedisReplyPtr> pipeline(
      const std::vector<ratelimit::detail::RedisCommand>& commands,
      std::chrono::steady_clock::time_point deadline) {
    SigpipeGuard guard;
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
    for (int done = 0; !done;) {
      if (redisBufferWrite(ctx_.get(), &done) != REDIS_OK) fail(0);
      if (!done && !wait_ready(ctx_->fd, POLLOUT, deadline)) timed_out(0);
    }
    std::vector<ratelimit::detail::RedisReplyPtr> replies;
    replies.reserve(commands.size());
    while (replies.size() < commands.size()) {
      void* raw = nullptr;
      if (redisGetReplyFromReader(ctx_.get(), &raw) != REDIS_OK) fail(replies.size());
      if (raw != nullptr) {
        replies.emplace_back(static_cast<redisReply*>(raw));
        continue;
      }
      if (!wait_ready(ctx_->fd, POLLIN, deadline)) timed_out(replies.size());
      if (redisBufferRead(ctx_.get()) != REDIS_OK) fail(replies.size());
    }
    return replies;
  }

 private:
  struct ContextDeleter {
    void operator()(redisContext* c) const noexcept { redisFree(c); }
  };

  BlockingConnection() = default;

  [[noreturn]] void fail(std::size_t replies_read) {
    throw ratelimit::detail::RedisError(ratelimit::RedisFailureKind::io,
                                        "connection failed: " + std::string(ctx_->errstr),
                                        replies_read);
  }

  [[noreturn]] static void timed_out(std::size_t replies_read) {
    throw ratelimit::detail::RedisError(ratelimit::RedisFailureKind::timeout, "timed out",
                                        replies_read);
  }

  std::unique_ptr<redisContext, ContextDeleter> ctx_;
  std::chrono::milliseconds command_timeout_{0};
};

}  // namespace rltest
