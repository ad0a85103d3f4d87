#pragma once
/// @file redis/detail/io_loop.hpp
/// The I/O thread of a Redis client: every decision of a storage goes through it, so requests
/// from any number of threads share a few connections per node and are written as pipelines
/// (auto-pipelining), and every request's deadline is kept by one timer, whatever the socket
/// does (a server that never answers, trickles its reply, or stopped reading a large request).
///
/// The protocol stays hiredis's: requests arrive formatted (redisFormatSdsCommandArgv) and replies
/// are parsed by a redisReader fed from sockets this loop owns (TLS can slot in at send/recv):
/// redis/detail/resp.hpp. The thread's state is in io_core.hpp, its work by seam in io_turn.hpp,
/// io_connect.hpp, io_transfer.hpp and io_lend.hpp.
///
/// Rules of the thread: one I/O thread per loop; `submit` and `post_at` are safe from any thread,
/// including the I/O thread itself (a completion may submit the next step). Every request's
/// `done` runs exactly once, on the I/O thread (or, through `round_trip_here`, on the blocking
/// caller's thread that made the round trip itself), and must be quick: a slow completion delays
/// every other decision of the storage. The loop owns every connection, except one it lends
/// between its turns to such a caller.

#include <pthread.h>
#include <signal.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <thread>
#include <utility>

#include "io_connect.hpp"
#include "io_core.hpp"
#include "io_lend.hpp"
#include "io_node.hpp"
#include "io_transfer.hpp"
#include "io_turn.hpp"

namespace ratelimit::detail {

/// The loop. Thread safety: `node`, `submit`, `post_at`, `on_loop_thread` are safe from any
/// thread; destruction from any thread (from the I/O thread itself, the thread finishes alone).
class RedisIoLoop {
 public:
  /// Starts the I/O thread. `connections`: most connections per node, >= 1.
  RedisIoLoop(RedisConnectionSettings settings, std::size_t connections)
      : core_(std::make_shared<IoLoopCore>(std::move(settings), connections)) {
    // The thread is the library's: it must never take a signal meant for the process (a
    // service that waits for SIGTERM with sigwait in one thread would be killed instead). It
    // starts with every signal blocked (a new thread inherits its creator's mask), as do the
    // resolver threads it starts.
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    try {
      thread_ = std::thread([core = core_] { core->run(); });
    } catch (...) {
      pthread_sigmask(SIG_SETMASK, &previous, nullptr);
      throw;
    }
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  }

  RedisIoLoop(const RedisIoLoop&) = delete;
  RedisIoLoop& operator=(const RedisIoLoop&) = delete;

  /// Stops the thread. Whatever is still pending completes with an io failure ("shut down").
  ~RedisIoLoop() {
    core_->stop();
    if (core_->on_loop_thread())
      thread_.detach();  // the last handle dropped inside a completion: the loop ends by itself
    else
      thread_.join();
  }

  /// The handle of `address`, created on first sight with `settings` (the loop's own when null:
  /// a sentinel gets its own credentials). Never removed (a cluster has few addresses, even
  /// across failovers), so the pointer stays valid for the loop's life.
  IoNode* node(const RedisNode& address, const RedisConnectionSettings* settings = nullptr) {
    return core_->node(address, settings);
  }

  /// Queues `req` for `node`. If the loop is shutting down, it completes at once (io failure).
  /// Throws std::bad_alloc (and then never calls `req.done`).
  void submit(IoNode* node, IoRequest&& req) { core_->submit(node, std::move(req)); }

  /// Runs `fn` on the I/O thread at `at` (or at once on shutdown, which it can tell by a
  /// submit failing).
  void post_at(SteadyTime at, std::function<void()> fn) { core_->post_at(at, std::move(fn)); }

  /// True on the I/O thread (a completion): blocking there would wait on itself.
  bool on_loop_thread() const noexcept { return core_->on_loop_thread(); }

  /// The connection the loop has lent out for `node` (it does between its turns while the
  /// node has nothing else to do), taken by the calling thread until the handle is destroyed
  /// or used by `round_trip_here`. Empty when none is lent, or when the one lent was closed
  /// by the server meanwhile: taken before a request is formatted, that tells the caller the
  /// node's connection was lost (IoNode::connections_lost) in time to send its scripts in
  /// full on the new one. Plain sockets only (never TLS).
  IoLoopCore::Lent lend(IoNode* node) { return core_->lend(node); }

  /// For a blocking decision alone in flight, on the connection `lent` holds: makes `req`'s
  /// round trip on the calling thread, by `req.deadline`, and completes `req` here (`done`
  /// runs on the calling thread). That saves the hand-over to the I/O thread and back (two
  /// thread wake-ups, about 14 us here: bench/results/pipelining.md). False, with `req`
  /// untouched, when `lent` is empty or the request is larger than `round_trip_here_max`:
  /// submit it. `lent` is given back either way.
  bool round_trip_here(IoLoopCore::Lent& lent, IoRequest& req) {
    return core_->round_trip_here(lent, req);
  }

 private:
  std::shared_ptr<IoLoopCore> core_;
  std::thread thread_;
};

}  // namespace ratelimit::detail
