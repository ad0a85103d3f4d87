#pragma once
/// @file redis/detail/io_loop.hpp
/// The I/O thread of a Redis client: every decision of a storage goes through it, so requests
/// from any number of threads share a few connections per node and are written as pipelines
/// (auto-pipelining), and every request's deadline is kept by one timer, whatever the socket
/// does (a server that never answers, trickles its reply, or stopped reading a large request).
///
/// The protocol stays hiredis's: requests arrive formatted (redisFormatSdsCommandArgv) and replies
/// are parsed by a redisReader fed from sockets this loop owns (TLS can slot in at send/recv).
///
/// Rules of the thread: one I/O thread per loop; `submit` and `post_at` are safe from any thread,
/// including the I/O thread itself (a completion may submit the next step). Every request's
/// `done` runs exactly once, on the I/O thread (or, through `round_trip_here`, on the blocking
/// caller's thread that made the round trip itself), and must be quick: a slow completion delays
/// every other decision of the storage. The loop owns every connection, except one it lends
/// between its turns to such a caller.

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

#include "connection.hpp"
#include "socket.hpp"
#include "tls.hpp"

namespace ratelimit::detail {

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

/// Appends one command, its arguments given as pointers and lengths, to `wire` in RESP,
/// formatted by hiredis. Throws std::bad_alloc.
inline void append_argv(std::string& wire, std::vector<const char*>& argv,
                        std::vector<std::size_t>& lens) {
  // hiredis's sds formatter, not redisFormatCommandArgv: the same bytes, but the latter calls
  // sprintf for every argument's length, about 40 % of the client's work per decision
  // (callgrind: 10,300 against 7,400 instructions for a 12-argument EVALSHA).
  sds out = nullptr;
  const int n =
      redisFormatSdsCommandArgv(&out, static_cast<int>(argv.size()), argv.data(), lens.data());
  if (n < 0) throw std::bad_alloc();
  wire.append(out, static_cast<std::size_t>(n));
  redisFreeSdsCommand(out);
}

/// The digits of `n` in decimal (1 for 0).
constexpr std::size_t decimal_digits(std::size_t n) noexcept {
  std::size_t digits = 1;
  for (; n >= 10; n /= 10) ++digits;
  return digits;
}

/// The bytes of RESP's "$<len>\r\n<bytes>\r\n" for an argument of `len` bytes. With
/// `resp_header_bytes`, sizes a request's reserve before hiredis formats it (a large batch
/// would otherwise grow its string some 20 times, copying and faulting in twice its size); a
/// wrong figure would cost a reallocation, nothing else.
constexpr std::size_t resp_argument_bytes(std::size_t len) noexcept {
  return 1 + decimal_digits(len) + 2 + len + 2;
}

/// The bytes of RESP's "*<n>\r\n" header for a command of `n` arguments.
constexpr std::size_t resp_header_bytes(std::size_t n) noexcept {
  return 1 + decimal_digits(n) + 2;
}

/// Appends `cmd` to `wire` in RESP, formatted by hiredis. Throws std::bad_alloc.
inline void append_command(std::string& wire, const RedisCommand& cmd) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  argv.reserve(cmd.size());
  lens.reserve(cmd.size());
  for (const auto& arg : cmd) {
    argv.push_back(arg.data());
    lens.push_back(arg.size());
  }
  append_argv(wire, argv, lens);
}

/// The largest request a blocking caller writes itself (RedisIoLoop::round_trip_here): one
/// that fits a loopback socket's buffer, so it is written whole before any reply is read.
inline constexpr std::size_t round_trip_here_max = std::size_t{64} << 10;

/// True on any storage's I/O thread: a blocking decision there, even on another storage, could
/// wait on a thread that waits on this one (two storages whose completions block on each other).
inline thread_local bool on_io_thread = false;

/// The most elements one reply array may announce. hiredis 0.14 allocates an array when it
/// reads its header, so a hostile or broken server announcing 2^31 elements would cost the I/O
/// thread gigabytes and seconds (allocating, then freeing element by element). The library's
/// replies are a few elements; CLUSTER SLOTS at most 16,384 ranges.
inline constexpr int max_reply_elements = 1 << 20;

/// hiredis's own reply builders with the array size capped (a refused header is a reader error).
inline redisReplyObjectFunctions* capped_reply_functions() {
  static void* (*create_array)(const redisReadTask*, int) = nullptr;
  static redisReplyObjectFunctions capped = [] {
    redisReader* plain = redisReaderCreate();  // its table holds hiredis's default builders
    redisReplyObjectFunctions f = *plain->fn;
    redisReaderFree(plain);
    create_array = f.createArray;
    f.createArray = [](const redisReadTask* task, int elements) -> void* {
      if (elements > max_reply_elements) return nullptr;
      return create_array(task, elements);
    };
    return f;
  }();
  return &capped;
}

class RedisIoLoop;

/// A node as the I/O thread sees it. Opaque outside the loop: a handle for `submit`.
class IoNode {
 public:
  const RedisNode& address() const noexcept { return address_; }

 private:
  friend class RedisIoLoop;
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
      if (fd >= 0) ::close(fd);
      fd = -1;
      dead = true;
    }
    std::vector<SocketAddress> addresses;
    std::size_t next_address = 0;
    SteadyTime connect_deadline;
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
};

/// The loop. Thread safety: `node`, `submit`, `post_at`, `on_loop_thread` are safe from any
/// thread; destruction from any thread (from the I/O thread itself, the thread finishes alone).
class RedisIoLoop {
 public:
  /// Starts the I/O thread. `connections`: most connections per node, >= 1.
  RedisIoLoop(RedisConnectionSettings settings, std::size_t connections)
      : core_(std::make_shared<Core>(std::move(settings), connections)) {
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

  /// For a blocking decision alone in flight: if the loop has lent out `node`'s idle
  /// connection (it does between its turns while the node has nothing else to do), makes
  /// `req`'s round trip on the calling thread, by `req.deadline`, and completes `req` here
  /// (`done` runs on the calling thread). That saves the hand-over to the I/O thread and back
  /// (two thread wake-ups, about 14 us here: bench/results/pipelining.md). False, with `req`
  /// untouched, when no connection is lent or the request is larger than
  /// `round_trip_here_max`: submit it. Plain sockets only (never TLS).
  bool round_trip_here(IoNode* node, IoRequest& req) { return core_->round_trip_here(node, req); }

 private:
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

  struct Timer {
    SteadyTime at;
    std::uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Timer& o) const noexcept { return at != o.at ? at > o.at : seq > o.seq; }
  };

  struct Deadline {
    SteadyTime at;
    std::shared_ptr<Pending> pending;
    bool operator>(const Deadline& o) const noexcept { return at > o.at; }
  };

  class Core {
   public:
    Core(RedisConnectionSettings settings, std::size_t connections)
        : settings_(std::move(settings)),
          connections_(std::max<std::size_t>(1, connections)),
          waker_(std::make_shared<Waker>()),
          buffer_(std::size_t{1} << 16) {}

    bool on_loop_thread() const noexcept {
      return loop_thread_.load(std::memory_order_acquire) == std::this_thread::get_id();
    }

    IoNode* node(const RedisNode& address, const RedisConnectionSettings* settings) {
      std::lock_guard lock(mutex_);
      for (const auto& n : nodes_)
        if (n->address() == address) return n.get();
      nodes_.push_back(
          std::unique_ptr<IoNode>(new IoNode(address, settings ? *settings : settings_)));
      return nodes_.back().get();
    }

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

    void stop() {
      {
        std::lock_guard lock(mutex_);
        stopping_ = true;
      }
      waker_->wake();
    }

    bool round_trip_here(IoNode* node, IoRequest& req) {
      // A large request (a big batch) goes through the loop, which reads replies while it
      // writes; here the whole request is written before the first read.
      if (req.wire.size() > round_trip_here_max) return false;
      Conn* c = node->parked_.exchange(nullptr);
      if (c == nullptr) return false;
      // Dead (a caller before failed on it), or closed here because it was readable while idle
      // (the server closed it, or sent what nobody asked for): the loop drops it on its turn.
      if (c->dead || close_if_readable(*c)) {
        give_back(node, c, true);
        return false;
      }
      IoOutcome outcome = exchange_here(*node, *c, req);
      give_back(node, c, c->dead);
      complete(req, std::move(outcome));
      return true;
    }

    void run() {
      on_io_thread = true;
      loop_thread_.store(std::this_thread::get_id(), std::memory_order_release);
      // Every signal is blocked here (see the constructor), SIGPIPE included: OpenSSL writes
      // with write(2), and a thread-directed SIGPIPE from a closed peer stays pending, harmless.
      for (;;) {
        try {
          if (iterate()) return shut_down_all();
        } catch (...) {
          // Out of memory or threads (a resolver): this turn's work is cut short (what it had
          // drained may be lost), but the loop must go on, or no deadline would be kept again.
          // Requests already answered complete now, not after the next wake-up.
          run_later();
        }
      }
    }

   private:
    /// One turn: queues, deadlines, timers, connections, one poll. True when stopping.
    bool iterate() {
      std::vector<pollfd>& fds = fds_;
      std::vector<Conn*>& polled = polled_;
      {
        if (drain()) return true;
        for (IoNode* n : loop_nodes_) reclaim(*n);
        const SteadyTime now = std::chrono::steady_clock::now();
        expire(now);
        run_timers(now);
        for (IoNode* n : loop_nodes_) service(*n, now);
        fds.assign(1, pollfd{waker_->fd, POLLIN, 0});
        polled.clear();
        for (IoNode* n : loop_nodes_)
          for (const auto& c : n->conns_) {
            if (c->fd < 0) continue;
            const bool writing = c->state == Conn::State::connecting || has_output(*c) ||
                                 !c->tls_out.empty() || c->tls_want_write;
            fds.push_back(pollfd{c->fd, static_cast<short>(POLLIN | (writing ? POLLOUT : 0)), 0});
            polled.push_back(c.get());
          }
        // Work queued by this iteration's timers or expiries: poll without sleeping.
        wait(fds, queued_by_loop_ ? std::optional<SteadyTime>(now) : next_wake());
        for (std::size_t i = 1; i < fds.size(); ++i)
          if (fds[i].revents != 0) handle(*polled[i - 1], fds[i].revents);
        if (fds[0].revents != 0) {
          std::uint64_t count = 0;
          [[maybe_unused]] const auto n = ::read(waker_->fd, &count, sizeof count);
        }
        for (IoNode* n : loop_nodes_) {
          n->conns_.erase(std::remove_if(n->conns_.begin(), n->conns_.end(),
                                         [](const auto& c) { return c->dead; }),
                          n->conns_.end());
          park(*n);
        }
        run_later();
      }
      return false;
    }

    /// Writes `req` on `c` and reads its replies, on the calling thread, by `req.deadline`
    /// (ppoll, as the loop does). A failure closes `c`, named as the loop names it.
    static IoOutcome exchange_here(const IoNode& node, Conn& c, IoRequest& req) {
      std::vector<RedisReplyPtr> got;
      const auto fail = [&](RedisFailureKind kind, const std::string& why) {
        c.close_for_good();
        return IoOutcome{
            {}, RedisError(kind, node.address().address() + ": " + why, got.size()), {}};
      };
      // Until `events` on c.fd or the deadline: false once it passed.
      const auto await = [&](short events) {
        for (;;) {
          const auto left = std::chrono::ceil<std::chrono::nanoseconds>(
              req.deadline - std::chrono::steady_clock::now());
          if (left.count() <= 0) return false;
          const timespec ts{static_cast<time_t>(left.count() / 1'000'000'000),
                            static_cast<long>(left.count() % 1'000'000'000)};
          pollfd p{c.fd, events, 0};
          const int n = ::ppoll(&p, 1, &ts, nullptr);
          if (n > 0) return true;
          if (n < 0 && errno != EINTR) return true;  // the call that follows names the error
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

    /// Closes an idle connection that is readable (the server closed it, or sent what nobody
    /// asked for: the loop would close it for either) or failed. True if it did.
    static bool close_if_readable(Conn& c) noexcept {
      pollfd idle{c.fd, POLLIN, 0};
      if (::poll(&idle, 1, 0) == 0) return false;
      c.close_for_good();
      return true;
    }

    /// A caller hands a lent connection back; wakes the loop only if it waits for it (or if
    /// `check`: the connection is dead or must be looked at).
    void give_back(IoNode* node, Conn* c, bool check) noexcept {
      node->parked_.store(c);
      if (check || node->want_back_.load()) waker_->wake();
    }

    /// At the start of a turn in which requests wait for `node`: the lent connection back into
    /// `conns_` if no caller holds it; if one does, the caller giving it back wakes the loop.
    /// Otherwise it stays lent: taking it back on every turn would race the very caller the
    /// turn's completion woke (who then found none lent about every other decision).
    void reclaim(IoNode& node) {
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

    /// At the end of a turn: lends one ready connection of `node` if the node has nothing else
    /// to do (nothing queued or in flight), for a blocking caller alone in flight. Never a TLS
    /// connection, nor one that has not answered yet (its failure would be a connect failure).
    void park(IoNode& node) {
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

    void finish(Pending& p, IoOutcome&& outcome) noexcept {
      if (p.finished) return;
      p.finished = true;
      IoRequest req = std::move(p.req);  // frees its bytes before its deadline entry goes
      p.got.clear();
      complete(req, std::move(outcome));
    }

    /// `finish`, with the completion run at the end of the turn (`run_later`): by then the
    /// loop has lent an idle connection (see `park`), which a blocking caller woken by the
    /// completion finds.
    void finish_later(Pending& p, IoOutcome&& outcome) noexcept {
      if (p.finished) return;
      try {
        later_.emplace_back(std::move(p.req), std::move(outcome));
      } catch (...) {  // out of memory: now, then
        return finish(p, std::move(outcome));
      }
      p.finished = true;
      p.got.clear();
    }

    /// Runs the completions `finish_later` kept, in order.
    void run_later() noexcept {
      running_.swap(later_);
      for (auto& [req, outcome] : running_) complete(req, std::move(outcome));
      running_.clear();
    }

    /// Moves what other threads queued into the loop's own structures. True when stopping.
    bool drain() {
      std::vector<std::shared_ptr<Pending>> requests;
      std::vector<Timer> timers;
      queued_by_loop_ = false;
      // Before looking: a wake-up from now on is seen before the loop sleeps (see Waker).
      waker_->pending.exchange(false);
      {
        std::lock_guard lock(mutex_);
        if (stopping_) return true;
        requests.swap(incoming_);
        timers.swap(incoming_timers_);
        for (std::size_t i = loop_nodes_.size(); i < nodes_.size(); ++i)
          loop_nodes_.push_back(nodes_[i].get());
      }
      for (auto& p : requests) {
        deadlines_.push(Deadline{p->req.deadline, p});
        IoNode* node = p->node;
        node->waiting_.push_back(std::move(p));
      }
      for (Timer& t : timers) {
        t.seq = ++timer_seq_;
        timers_.push(std::move(t));
      }
      return false;
    }

    /// Fails every request whose deadline passed. One on a connection takes the connection
    /// down: its replies are late or lost, and the requests behind it would wait on them too.
    void expire(SteadyTime now) {
      while (!deadlines_.empty()) {
        const Deadline& top = deadlines_.top();
        if (!top.pending->finished && top.at > now) break;
        std::shared_ptr<Pending> p = top.pending;
        deadlines_.pop();
        if (p->finished) continue;
        // Unsent, it would go back to the queue: it fails here either way.
        if (p->conn != nullptr) fail_conn(*p->conn, RedisFailureKind::timeout, "timed out");
        finish(*p, IoOutcome{
                       {},
                       RedisError(RedisFailureKind::timeout,
                                  p->node->address().address() + ": timed out before it was sent"),
                       {}});
      }
    }

    void run_timers(SteadyTime now) {
      while (!timers_.empty() && timers_.top().at <= now) {
        auto fn = std::move(const_cast<Timer&>(timers_.top()).fn);
        timers_.pop();
        try {
          fn();
        } catch (...) {
        }
      }
    }

    /// When the loop must wake up by itself: the next deadline, timer or connect timeout.
    std::optional<SteadyTime> next_wake() {
      std::optional<SteadyTime> at;
      const auto take = [&](SteadyTime t) {
        if (!at || t < *at) at = t;
      };
      while (!deadlines_.empty() && deadlines_.top().pending->finished) deadlines_.pop();
      if (!deadlines_.empty()) take(deadlines_.top().at);
      if (!timers_.empty()) take(timers_.top().at);
      for (IoNode* n : loop_nodes_)
        for (const auto& c : n->conns_)
          if (c->state != Conn::State::ready) take(c->connect_deadline);
      return at;
    }

    /// poll with a nanosecond timeout (ppoll): a deadline is overshot by the kernel's timer
    /// slack (50 us by default), not by a rounded-up millisecond. Before it sleeps, the loop
    /// arms the waker (see Waker).
    void wait(std::vector<pollfd>& fds, std::optional<SteadyTime> until) {
      if (!until || *until > std::chrono::steady_clock::now()) {
        waker_->armed.store(true);
        if (waker_->pending.load()) until = SteadyTime{};  // handed over since drain: no sleep
      }
      timespec ts{};
      timespec* timeout = nullptr;
      if (until) {
        const auto left = std::max(
            std::chrono::nanoseconds{0},
            std::chrono::ceil<std::chrono::nanoseconds>(*until - std::chrono::steady_clock::now()));
        ts.tv_sec = static_cast<time_t>(left.count() / 1'000'000'000);
        ts.tv_nsec = static_cast<long>(left.count() % 1'000'000'000);
        timeout = &ts;
      }
      if (::ppoll(fds.data(), fds.size(), timeout, nullptr) < 0)
        for (auto& f : fds) f.revents = 0;  // EINTR: go round again
      waker_->armed.store(false);
    }

    /// Advances `node`'s connections and puts its waiting requests on ready ones.
    void service(IoNode& node, SteadyTime now) {
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
          busy += c->inflight.empty() ? 0 : 1;
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

    void open(IoNode& node, SteadyTime now) {
      auto c = std::make_unique<Conn>();
      c->node = &node;
      c->connect_deadline = now + node.settings_.connect_timeout;
      if (!c->reader) throw std::bad_alloc();
      Conn& conn = *c;
      node.conns_.push_back(std::move(c));
      resolved(node, conn);
    }

    /// Starts connecting once the node's name is resolved (a result is kept for a minute; a
    /// lookup in flight is shared by every attempt).
    void resolved(IoNode& node, Conn& c) {
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

    /// Tries the next resolved address ("localhost" may be ::1 first and Redis on 127.0.0.1).
    void connect_next(IoNode& node, Conn& c, std::string last_error) {
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

    void handle(Conn& c, short revents) {
      IoNode& node = owner(c);
      if (c.dead) return;
      if (c.state == Conn::State::connecting) {
        if ((revents & (POLLOUT | POLLERR | POLLHUP)) == 0) return;
        std::string error = connect_error(c.fd);
        if (!error.empty()) return connect_next(node, c, std::move(error));
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

    /// Drives the TLS handshake; on success, the Redis handshake follows.
    void secure(IoNode& node, Conn& c) {
      ERR_clear_error();
      const int rc = SSL_connect(c.ssl.get());
      if (rc == 1) return handshake(node, c);
      const int e = SSL_get_error(c.ssl.get(), rc);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        c.tls_want_write = e == SSL_ERROR_WANT_WRITE;
        return;
      }
      fail_conn(c, RedisFailureKind::connect, tls_failure(c.ssl.get(), "handshake"));
    }

    /// AUTH and SELECT before any request.
    void handshake(IoNode& node, Conn& c) {
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

    /// `c` takes requests from now on. The node's first ready connection also asks for its
    /// eviction policy (INFO memory), as an ordinary request queued first: a server that stalls
    /// must not hold the connection's readiness, and a user refused INFO (NOPERM) only skips
    /// the check.
    void ready(IoNode& node, Conn& c) {
      c.state = Conn::State::ready;
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

    static bool has_output(const Conn& c) noexcept {
      return c.handshake_pos < c.handshake.size() || c.write_index < c.inflight.size();
    }

    /// Writes what `c` has queued, straight from each request's bytes (sendmsg over up to 64
    /// of them at once), until the socket would block.
    void flush(IoNode& node, Conn& c) {
      if (c.ssl) return flush_tls(node, c);
      while (has_output(c)) {
        iovec parts[64];
        std::size_t count = 0;
        if (c.handshake_pos < c.handshake.size()) {
          parts[count++] = {c.handshake.data() + c.handshake_pos,
                            c.handshake.size() - c.handshake_pos};
        } else {
          std::size_t offset = c.write_offset;
          for (std::size_t i = c.write_index; i < c.inflight.size() && count < 64; ++i) {
            std::string& w = c.inflight[i]->req.wire;
            parts[count++] = {w.data() + offset, w.size() - offset};
            offset = 0;
          }
        }
        msghdr msg{};
        msg.msg_iov = parts;
        msg.msg_iovlen = count;
        const ssize_t n = ::sendmsg(c.fd, &msg, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n < 0)
          return fail_conn(c, RedisFailureKind::io,
                           "connection failed: " + std::string(std::strerror(errno)));
        advance(c, static_cast<std::size_t>(n));
      }
    }

    /// TLS: bytes are staged (up to 64 KiB, what one write hands OpenSSL), then SSL_write. A
    /// staged request counts as sent: it can no longer move to another connection.
    void flush_tls(IoNode& node, Conn& c) {
      (void)node;
      c.tls_want_write = false;
      for (;;) {
        if (c.tls_out.empty()) stage(c, std::size_t{1} << 16);
        if (c.tls_out.empty()) return;
        ERR_clear_error();
        const int n = SSL_write(c.ssl.get(), c.tls_out.data(), static_cast<int>(c.tls_out.size()));
        if (n > 0) {
          c.tls_out.erase(0, static_cast<std::size_t>(n));
          continue;
        }
        const int e = SSL_get_error(c.ssl.get(), n);
        if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
          c.tls_want_write = e == SSL_ERROR_WANT_WRITE;
          return;
        }
        // The peer may have said why it closed (TLS 1.3 refuses a missing client certificate
        // only after the handshake): its alert is read before the failure is named.
        std::string why = tls_failure(c.ssl.get(), "write");
        char byte = 0;
        ERR_clear_error();
        if (SSL_read(c.ssl.get(), &byte, 1) <= 0 && ERR_peek_error() != 0)
          why = tls_failure(c.ssl.get(), "write");
        return fail_conn(c, RedisFailureKind::io, why);
      }
    }

    /// Copies up to `limit` queued bytes into `c.tls_out`.
    static void stage(Conn& c, std::size_t limit) {
      while (has_output(c) && c.tls_out.size() < limit) {
        std::string_view from;
        if (c.handshake_pos < c.handshake.size()) {
          from = std::string_view(c.handshake).substr(c.handshake_pos);
        } else {
          from = std::string_view(c.inflight[c.write_index]->req.wire).substr(c.write_offset);
        }
        from = from.substr(0, limit - c.tls_out.size());
        c.tls_out.append(from);
        advance(c, from.size());
      }
    }

    /// Marks `n` more bytes of `c`'s queue as written.
    static void advance(Conn& c, std::size_t n) noexcept {
      c.sent += n;
      if (c.handshake_pos < c.handshake.size()) {
        c.handshake_pos += n;
        return;
      }
      while (n > 0) {
        const std::size_t left = c.inflight[c.write_index]->req.wire.size() - c.write_offset;
        if (n < left) {
          c.write_offset += n;
          return;
        }
        n -= left;
        ++c.write_index;
        c.write_offset = 0;
      }
    }

    /// Reads what `c` has, at most a few buffers' worth: a server streaming a huge reply must not
    /// keep the loop from its other connections and its deadlines.
    void read(IoNode& node, Conn& c) {
      if (c.ssl && c.tls_want_write) flush_tls(node, c);  // a read may have needed a write
      for (int chunk = 0; chunk < 4 && !c.dead; ++chunk) {
        ssize_t n = 0;
        if (c.ssl) {
          ERR_clear_error();
          const int r = SSL_read(c.ssl.get(), buffer_.data(), static_cast<int>(buffer_.size()));
          if (r <= 0) {
            const int e = SSL_get_error(c.ssl.get(), r);
            if (e == SSL_ERROR_WANT_READ) return;
            if (e == SSL_ERROR_WANT_WRITE) {
              c.tls_want_write = true;
              return;
            }
            return fail_conn(c, RedisFailureKind::io,
                             e == SSL_ERROR_ZERO_RETURN
                                 ? std::string("connection closed by the server")
                                 : tls_failure(c.ssl.get(), "read"));
          }
          n = r;
        } else {
          n = ::recv(c.fd, buffer_.data(), buffer_.size(), 0);
          if (n < 0 && errno == EINTR) continue;
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
          if (n <= 0)
            return fail_conn(c, RedisFailureKind::io,
                             n == 0 ? std::string("connection closed by the server")
                                    : "connection failed: " + std::string(std::strerror(errno)));
        }
        if (redisReaderFeed(c.reader.get(), buffer_.data(), static_cast<std::size_t>(n)) !=
            REDIS_OK)
          return fail_conn(c, RedisFailureKind::io, "out of memory reading a reply");
        for (;;) {
          void* raw = nullptr;
          if (redisReaderGetReply(c.reader.get(), &raw) != REDIS_OK)
            return fail_conn(c, RedisFailureKind::io,
                             "protocol error: " + std::string(c.reader->errstr));
          if (raw == nullptr) break;
          deliver(node, c, RedisReplyPtr(static_cast<redisReply*>(raw)));
          if (c.dead) return;
        }
        if (static_cast<std::size_t>(n) < buffer_.size()) return;
      }
    }

    void deliver(IoNode& node, Conn& c, RedisReplyPtr reply) {
      (void)node;
      c.answered = true;
      if (c.handshake_left > 0) {
        if (reply->type == REDIS_REPLY_ERROR)
          return fail_conn(c, RedisFailureKind::connect, std::string(reply->str, reply->len));
        if (--c.handshake_left == 0) ready(node, c);
        return;
      }
      // Redis answers each command as it reads it, so replies to a long request come while its
      // tail is still being written; but none can come before its first byte went out.
      if (c.inflight.empty() || (c.write_index == 0 && c.write_offset == 0))
        return fail_conn(c, RedisFailureKind::io, "a reply nobody asked for");
      Pending& p = *c.inflight.front();
      p.got.push_back(std::move(reply));
      if (!p.finished && p.got.size() < p.req.replies) return;
      if (c.write_index == 0)  // all its replies, yet not all of it written: not Redis
        return fail_conn(c, RedisFailureKind::io, "replies to a request not yet sent");
      std::shared_ptr<Pending> done = std::move(c.inflight.front());
      c.inflight.pop_front();
      --c.write_index;  // its last reply came, so its last byte went out
      finish_later(*done, IoOutcome{std::move(done->got), std::nullopt, {}});
    }

    /// Hands the `maxmemory_policy:` line of an INFO reply to the node's hook.
    static void report_policy(const IoNode& node, const redisReply& reply) {
      if (reply.type != REDIS_REPLY_STRING) return;
      const std::string_view text(reply.str, reply.len);
      constexpr std::string_view field = "maxmemory_policy:";
      const auto at = text.find(field);
      if (at == std::string_view::npos) return;
      const auto start = at + field.size();
      const auto end = text.find_first_of("\r\n", start);
      try {
        node.settings_.on_eviction_policy(node.address(),
                                          std::string(text.substr(start, end - start)));
      } catch (...) {
      }
    }

    /// Closes `c`. Requests it wrote (any byte of) fail with `kind`; requests it never wrote go
    /// back to the front of the node's queue for another connection. If the node has no other
    /// connection, a failure to connect also fails the requests waiting for one.
    void fail_conn(Conn& c, RedisFailureKind kind, const std::string& message) {
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
      const bool others = std::any_of(node.conns_.begin(), node.conns_.end(),
                                      [](const auto& o) { return !o->dead; });
      if (kind == RedisFailureKind::connect && !others) {
        auto waiting = std::move(node.waiting_);
        node.waiting_.clear();
        for (auto& p : waiting) finish(*p, IoOutcome{{}, RedisError(kind, what), {}});
      }
    }

    static IoNode& owner(const Conn& c) noexcept { return *c.node; }

    void shut_down_all() {
      run_later();  // answered before the loop stopped
      std::vector<std::shared_ptr<Pending>> requests;
      {
        std::lock_guard lock(mutex_);
        requests.swap(incoming_);
        for (Timer& t : incoming_timers_) timers_.push(std::move(t));
        incoming_timers_.clear();
        for (std::size_t i = loop_nodes_.size(); i < nodes_.size(); ++i)
          loop_nodes_.push_back(nodes_[i].get());
      }
      for (auto& p : requests) finish(*p, shut_down());
      for (IoNode* n : loop_nodes_) {
        // A lent connection no caller holds closes with the others; one a caller holds stays
        // with the node (closed when the node goes: see ~IoNode).
        if (n->lent_ && n->parked_.exchange(nullptr) != nullptr)
          n->conns_.push_back(std::move(n->lent_));
        for (auto& c : n->conns_) {
          for (auto& p : c->inflight) finish(*p, shut_down());
          if (c->fd >= 0) ::close(c->fd);
        }
        n->conns_.clear();
        for (auto& p : n->waiting_) finish(*p, shut_down());
        n->waiting_.clear();
      }
      // Timers run now: what they submit completes at once, as shut down. What they (or the
      // completions above) post runs too, until nothing more is posted.
      for (;;) {
        {
          std::lock_guard lock(mutex_);
          for (Timer& t : incoming_timers_) timers_.push(std::move(t));
          incoming_timers_.clear();
        }
        if (timers_.empty()) break;
        while (!timers_.empty()) {
          auto fn = std::move(const_cast<Timer&>(timers_.top()).fn);
          timers_.pop();
          try {
            fn();
          } catch (...) {
          }
        }
      }
    }

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
    std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
    std::uint64_t timer_seq_ = 0;
    bool queued_by_loop_ = false;  ///< the I/O thread queued work since its last drain
    std::vector<char> buffer_;
    std::vector<pollfd> fds_;
    std::vector<Conn*> polled_;
    /// Completions of answered requests, run at the end of the turn (see `finish_later`).
    std::vector<std::pair<IoRequest, IoOutcome>> later_, running_;
  };

  std::shared_ptr<Core> core_;
  std::thread thread_;
};

}  // namespace ratelimit::detail
