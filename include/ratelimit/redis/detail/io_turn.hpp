#pragma once
/// @file redis/detail/io_turn.hpp
/// One turn of the I/O loop: take over what other threads queued, fail what is past its
/// deadline, run the timers, advance the connections, poll; completions; and shutdown.
/// Members of IoLoopCore (redis/detail/io_core.hpp), run on the I/O thread unless said.

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "io_core.hpp"

namespace ratelimit::detail {

inline void IoLoopCore::run() {
  on_io_thread = true;
  loop_thread_.store(std::this_thread::get_id(), std::memory_order_release);
  // Every signal is blocked here (see RedisIoLoop's constructor), SIGPIPE included: OpenSSL writes
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

inline bool IoLoopCore::iterate() {
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
      n->conns_.erase(
          std::remove_if(n->conns_.begin(), n->conns_.end(), [](const auto& c) { return c->dead; }),
          n->conns_.end());
      park(*n);
    }
    run_later();
  }
  return false;
}

inline void IoLoopCore::finish(Pending& p, IoOutcome&& outcome) noexcept {
  if (p.finished) return;
  p.finished = true;
  IoRequest req = std::move(p.req);  // frees its bytes before its deadline entry goes
  p.got.clear();
  complete(req, std::move(outcome));
}

inline void IoLoopCore::finish_later(Pending& p, IoOutcome&& outcome) noexcept {
  if (p.finished) return;
  try {
    later_.emplace_back(std::move(p.req), std::move(outcome));
  } catch (...) {  // out of memory: now, then
    return finish(p, std::move(outcome));
  }
  p.finished = true;
  p.got.clear();
}

inline void IoLoopCore::run_later() noexcept {
  running_.swap(later_);
  for (auto& [req, outcome] : running_) complete(req, std::move(outcome));
  running_.clear();
}

inline bool IoLoopCore::drain() {
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

inline void IoLoopCore::expire(SteadyTime now) {
  while (!deadlines_.empty()) {
    const Deadline& top = deadlines_.top();
    if (!top.pending->finished && top.at > now) break;
    std::shared_ptr<Pending> p = top.pending;
    deadlines_.pop();
    if (p->finished) continue;
    // Unsent, it would go back to the queue: it fails here either way.
    if (p->conn != nullptr) fail_conn(*p->conn, RedisFailureKind::timeout, "timed out");
    finish(*p,
           IoOutcome{{},
                     RedisError(RedisFailureKind::timeout,
                                p->node->address().address() + ": timed out before it was sent"),
                     {}});
  }
}

inline void IoLoopCore::run_timers(SteadyTime now) {
  while (!timers_.empty() && timers_.top().at <= now) {
    auto fn = std::move(const_cast<Timer&>(timers_.top()).fn);
    timers_.pop();
    try {
      fn();
    } catch (...) {
    }
  }
}

inline std::optional<SteadyTime> IoLoopCore::next_wake() {
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

inline void IoLoopCore::wait(std::vector<pollfd>& fds, std::optional<SteadyTime> until) {
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
  const SteadyTime before = std::chrono::steady_clock::now();
  if (::ppoll(fds.data(), fds.size(), timeout, nullptr) < 0)
    for (auto& f : fds) f.revents = 0;  // EINTR: go round again
  waker_->armed.store(false);
  if (until) {
    const SteadyTime after = std::chrono::steady_clock::now();
    if (after - std::max(*until, before) > pause_gap) resumed(after);
  }
}

inline void IoLoopCore::resumed(SteadyTime now) {
  // The process was stopped (SIGSTOP, a frozen VM or container, a long GC-like stall): the
  // deadlines that passed meanwhile were not the server's fault, and a reply may be on its
  // way. Each such request gets one more command timeout from now; one already given it
  // fails at its deadline as before (a server that is down still fails the decision).
  std::vector<Deadline> all;
  all.reserve(deadlines_.size());
  for (; !deadlines_.empty(); deadlines_.pop()) all.push_back(deadlines_.top());
  for (Deadline& d : all) {
    Pending& p = *d.pending;
    if (p.finished || p.resumed || d.at > now) continue;
    p.resumed = true;
    d.at = p.req.deadline = now + p.node->settings_.command_timeout;
  }
  for (Deadline& d : all) deadlines_.push(std::move(d));
  for (IoNode* n : loop_nodes_)
    for (const auto& c : n->conns_)
      if (c->state != Conn::State::ready && c->connect_deadline <= now)
        c->connect_deadline = now + n->settings_.connect_timeout;
  ++pauses_;
}

inline void IoLoopCore::shut_down_all() {
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

}  // namespace ratelimit::detail
