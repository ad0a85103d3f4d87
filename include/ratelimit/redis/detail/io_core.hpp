#pragma once
/// @file redis/detail/io_core.hpp
/// The state of a Redis client's I/O thread (RedisIoLoop, redis/detail/io_loop.hpp): the queues
/// other threads hand work over through, the nodes, the deadlines and timers, and the
/// declarations of what the thread does. The work itself is defined by seam: io_turn.hpp (one
/// turn of the loop: queues, deadlines, timers, poll, shutdown), io_connect.hpp (a connection's
/// life: resolve, connect, TLS, AUTH/SELECT, failure), io_transfer.hpp (bytes out and replies
/// in) and io_lend.hpp (the idle connection lent to a blocking caller). Include io_loop.hpp,
/// which brings them all.
///
/// Thread safety: `node`, `submit`, `post_at`, `wake`, `stop` and `round_trip_here` are safe
/// from any thread; everything else runs on the I/O thread.

#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "io_node.hpp"
#include "socket.hpp"
#include "tls.hpp"

namespace ratelimit::detail {

/// A RedisIoLoop's shared core (owned by the loop and by its thread): see the file comment.
class IoLoopCore {
  using Pending = IoNode::Pending;
  using Conn = IoNode::Conn;

  /// Wakes the loop from poll. Shared with resolver threads, which may outlive the loop.
  /// The eventfd is written only while the loop sleeps (`armed`): a loop at work finds
  /// `pending` before it sleeps, so a busy loop costs its submitters no syscall and itself no
  /// extra turn (before, every turn that had been woken cost one write and one read). Either
  /// the loop sees `pending` after arming, or the waker sees `armed` after setting `pending`
  /// (both sequentially consistent).
  struct Waker {
    Waker() : fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
      if (fd < 0) throw std::runtime_error("eventfd: " + std::string(std::strerror(errno)));
    }
    ~Waker() { ::close(fd); }
    void wake() noexcept {
      pending.store(true);
      if (!armed.load() || !armed.exchange(false)) return;
      const std::uint64_t one = 1;
      [[maybe_unused]] const auto n = ::write(fd, &one, sizeof one);
    }
    int fd;
    std::atomic<bool> pending{false};  ///< work was handed over since the loop last looked
    std::atomic<bool> armed{false};    ///< the loop sleeps (or is about to) in ppoll
  };

  /// A function to run on the I/O thread at `at` (post_at); `seq` keeps equal times in order.
  struct Timer {
    SteadyTime at;
    std::uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Timer& o) const noexcept { return at != o.at ? at > o.at : seq > o.seq; }
  };

  /// A request's deadline in the loop's queue (a finished request's entry is skipped).
  struct Deadline {
    SteadyTime at;
    std::shared_ptr<Pending> pending;
    bool operator>(const Deadline& o) const noexcept { return at > o.at; }
  };

 public:
  /// `connections`: most connections per node (at least 1).
  IoLoopCore(RedisConnectionSettings settings, std::size_t connections)
      : settings_(std::move(settings)),
        connections_(std::max<std::size_t>(1, connections)),
        waker_(std::make_shared<Waker>()),
        buffer_(std::size_t{1} << 16) {}

  /// True on the I/O thread.
  bool on_loop_thread() const noexcept {
    return loop_thread_.load(std::memory_order_acquire) == std::this_thread::get_id();
  }

  /// The handle of `address` (see RedisIoLoop::node).
  IoNode* node(const RedisNode& address, const RedisConnectionSettings* settings) {
    std::lock_guard lock(mutex_);
    for (const auto& n : nodes_)
      if (n->address() == address) return n.get();
    nodes_.push_back(
        std::unique_ptr<IoNode>(new IoNode(address, settings ? *settings : settings_)));
    return nodes_.back().get();
  }

  /// Queues `req` for `node` (see RedisIoLoop::submit).
  void submit(IoNode* node, IoRequest&& req) {
    auto p = std::make_shared<Pending>();
    p->node = node;
    p->req = std::move(req);
    {
      std::unique_lock lock(mutex_);
      if (!stopping_) {
        incoming_.push_back(std::move(p));
        lock.unlock();
        wake();
        return;
      }
    }
    complete(p->req, shut_down());
  }

  /// Runs `fn` on the I/O thread at `at` (see RedisIoLoop::post_at).
  void post_at(SteadyTime at, std::function<void()> fn) {
    {
      std::lock_guard lock(mutex_);
      incoming_timers_.push_back(Timer{at, 0, std::move(fn)});
    }
    wake();
  }

  /// Makes the loop drain its queues before it next sleeps. From the I/O thread itself (a
  /// completion, a timer) a flag does it without a syscall.
  void wake() {
    if (on_loop_thread())
      queued_by_loop_ = true;
    else
      waker_->wake();
  }

  /// Makes the loop finish: `run` fails what is pending and returns.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    waker_->wake();
  }

  /// The idle connection a caller took (see RedisIoLoop::lend): empty when none was lent, or
  /// when the one lent had been closed by the server meanwhile (found so when taken: it counts
  /// as a lost connection of its node). Given back when destroyed. Move-only.
  class Lent {
   public:
    Lent() = default;
    Lent(Lent&& o) noexcept : core_(o.core_), node_(o.node_), conn_(o.conn_) { o.conn_ = nullptr; }
    Lent& operator=(Lent&& o) noexcept {
      if (this != &o) {
        release();
        core_ = o.core_;
        node_ = o.node_;
        conn_ = o.conn_;
        o.conn_ = nullptr;
      }
      return *this;
    }
    Lent(const Lent&) = delete;
    Lent& operator=(const Lent&) = delete;
    ~Lent() { release(); }
    explicit operator bool() const noexcept { return conn_ != nullptr; }
    /// Gives the connection back now (nothing if empty).
    void release() noexcept {
      if (conn_ != nullptr) core_->give_back(node_, conn_, conn_->dead);
      conn_ = nullptr;
    }

   private:
    friend class IoLoopCore;
    Lent(IoLoopCore* core, IoNode* node, Conn* conn) : core_(core), node_(node), conn_(conn) {}
    IoLoopCore* core_ = nullptr;
    IoNode* node_ = nullptr;
    Conn* conn_ = nullptr;
  };

  /// Takes `node`'s lent connection for the calling thread (defined in io_lend.hpp).
  Lent lend(IoNode* node);

  /// A blocking caller's own round trip on the connection it took (see
  /// RedisIoLoop::round_trip_here; defined in io_lend.hpp). Gives it back.
  bool round_trip_here(Lent& lent, IoRequest& req);

  /// The I/O thread's body: turns until `stop` (defined in io_turn.hpp).
  void run();

 private:
  /// One turn: queues, deadlines, timers, connections, one poll. True when stopping.
  bool iterate();

  /// Writes `req` on `c` and reads its replies, on the calling thread, by `req.deadline`
  /// (ppoll, as the loop does). A failure closes `c`, named as the loop names it.
  static IoOutcome exchange_here(const IoNode& node, Conn& c, IoRequest& req);

  /// Closes an idle connection that is readable (the server closed it, or sent what nobody
  /// asked for: the loop would close it for either) or failed. True if it did.
  static bool close_if_readable(Conn& c) noexcept;

  /// A caller hands a lent connection back; wakes the loop only if it waits for it (or if
  /// `check`: the connection is dead or must be looked at).
  void give_back(IoNode* node, Conn* c, bool check) noexcept;

  /// At the start of a turn in which requests wait for `node`: the lent connection back into
  /// `conns_` if no caller holds it; if one does, the caller giving it back wakes the loop.
  /// Otherwise it stays lent: taking it back on every turn would race the very caller the
  /// turn's completion woke (who then found none lent about every other decision).
  void reclaim(IoNode& node);

  /// At the end of a turn: lends one ready connection of `node` if the node has nothing else
  /// to do (nothing queued or in flight), for a blocking caller alone in flight. Never a TLS
  /// connection, nor one that has not answered yet (its failure would be a connect failure).
  void park(IoNode& node);

  static IoOutcome shut_down() {
    return IoOutcome{
        {}, RedisError::not_the_node(RedisFailureKind::io, "the storage shut down"), {}};
  }

  static void complete(IoRequest& req, IoOutcome&& outcome) noexcept {
    outcome.sent = std::move(req.wire);
    auto done = std::move(req.done);
    try {
      if (done) done(std::move(outcome));
    } catch (...) {  // a completion has nowhere to throw to
    }
  }

  /// Completes `p` now, once.
  void finish(Pending& p, IoOutcome&& outcome) noexcept;

  /// `finish`, with the completion run at the end of the turn (`run_later`): by then the
  /// loop has lent an idle connection (see `park`), which a blocking caller woken by the
  /// completion finds.
  void finish_later(Pending& p, IoOutcome&& outcome) noexcept;

  /// Runs the completions `finish_later` kept, in order.
  void run_later() noexcept;

  /// Moves what other threads queued into the loop's own structures. True when stopping.
  bool drain();

  /// Fails every request whose deadline passed. One on a connection takes the connection
  /// down: its replies are late or lost, and the requests behind it would wait on them too.
  void expire(SteadyTime now);

  /// Runs the timers due at `now`.
  void run_timers(SteadyTime now);

  /// When the loop must wake up by itself: the next deadline, timer or connect timeout.
  std::optional<SteadyTime> next_wake();

  /// poll with a nanosecond timeout (ppoll): a deadline is overshot by the kernel's timer
  /// slack (50 us by default), not by a rounded-up millisecond. Before it sleeps, the loop
  /// arms the waker (see Waker).
  void wait(std::vector<pollfd>& fds, std::optional<SteadyTime> until);

 public:
  /// How late past the time it asked for a wait must end to count as a pause of the process
  /// (every thread stopped: SIGSTOP, a frozen VM), not a slow server or a busy machine.
  static constexpr std::chrono::milliseconds pause_gap{100};
  /// Pauses of the process the loop noticed (and gave the requests past their deadline one
  /// more command timeout). Thread safety: any thread.
  std::uint64_t pauses() const noexcept { return pauses_.load(std::memory_order_relaxed); }

 private:
  /// After a pause: each request whose deadline passed meanwhile gets one more command
  /// timeout from `now`, once; so do connection attempts.
  void resumed(SteadyTime now);

  /// Advances `node`'s connections and puts its waiting requests on ready ones.
  void service(IoNode& node, SteadyTime now);

  /// Opens one more connection to `node` (its connect timeout starts at `now`).
  void open(IoNode& node, SteadyTime now);

  /// Starts connecting once the node's name is resolved (a result is kept for a minute; a
  /// lookup in flight is shared by every attempt).
  void resolved(IoNode& node, Conn& c);

  /// Tries the next resolved address ("localhost" may be ::1 first and Redis on 127.0.0.1).
  void connect_next(IoNode& node, Conn& c, std::string last_error);

  /// What poll reported for `c`: a connect that completed, TLS, bytes to write or to read.
  void handle(Conn& c, short revents);

  /// Drives the TLS handshake; on success, the Redis handshake follows.
  void secure(IoNode& node, Conn& c);

  /// AUTH and SELECT before any request.
  void handshake(IoNode& node, Conn& c);

  /// `c` takes requests from now on. The node's first ready connection also asks for its
  /// eviction policy (INFO memory), as an ordinary request queued first: a server that stalls
  /// must not hold the connection's readiness, and a user refused INFO (NOPERM) only skips
  /// the check.
  void ready(IoNode& node, Conn& c);

  static bool has_output(const Conn& c) noexcept {
    return c.handshake_pos < c.handshake.size() || c.write_index < c.inflight.size();
  }

  /// Writes what `c` has queued, straight from each request's bytes (sendmsg over up to 64
  /// of them at once), until the socket would block.
  void flush(IoNode& node, Conn& c);

  /// TLS: bytes are staged (up to 64 KiB, what one write hands OpenSSL), then SSL_write. A
  /// staged request counts as sent: it can no longer move to another connection.
  void flush_tls(IoNode& node, Conn& c);

  /// Copies up to `limit` queued bytes into `c.tls_out`.
  static void stage(Conn& c, std::size_t limit);

  /// Marks `n` more bytes of `c`'s queue as written.
  static void advance(Conn& c, std::size_t n) noexcept;

  /// Reads what `c` has, at most a few buffers' worth: a server streaming a huge reply must not
  /// keep the loop from its other connections and its deadlines.
  void read(IoNode& node, Conn& c);

  /// One reply read on `c`: to the handshake, or to the request it answers.
  void deliver(IoNode& node, Conn& c, RedisReplyPtr reply);

  /// Hands the `maxmemory_policy:` line of an INFO reply to the node's hook.
  static void report_policy(const IoNode& node, const redisReply& reply);

  /// Closes `c`. Requests it wrote (any byte of) fail with `kind`; requests it never wrote go
  /// back to the front of the node's queue for another connection. If the node has no other
  /// connection, a failure to connect also fails the requests waiting for one.
  void fail_conn(Conn& c, RedisFailureKind kind, const std::string& message);

  static IoNode& owner(const Conn& c) noexcept { return *c.node; }

  /// On stop: fails everything pending ("shut down") and runs the timers left.
  void shut_down_all();

  RedisConnectionSettings settings_;
  std::size_t connections_;
  std::shared_ptr<Waker> waker_;
  std::atomic<std::thread::id> loop_thread_{};

  std::mutex mutex_;  ///< guards what other threads hand over: the three below, stopping_
  std::vector<std::shared_ptr<Pending>> incoming_;
  std::vector<Timer> incoming_timers_;
  std::vector<std::unique_ptr<IoNode>> nodes_;
  bool stopping_ = false;

  // The I/O thread's own.
  std::vector<IoNode*> loop_nodes_;
  std::priority_queue<Deadline, std::vector<Deadline>, std::greater<>> deadlines_;
  std::atomic<std::uint64_t> pauses_{0};
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
  std::uint64_t timer_seq_ = 0;
  bool queued_by_loop_ = false;  ///< the I/O thread queued work since its last drain
  std::vector<char> buffer_;
  std::vector<pollfd> fds_;
  std::vector<Conn*> polled_;
  /// Completions of answered requests, run at the end of the turn (see `finish_later`).
  std::vector<std::pair<IoRequest, IoOutcome>> later_, running_;
};

}  // namespace ratelimit::detail
