#pragma once
/// @file redis/detail/io_node.hpp
/// What travels through a Redis client's I/O thread (redis/detail/io_loop.hpp): a request
/// (`IoRequest`: its bytes, how many replies, its deadline, its completion), its outcome
/// (`IoOutcome`), and a node with its connections' state (`IoNode`, opaque outside the loop):
/// resolving, connecting, TLS, handshake, ready; what is written and what is in flight.

#include <hiredis/hiredis.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "connection.hpp"
#include "resp.hpp"
#include "socket.hpp"
#include "tls.hpp"

namespace ratelimit::detail {

/// An instant on the steady clock: deadlines, timers, connect timeouts.
using SteadyTime = std::chrono::steady_clock::time_point;

/// What a request got: one reply per command, or the failure (with how many replies came first).
struct IoOutcome {
  std::vector<RedisReplyPtr> replies;
  std::optional<RedisError> error;
  std::string sent;  ///< the request's own bytes, handed back (a retry can reuse them)
};

/// Commands for one node, written back to back on one connection, with one deadline.
struct IoRequest {
  std::string wire;         ///< the commands in RESP (see append_command)
  std::size_t replies = 0;  ///< replies the commands produce
  SteadyTime deadline;
  std::function<void(IoOutcome&&)> done;  ///< called exactly once, on the I/O thread
};

/// The largest request a blocking caller writes itself (RedisIoLoop::round_trip_here): one
/// that fits a loopback socket's buffer, so it is written whole before any reply is read.
inline constexpr std::size_t round_trip_here_max = std::size_t{64} << 10;

/// True on any storage's I/O thread: a blocking decision there, even on another storage, could
/// wait on a thread that waits on this one (two storages whose completions block on each other).
inline thread_local bool on_io_thread = false;

class IoLoopCore;

/// A node as the I/O thread sees it. Opaque outside the loop: a handle for `submit`.
class IoNode {
 public:
  const RedisNode& address() const noexcept { return address_; }
  /// How many of this node's connections broke or were closed after they became ready (the
  /// server restarted, a network failure). A caller that sees it change treats the node's
  /// script cache as empty: a new connection may reach a server that never ran the scripts.
  /// Thread safety: any thread.
  std::uint64_t connections_lost() const noexcept { return lost_.load(std::memory_order_acquire); }

 private:
  friend class IoLoopCore;
  struct Pending;
  struct ReaderDeleter {
    void operator()(redisReader* r) const noexcept { redisReaderFree(r); }
  };
  /// One connection: resolving, connecting, authenticating (AUTH/SELECT), then ready.
  struct Conn {
    /// securing: the TLS handshake; handshaking: AUTH/SELECT/INFO replies still due.
    enum class State {
      resolving,
      connecting,
      securing,
      handshaking,
      ready
    } state = State::resolving;
    IoNode* node = nullptr;  ///< the node it connects to
    int fd = -1;
    bool dead = false;
    /// Closes the socket for good (the connection is dropped from its node later).
    void close_for_good() noexcept {
      if (fd >= 0 && state == State::ready && node != nullptr)
        node->lost_.fetch_add(1, std::memory_order_acq_rel);
      if (fd >= 0) ::close(fd);
      fd = -1;
      dead = true;
    }
    std::vector<SocketAddress> addresses;
    std::size_t next_address = 0;
    SteadyTime connect_deadline;
    /// When the attempt started, TCP connected and TLS finished (cold-start timing).
    SteadyTime opened_at, connected_at, secured_at;
    std::unique_ptr<redisReader, ReaderDeleter> reader{
        redisReaderCreateWithFunctions(capped_reply_functions())};
    SslPtr ssl;                   ///< TLS session (null: plain socket)
    std::string tls_out;          ///< bytes handed to SSL_write, kept until it takes them all
    bool tls_want_write = false;  ///< the session waits for the socket to be writable
    bool answered = false;        ///< the server sent a reply (the session really works)
    std::string handshake;        ///< AUTH/SELECT/INFO, written before any request
    std::size_t handshake_pos = 0;
    /// Requests are written from their own bytes (no copy into a connection buffer): the first
    /// not fully written is inflight[write_index], write_offset bytes into it.
    std::size_t write_index = 0;
    std::size_t write_offset = 0;
    std::uint64_t queued = 0;  ///< bytes ever queued on this connection
    std::uint64_t sent = 0;    ///< bytes ever written to the socket
    std::size_t handshake_left = 0;
    std::deque<std::shared_ptr<Pending>> inflight;
  };
  /// A request on its way, made by `submit` on the submitting thread (one allocation for the
  /// request and its bookkeeping).
  struct Pending {
    IoRequest req;  ///< moved out when it finishes
    std::vector<RedisReplyPtr> got;
    IoNode* node = nullptr;
    Conn* conn = nullptr;     ///< null while waiting for a connection
    std::uint64_t start = 0;  ///< where its bytes start on conn (to know if any were sent)
    bool finished = false;
    bool resumed = false;  ///< given a new deadline once after a pause of the process
  };

  IoNode(RedisNode address, RedisConnectionSettings settings)
      : address_(std::move(address)), settings_(std::move(settings)) {}

 public:
  IoNode(const IoNode&) = delete;
  IoNode& operator=(const IoNode&) = delete;
  ~IoNode() {
    // A connection lent when the loop shut down comes back here, still open.
    if (lent_ && lent_->fd >= 0) ::close(lent_->fd);
  }

 private:
  RedisNode address_;
  RedisConnectionSettings settings_;
  bool policy_asked_ = false;  ///< INFO memory was sent (once per node)
  /// The name's lookup, shared by every connection attempt: one that outlives an attempt's
  /// connect_timeout still serves the next attempt (a slow DNS must not fail every attempt).
  std::optional<Resolution> resolving_;
  std::vector<SocketAddress> addresses_;
  std::chrono::steady_clock::time_point resolved_at_;
  std::deque<std::shared_ptr<Pending>> waiting_;  ///< not yet on a connection, in order
  std::vector<std::unique_ptr<Conn>> conns_;
  /// A connection lent out (see RedisIoLoop::round_trip_here): out of `conns_`, so no turn of
  /// the loop touches it, until the loop takes it back from `parked_`.
  std::unique_ptr<Conn> lent_;
  /// `lent_` while no caller holds it; null while one does (or when none is lent). Exchanged
  /// by the loop (taking it back) and by callers (borrowing it), stored by callers giving it
  /// back.
  std::atomic<Conn*> parked_{nullptr};
  /// The loop has requests for this node and waits for the lent connection: the caller giving
  /// it back wakes the loop (otherwise it does not: no syscall).
  std::atomic<bool> want_back_{false};
  /// See connections_lost.
  std::atomic<std::uint64_t> lost_{0};
};

}  // namespace ratelimit::detail
