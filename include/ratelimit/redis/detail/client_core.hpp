#pragma once
/// @file redis/detail/client_core.hpp
/// The Redis client's class (`RedisClient`) and its cold start (the warm-up's SCRIPT LOAD, the
/// first decision told to the listeners); include client.hpp, which adds the definitions of its
/// per-node step (client_send.hpp). Runs script calls on Redis: node routing, pooled
/// connections, EVALSHA with the NOSCRIPT reload, the circuit breaker, failure accounting.
/// Shared by every copy of a RedisStorage.

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../core/listener.hpp"
#include "../options.hpp"
#include "breaker.hpp"
#include "call.hpp"
#include "connection.hpp"
#include "io_loop.hpp"
#include "keys.hpp"
#include "script.hpp"
#include "waiter.hpp"

namespace ratelimit::detail {

/// Thread safety: every member is safe from many threads.
///
/// Threads: one I/O thread per client (redis/detail/io_loop.hpp) does every socket operation;
/// `execute_async` returns at once and its completion runs on that thread, or on the calling
/// thread before `execute_async` returns when no request is sent (circuit open, backpressure,
/// deadline already spent). `execute` is `execute_async` plus a wait; when it begins as the only
/// decision in flight, a single node's client lets its calling thread make the round trip
/// itself on a connection the I/O thread lends (RedisIoLoop::round_trip_here), completing there.
///
/// The cluster hook: `start` (how calls are routed), `stats`, `routes_by_key`, `retry_in_key`
/// and `node_of_every_key` are virtual and the per-node step (`send`) and counters are
/// protected, so detail::RedisClusterClient routes calls by slot and reuses the rest;
/// `keep_error` lets it receive MOVED/ASK/TRYAGAIN replies as replies to follow instead of
/// failures. A single node overrides nothing.
///
/// Lifetime: must be owned by a std::shared_ptr (a call in flight holds one, so the client and
/// its I/O thread outlive every call they have accepted).
class RedisClient : public std::enable_shared_from_this<RedisClient> {
  /// Owns `observers`, shared with the connections' hook (see `data_settings`): the I/O
  /// thread may outlive the client by a turn when the last handle is dropped inside one of
  /// its completions.
  std::shared_ptr<Observers> observers_holder_ = std::make_shared<Observers>();

 public:
  /// The storage's listeners (RedisStorage::attach_listener): errors, breaker changes, round
  /// trips, over-limit cache hits, new connections, the first decision.
  Observers& observers = *observers_holder_;

  /// What a call's completion receives: one result per call, in order.
  using Completion = std::function<void(std::vector<RedisResult>&&)>;

  virtual ~RedisClient() = default;

  explicit RedisClient(RedisOptions options)
      : options_((check_redis_options(options), std::move(options))),
        margin_ms_(std::to_string(options_.ttl_margin.count())),
        loop_(std::make_unique<RedisIoLoop>(data_settings(), options_.pool_size)) {
    const RedisNode address = options_.unix_socket.empty() ? RedisNode{options_.host, options_.port}
                                                           : RedisNode{options_.unix_socket, 0};
    nodes_.push_back(
        std::make_unique<RedisNodeClient>(loop_->node(address), options_.breaker_backoff,
                                          options_.breaker_max_backoff, probe_budget()));
  }

  const RedisOptions& options() const noexcept { return options_; }
  const std::string& margin_ms() const noexcept { return margin_ms_; }

  /// Cold start: connects (TLS, AUTH, SELECT included) to every node decisions go to and loads
  /// `scripts` there (SCRIPT LOAD), so that the first decision is one round trip and sends no
  /// script body. Within connect_timeout + command_timeout (a cluster: learning its slot map
  /// first, each node asked within the same); never throws for Redis failures (they are
  /// reported and counted like a decision's, and the breaker hears of them). True if every
  /// node loaded every script. From an I/O thread (a completion) it cannot wait: false.
  bool warm_up(const std::vector<const RedisScript*>& scripts) {
    if (on_io_thread || scripts.empty()) return false;
    const auto deadline =
        std::chrono::steady_clock::now() + options_.connect_timeout + options_.command_timeout;
    return load_scripts(scripts, deadline);
  }

  /// A decision's deadline, taken when it starts: one command_timeout from now. Everything it
  /// does after (building its keys and arguments, queueing, connect, every partial write and
  /// read, a script reload, redirections) counts against it.
  std::chrono::steady_clock::time_point deadline_from_now() const noexcept {
    return std::chrono::steady_clock::now() + options_.command_timeout;
  }

  /// Runs `calls` (each routed by its first key) in one pipelined request per node and hands
  /// `done` one result per call, in order, all by `deadline` (the decision's or batch's: see
  /// `deadline_from_now`) plus the timer's slack. Never throws for Redis failures: failures are
  /// results. `done` runs exactly once (see the class comment for the thread).
  void execute_async(std::vector<RedisCall> calls, std::chrono::steady_clock::time_point deadline,
                     Completion done) {
    deferred_here([&] { begin(std::move(calls), deadline, std::move(done)); });
  }

  /// `execute_async` of the one call `make_call()` builds, built only if it may be sent: when
  /// the breaker refuses it before any key is built (see `refused_unbuilt`), `done` gets that
  /// failure and `make_call` is never called. Building it out of memory is a failure too, as
  /// formatting it is (`begin`): `done` runs exactly once, whatever happens. `held`: bytes
  /// `done` holds beyond a copy of the call's keys (a client key longer than its Redis key),
  /// counted against `max_in_flight_bytes` with the call.
  template <class MakeCall>
  void execute_one_async(MakeCall&& make_call, std::chrono::steady_clock::time_point deadline,
                         Completion done, std::size_t held = 0) {
    deferred_here([&] {
      std::vector<RedisCall> calls;
      if (auto unsent = build_one(make_call, calls); !unsent.empty())
        return hand_over(done, std::move(unsent));
      begin(std::move(calls), deadline, std::move(done), false, held);
    });
  }

  /// `execute` of the one call `make_call()` builds, built only if it may be sent (as
  /// `execute_one_async`).
  template <class MakeCall>
  std::vector<RedisResult> execute_one(MakeCall&& make_call,
                                       std::chrono::steady_clock::time_point deadline) {
    std::vector<RedisCall> calls;
    if (auto unsent = build_one(make_call, calls); !unsent.empty()) return unsent;
    return execute(std::move(calls), deadline);
  }

  /// Runs `fn` on the I/O thread's next turn (a continuation that must not nest in the caller's
  /// stack: one started from a completion).
  void post(std::function<void()> fn) {
    loop_->post_at(std::chrono::steady_clock::now(), std::move(fn));
  }

  /// `execute_async` and a wait for its results. On an I/O thread (inside a completion of any
  /// storage) it could wait on itself: there every call fails at once instead (not the node's
  /// fault).
  std::vector<RedisResult> execute(std::vector<RedisCall> calls,
                                   std::chrono::steady_clock::time_point deadline) {
    if (on_io_thread) {
      std::vector<RedisResult> results(calls.size());
      const RedisFailure f{RedisFailureKind::io,
                           "a blocking decision inside a completion would wait on the I/O "
                           "thread itself: use the non-blocking call there"};
      for (auto& r : results) r.failure = f;
      report(f);
      return results;
    }
    struct Waiter {
      OneShot done;
      std::vector<RedisResult> results;
    };
    // Shared: the completion may still be inside notify when the waiting thread returns.
    auto w = std::make_shared<Waiter>();
    begin(
        std::move(calls), deadline,
        [w](std::vector<RedisResult>&& r) {
          w->results = std::move(r);
          w->done.notify();
        },
        true);
    w->done.wait();
    return std::move(w->results);
  }

  /// Reports a failure found while reading a reply (protocol errors).
  void report(const RedisFailure& f) {
    failures_.fetch_add(1, std::memory_order_relaxed);
    notify(f);
  }

  void count_degraded() noexcept { degraded_.fetch_add(1, std::memory_order_relaxed); }
  void count_decision() noexcept { decisions_.fetch_add(1, std::memory_order_relaxed); }

  virtual RedisStats stats() const noexcept {
    RedisStats s;
    s.decisions = decisions_.load(std::memory_order_relaxed);
    s.degraded_decisions = degraded_.load(std::memory_order_relaxed);
    s.failures = failures_.load(std::memory_order_relaxed);
    s.short_circuits = short_circuits_.load(std::memory_order_relaxed);
    s.script_loads = script_loads_.load(std::memory_order_relaxed);
    s.in_flight = in_flight_.load(std::memory_order_relaxed);
    s.overloaded = overloaded_.load(std::memory_order_relaxed);
    for (const auto& n : nodes_) s.circuit_open = s.circuit_open || n->breaker.is_open();
    return s;
  }

  /// How long until the node owning the Redis key that `make_key()` builds is tried again (0 if
  /// it is not being avoided). The key is built only where it picks the node (a cluster): with a
  /// client's multi-MiB key, a degraded decision must not build it twice.
  template <class MakeKey>
  std::chrono::nanoseconds retry_in(MakeKey&& make_key) {
    if (routes_by_key()) return retry_in_key(make_key());
    const RedisNodeClient* node = node_of_every_key();
    return node != nullptr ? node->breaker.retry_in() : std::chrono::nanoseconds{0};
  }

 protected:
  /// Runs `start_call` (which starts a call), so that a completion it would run at once
  /// (circuit open, backpressure) runs on the loop's next turn instead when this thread is the
  /// loop's (see `hand_over`): a chain of decisions each started by the last one's completion
  /// then never nests one stack frame per decision. (Posting the whole start instead cost two
  /// allocations, a timer and a lock per decision.)
  template <class F>
  void deferred_here(F&& start_call) {
    if (!loop_->on_loop_thread()) return start_call();
    const RedisClient* const outer = deferring_;
    deferring_ = this;
    struct Restore {
      const RedisClient* outer;
      ~Restore() { deferring_ = outer; }
    } restore{outer};
    start_call();
  }

  /// The result of one call that its node's breaker refuses now, as `send` fails it (counted
  /// as a short-circuit), found before the call is built; or nothing when it may be sent, or
  /// when its key picks the node (a cluster: the key must be built first).
  /// Why before building: during an outage nearly every decision is refused, and building its
  /// Redis key first was most of its cost. A client's key can be megabytes: in the
  /// stopped-Redis deadline test, refused 4 MiB-key decisions took the CPU the few that probe
  /// Redis needed to keep their deadline.
  std::vector<RedisResult> refused_unbuilt() {
    RedisNodeClient* node = node_of_every_key();
    if (node == nullptr || node->breaker.retry_in() <= std::chrono::nanoseconds{0}) return {};
    short_circuits_.fetch_add(1, std::memory_order_relaxed);
    std::vector<RedisResult> results(1);
    results.front().failure = refused_by_breaker(*node);
    return results;
  }

  /// Appends the call `make_call()` builds to `calls`, unless it would be refused (then its
  /// result, see `refused_unbuilt`) or building it runs out of memory (then that failure).
  template <class MakeCall>
  std::vector<RedisResult> build_one(MakeCall& make_call, std::vector<RedisCall>& calls) {
    try {
      if (auto refused = refused_unbuilt(); !refused.empty()) return refused;
      calls.push_back(make_call());
      return {};
    } catch (const std::exception& e) {
      std::vector<RedisResult> results(1);
      results.front().failure = cannot_send(e);
      return results;
    }
  }

  /// The failure of a call that could not be built or formatted (out of memory), reported.
  RedisFailure cannot_send(const std::exception& e) {
    RedisFailure f{RedisFailureKind::io, std::string("cannot send: ") + e.what()};
    report(f);
    return f;
  }

  /// The failure of a call that `node`'s breaker refused.
  static RedisFailure refused_by_breaker(const RedisNodeClient& node) {
    return {RedisFailureKind::circuit_open,
            node.address().address() + ": not tried, it failed recently"};
  }

  /// The node every call goes to now, whatever its key; nullptr when the key picks the node (a
  /// cluster) or none is known yet (Sentinel before its first answer).
  virtual RedisNodeClient* node_of_every_key() noexcept {
    return routes_by_key() ? nullptr : nodes_.front().get();
  }

  /// execute_async's work: backpressure (decisions and bytes in flight), then `start`.
  /// `blocking`: for `execute` (its calling thread waits). `held`: see execute_one_async.
  void begin(std::vector<RedisCall> calls, std::chrono::steady_clock::time_point deadline,
             Completion done, bool blocking = false, std::size_t held = 0) {
    if (calls.empty()) return hand_over(done, {});
    // What the decision holds while in flight: its calls, their RESP bytes and the
    // completion's copy of each key, about three times its keys and arguments.
    std::size_t bytes = held;
    for (const auto& c : calls) {
      for (const auto& k : c.keys) bytes += 3 * (k.size() + 16);
      for (const auto& a : c.argv) bytes += 2 * (a.size() + 16);
    }
    const std::size_t before = in_flight_.fetch_add(1, std::memory_order_acq_rel);
    const std::size_t bytes_before = in_flight_bytes_.fetch_add(bytes, std::memory_order_acq_rel);
    if (before >= options_.max_in_flight || bytes_before + bytes > options_.max_in_flight_bytes) {
      in_flight_.fetch_sub(1, std::memory_order_acq_rel);
      in_flight_bytes_.fetch_sub(bytes, std::memory_order_acq_rel);
      std::vector<RedisResult> results(calls.size());
      const RedisFailure f{RedisFailureKind::overloaded,
                           before >= options_.max_in_flight
                               ? std::to_string(options_.max_in_flight) +
                                     " decisions already in flight (max_in_flight)"
                               : std::to_string(bytes_before) + " bytes in flight and " +
                                     std::to_string(bytes) +
                                     " more would pass max_in_flight_bytes (" +
                                     std::to_string(options_.max_in_flight_bytes) + ")"};
      for (auto& r : results) r.failure = f;
      report(f);
      return hand_over(done, std::move(results));
    }
    auto op = std::make_shared<Op>();
    op->client = shared_from_this();
    op->bytes = bytes;
    op->results.resize(calls.size());
    op->calls = std::move(calls);
    op->deadline = deadline;
    op->done = std::move(done);
    op->blocking_alone = blocking && before == 0;
    try {
      start(op);
    } catch (const std::exception& e) {
      // Out of memory formatting it, before anything was sent: a failure, completed once.
      const RedisFailure f = cannot_send(e);
      for (auto& r : op->results) {
        r.reply.reset();
        r.failure = f;
      }
      finish(op);
    }
  }

  /// One `execute_async` call on its way: shared by the requests it sends.
  struct Op {
    std::shared_ptr<RedisClient> client;  ///< keeps the client and its I/O thread alive
    std::vector<RedisCall> calls;
    std::vector<RedisResult> results;
    std::vector<int> rounds;                ///< redirections followed, per call (cluster only)
    std::vector<RedisNodeClient*> targets;  ///< where each call goes next (cluster)
    std::vector<char> asking;               ///< each call's next send needs ASKING (cluster)
    std::chrono::steady_clock::time_point deadline;
    Completion done;
    std::atomic<std::size_t> outstanding{0};  ///< sends whose replies are not settled yet
    std::size_t bytes = 0;                    ///< counted in in_flight_bytes_
    bool blocking_alone = false;  ///< a blocking call, the only decision in flight when it began
    /// Its round trips may run on the calling thread (see RedisIoLoop::round_trip_here): a
    /// single node's client sets it for a blocking call alone in flight.
    bool here = false;
  };
  using OpPtr = std::shared_ptr<Op>;

  /// What the storage's connections to data nodes open with: credentials, TLS, and the
  /// eviction-policy check, which warns once (through on_failure) per storage.
  RedisConnectionSettings data_settings() const {
    RedisConnectionSettings s{options_.connect_timeout,
                              options_.command_timeout,
                              options_.password,
                              options_.db,
                              options_.username,
                              options_.tls,
                              {},
                              {}};
    s.on_connected = [obs = observers_holder_](const RedisNode& node, std::chrono::nanoseconds tcp,
                                               std::chrono::nanoseconds tls,
                                               std::chrono::nanoseconds ready) {
      const ObserverSet* set = obs->current();
      if (set == nullptr) return;
      const std::string address = node.address();
      const ConnectEvent ev{address, tcp, tls, ready};
      Observers::each(*set, [&](Listener& l, bool) { l.on_connect(ev); });
    };
    // Shared, not `this`: the hook may run on the I/O thread while the client is going away.
    auto warned = std::make_shared<std::atomic<bool>>(false);
    s.on_eviction_policy = [warned, hook = options_.on_failure](const RedisNode& node,
                                                                const std::string& policy) {
      if (policy == "noeviction" || warned->exchange(true) || !hook) return;
      hook(RedisFailure{RedisFailureKind::warning,
                        node.address() + ": maxmemory-policy is " + policy +
                            ": Redis may evict the library's keys when memory is full, which "
                            "silently resets their limits; use noeviction (docs/redis.md)"});
    };
    return s;
  }

  /// How long a probe may take: its deadline plus a few ms of timer slack and scheduling.
  std::chrono::nanoseconds probe_budget() const noexcept {
    return options_.command_timeout + std::chrono::milliseconds{5};
  }

  /// True if calls go to different nodes by key (a cluster).
  virtual bool routes_by_key() const noexcept { return false; }

  /// retry_in for a client that routes by key.
  virtual std::chrono::nanoseconds retry_in_key(std::string_view redis_key) noexcept {
    (void)redis_key;
    return nodes_.front()->breaker.retry_in();
  }

  /// Routes `op`'s calls and sends them; `finish(op)` once every result is in.
  virtual void start(const OpPtr& op) {
    std::vector<std::size_t> all(op->calls.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    op->outstanding.store(1, std::memory_order_relaxed);
    op->here = op->blocking_alone;
    send(*nodes_.front(), op, std::move(all), false, [this](const OpPtr& o, auto&&) {
      if (o->outstanding.fetch_sub(1, std::memory_order_acq_rel) == 1) finish(o);
    });
  }

  /// Hands `op`'s results to its completion (once: the caller owns the last outstanding send).
  void finish(const OpPtr& op) {
    if (!first_reported_.load(std::memory_order_relaxed)) first_decision(*op);
    in_flight_.fetch_sub(1, std::memory_order_acq_rel);
    in_flight_bytes_.fetch_sub(op->bytes, std::memory_order_acq_rel);
    auto done = std::move(op->done);
    hand_over(done, std::move(op->results));
  }

  /// Calls `done(results)`; or, inside `execute_async` started on this client's I/O thread (a
  /// completion's next decision), posts it to the loop's next turn: never nested there.
  void hand_over(Completion& done, std::vector<RedisResult>&& results) noexcept {
    if (deferring_ == this) {
      std::shared_ptr<std::pair<Completion, std::vector<RedisResult>>> held;
      try {
        held = std::make_shared<std::pair<Completion, std::vector<RedisResult>>>(
            std::move(done), std::move(results));
        loop_->post_at(std::chrono::steady_clock::now(),
                       [held] { call_safely(held->first, std::move(held->second)); });
        return;
      } catch (...) {  // out of memory: nested once rather than never called
        if (held) return call_safely(held->first, std::move(held->second));
      }
    }
    call_safely(done, std::move(results));
  }

  static void call_safely(const Completion& done, std::vector<RedisResult>&& results) noexcept {
    try {
      done(std::move(results));
    } catch (...) {  // a completion has nowhere to throw to
    }
  }

  /// Tells the listeners about the storage's first decision (the first call that runs a
  /// script), once. Its start is its deadline less command_timeout (`deadline_from_now`).
  void first_decision(const Op& op) noexcept;

  /// `warm_up`'s work: SCRIPT LOAD of `scripts` where every call goes (one node, or the
  /// primary Sentinel names), remembered on that node. A cluster loads them on every primary.
  /// Declared inline here, not only where it is defined: the first virtual function declared
  /// without `inline` is the class's key function, and g++ then emits the vtable, and every
  /// function it reaches, in each translation unit that includes this header (that doubled the
  /// compile time of `#include <ratelimit/redis.hpp>`).
  virtual inline bool load_scripts(const std::vector<const RedisScript*>& scripts,
                                   std::chrono::steady_clock::time_point deadline);

  /// SCRIPT LOAD of every script of `scripts` on each of `nodes`, pipelined per node, all
  /// nodes at once, by `deadline`; each node remembers what it loaded. True if all loaded.
  bool load_on(const std::vector<RedisNodeClient*>& nodes,
               const std::vector<const RedisScript*>& scripts,
               std::chrono::steady_clock::time_point deadline);

  /// SCRIPT LOAD of `s` (a plain command: it caches the script without running it).
  static RedisCall load_call(const RedisScript& s) {
    return RedisCall{nullptr, {}, {"SCRIPT", "LOAD", s.body}};
  }

  /// What `send` calls when the calls it sent are settled: their indexes.
  using Settled = std::function<void(const OpPtr&, std::vector<std::size_t>&&)>;

  /// True: an error reply the caller follows itself (a cluster's redirections), returned as the
  /// result's reply without counting a failure or touching the breaker.
  virtual bool keep_error(const redisReply&) const noexcept { return false; }

  /// The bytes `append_call` appends for `call` (to reserve them first).
  static std::size_t call_bytes(const RedisCall& call, bool full_script) noexcept {
    std::size_t args = call.argv.size();
    std::size_t bytes = 0;
    for (const auto& a : call.argv) bytes += resp_argument_bytes(a.size());
    if (call.script != nullptr) {
      args += 3 + call.keys.size();
      bytes += full_script ? resp_argument_bytes(4) + resp_argument_bytes(call.script->body.size())
                           : resp_argument_bytes(7) + resp_argument_bytes(call.script->sha1.size());
      bytes += resp_argument_bytes(decimal_digits(call.keys.size()));
      for (const auto& k : call.keys) bytes += resp_argument_bytes(k.size());
    }
    return resp_header_bytes(args) + bytes;
  }

  /// Appends `call` to `wire` as EVALSHA (or, `full_script`, EVAL) or as its plain command,
  /// formatted straight from the call's strings (no copy of its arguments).
  static void append_call(std::string& wire, const RedisCall& call, bool full_script) {
    thread_local std::vector<const char*> argv;
    thread_local std::vector<std::size_t> lens;
    argv.clear();
    lens.clear();
    const auto add = [](std::string_view a) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    };
    if (call.script == nullptr) {
      for (const auto& a : call.argv) add(a);
      return append_argv(wire, argv, lens);
    }
    const std::string count = std::to_string(call.keys.size());
    add(full_script ? "EVAL" : "EVALSHA");
    add(full_script ? call.script->body : call.script->sha1);
    add(count);
    for (const auto& k : call.keys) add(k);
    for (const auto& a : call.argv) add(a);
    append_argv(wire, argv, lens);
  }

  static bool starts_with(const redisReply& r, std::string_view prefix) noexcept {
    return r.type == REDIS_REPLY_ERROR &&
           std::string_view(r.str, r.len).substr(0, prefix.size()) == prefix;
  }

  /// Error replies that mean the node cannot serve now, not that this key is wrong.
  static bool node_unavailable(const redisReply& r) noexcept {
    for (const std::string_view p :
         {"LOADING", "BUSY", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "NOAUTH"})
      if (starts_with(r, p)) return true;
    return false;
  }

  /// Sends `op->calls[indexes]` to `node` as one pipelined request (each as ASKING + EVAL when
  /// `asking`), then settles their results (a NOSCRIPT reload first, within the same deadline)
  /// and calls `then` on the I/O thread; or, when nothing is sent (breaker open, no time
  /// left), fails them and calls `then` here.
  void send(RedisNodeClient& node, const OpPtr& op, std::vector<std::size_t> indexes, bool asking,
            Settled then);

  /// `send`'s replies: failures, a NOSCRIPT reload, then the breaker's verdict.
  void received(RedisNodeClient& node, const OpPtr& op, std::vector<std::size_t> indexes,
                const std::vector<std::size_t>& ends, bool asking, CircuitBreaker::Pass pass,
                IoOutcome&& o, Settled then);

  /// Files each reply as its call's result and tells the breaker how the node did.
  void settle(RedisNodeClient& node, const OpPtr& op, std::vector<std::size_t> indexes,
              std::vector<RedisReplyPtr> replies, CircuitBreaker::Pass pass, Settled then);

  /// Records a node's failure on its breaker, telling the listeners if that opened it.
  void breaker_failure(RedisNodeClient& node, CircuitBreaker::Pass pass) {
    if (node.breaker.record_failure(pass)) breaker_changed(node, true);
  }
  /// Records a node's success on its breaker, telling the listeners if that closed it.
  void breaker_success(RedisNodeClient& node) {
    if (node.breaker.record_success()) breaker_changed(node, false);
  }
  void breaker_changed(RedisNodeClient& node, bool open) {
    const ObserverSet* obs = observers.current();
    if (obs == nullptr) return;
    const std::string address = node.address().address();
    Observers::each(*obs, [&](Listener& l, bool) { l.on_breaker_change({address, open}); });
  }

  void notify(const RedisFailure& f) noexcept {
    if (f.kind == RedisFailureKind::overloaded) overloaded_.fetch_add(1, std::memory_order_relaxed);
    if (const ObserverSet* obs = observers.current()) {
      const StorageErrorEvent ev{failure_kind_name(f.kind), f.message};
      Observers::each(*obs, [&](Listener& l, bool) { l.on_storage_error(ev); });
    }
    if (!options_.on_failure) return;
    try {
      options_.on_failure(f);
    } catch (...) {  // a monitoring hook must not change the decision
    }
  }

  RedisIoLoop& loop() noexcept { return *loop_; }

  RedisOptions options_;
  std::string margin_ms_;
  std::vector<std::unique_ptr<RedisNodeClient>> nodes_;
  std::atomic<std::uint64_t> decisions_{0};
  std::atomic<std::uint64_t> degraded_{0};
  std::atomic<std::uint64_t> failures_{0};
  std::atomic<std::uint64_t> short_circuits_{0};
  std::atomic<std::uint64_t> script_loads_{0};
  std::atomic<std::uint64_t> overloaded_{0};
  std::atomic<std::size_t> in_flight_{0};
  std::atomic<std::size_t> in_flight_bytes_{0};
  /// When the client was made, and whether its first decision was reported (first_decision).
  const std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
  std::atomic<bool> first_reported_{false};
  /// The client whose `execute_async` runs on this thread, started from its own completion.
  static inline thread_local const RedisClient* deferring_ = nullptr;

 private:
  // Last: destroyed first, so the I/O thread stops before the nodes it points to go.
  std::unique_ptr<RedisIoLoop> loop_;
};

// --- the cold start: the warm-up's SCRIPT LOAD and the first decision ----------------------

inline void RedisClient::first_decision(const Op& op) noexcept {
  const bool decision = std::any_of(op.calls.begin(), op.calls.end(),
                                    [](const RedisCall& c) { return c.script != nullptr; });
  if (!decision || first_reported_.exchange(true, std::memory_order_relaxed)) return;
  const auto now = std::chrono::steady_clock::now();
  const FirstDecisionEvent ev{
      now - created_, now - (op.deadline - options_.command_timeout),
      std::none_of(op.results.begin(), op.results.end(),
                   [](const RedisResult& r) { return r.failure.has_value(); })};
  if (const ObserverSet* obs = observers.current())
    Observers::each(*obs, [&](Listener& l, bool) { l.on_first_decision(ev); });
}

inline bool RedisClient::load_scripts(const std::vector<const RedisScript*>& scripts,
                                      std::chrono::steady_clock::time_point deadline) {
  std::vector<RedisCall> calls;
  for (const RedisScript* s : scripts) calls.push_back(load_call(*s));
  const auto results = execute(std::move(calls), deadline);
  RedisNodeClient* node = node_of_every_key();
  bool ok = true;
  for (std::size_t i = 0; i < results.size(); ++i) {
    ok = ok && !results[i].failure;
    if (!results[i].failure && node != nullptr) node->scripts.learned(*scripts[i]);
  }
  return ok;
}

inline bool RedisClient::load_on(const std::vector<RedisNodeClient*>& nodes,
                                 const std::vector<const RedisScript*>& scripts,
                                 std::chrono::steady_clock::time_point deadline) {
  if (nodes.empty()) return false;
  auto op = std::make_shared<Op>();
  op->client = shared_from_this();
  op->deadline = deadline;
  for (std::size_t k = 0; k < nodes.size(); ++k)
    for (const RedisScript* s : scripts) op->calls.push_back(load_call(*s));
  op->results.resize(op->calls.size());
  auto done = std::make_shared<OneShot>();
  op->outstanding.store(nodes.size(), std::memory_order_relaxed);
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    std::vector<std::size_t> indexes(scripts.size());
    for (std::size_t i = 0; i < scripts.size(); ++i) indexes[i] = k * scripts.size() + i;
    send(*nodes[k], op, std::move(indexes), false, [done](const OpPtr& o, auto&&) {
      if (o->outstanding.fetch_sub(1, std::memory_order_acq_rel) == 1) done->notify();
    });
  }
  done->wait();
  bool ok = true;
  for (std::size_t k = 0; k < nodes.size(); ++k)
    for (std::size_t i = 0; i < scripts.size(); ++i) {
      const bool loaded = !op->results[k * scripts.size() + i].failure;
      ok = ok && loaded;
      if (loaded) nodes[k]->scripts.learned(*scripts[i]);
    }
  return ok;
}

}  // namespace ratelimit::detail
