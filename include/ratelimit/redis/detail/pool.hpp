#pragma once
/// @file redis/detail/pool.hpp
/// A bounded pool of connections to one Redis node.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "connection.hpp"

namespace ratelimit::detail {

/// At most `max_size` connections to one node, opened lazily (a storage can be built while Redis
/// is down) and handed to one thread at a time.
/// Thread safety: every member is safe from many threads.
class RedisPool {
 public:
  RedisPool(RedisNode node, RedisConnectionSettings settings, std::size_t max_size)
      : node_(std::move(node)), settings_(std::move(settings)), max_size_(max_size) {}

  RedisPool(const RedisPool&) = delete;
  RedisPool& operator=(const RedisPool&) = delete;

  /// A connection on loan; it goes back to the pool when the lease ends, unless `discard`ed
  /// (a connection that failed mid-command is unusable).
  class Lease {
   public:
    Lease(Lease&& o) noexcept
        : pool_(std::exchange(o.pool_, nullptr)),
          conn_(std::move(o.conn_)),
          generation_(o.generation_),
          reused_(o.reused_),
          discard_(o.discard_) {}
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (pool_ != nullptr) pool_->give_back(std::move(*conn_), generation_, discard_);
    }
    RedisConnection& operator*() noexcept { return *conn_; }
    RedisConnection* operator->() noexcept { return &*conn_; }
    /// True if the connection served earlier commands (it may have gone stale since).
    bool reused() const noexcept { return reused_; }
    /// Close the connection instead of returning it.
    void discard() noexcept { discard_ = true; }

   private:
    friend class RedisPool;
    Lease(RedisPool* pool, RedisConnection conn, std::uint64_t generation, bool reused)
        : pool_(pool), conn_(std::move(conn)), generation_(generation), reused_(reused) {}
    RedisPool* pool_;
    std::optional<RedisConnection> conn_;
    std::uint64_t generation_;
    bool reused_;
    bool discard_ = false;
  };

  /// An idle connection, or a new one if fewer than max_size are open, or the first one given
  /// back before `deadline`; a new connection must also connect before it. Throws
  /// RedisError(connect) if a new connection fails, RedisError(pool_exhausted) if none frees
  /// up in time, RedisError(timeout) if the deadline passed before a connection could be
  /// opened (those two are not the node's fault: RedisError::node_fault() is false).
  Lease acquire(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    for (;;) {
      if (!idle_.empty()) {
        RedisConnection c = std::move(idle_.back());
        idle_.pop_back();
        return Lease(this, std::move(c), generation_, true);
      }
      if (open_ < max_size_) break;
      if (available_.wait_until(lock, deadline) == std::cv_status::timeout && idle_.empty() &&
          open_ >= max_size_)
        throw RedisError::not_the_node(RedisFailureKind::pool_exhausted,
                                       node_.address() + ": all " + std::to_string(max_size_) +
                                           " pooled connections stayed busy");
    }
    ++open_;
    const std::uint64_t generation = generation_;
    lock.unlock();
    try {
      if (std::chrono::steady_clock::now() >= deadline)
        throw RedisError::not_the_node(RedisFailureKind::timeout,
                                       node_.address() + ": no time left to open a connection");
      return Lease(this, RedisConnection::open(node_, settings_, deadline), generation, false);
    } catch (...) {
      lock.lock();
      --open_;
      available_.notify_one();
      throw;
    }
  }

  /// Closes every idle connection and marks those on loan for closing: after a node failure
  /// they are most likely dead too, and each would otherwise cost one more failed decision.
  void drop_idle() {
    std::vector<RedisConnection> doomed;
    {
      std::lock_guard lock(mutex_);
      ++generation_;
      open_ -= idle_.size();
      doomed.swap(idle_);
    }
    available_.notify_all();
  }

  const RedisNode& node() const noexcept { return node_; }

 private:
  void give_back(RedisConnection conn, std::uint64_t generation, bool discard) {
    {
      std::lock_guard lock(mutex_);
      if (discard || generation != generation_) {
        --open_;
      } else {
        idle_.push_back(std::move(conn));
      }
    }
    available_.notify_one();
  }

  RedisNode node_;
  RedisConnectionSettings settings_;
  std::size_t max_size_;
  std::mutex mutex_;
  std::condition_variable available_;
  std::vector<RedisConnection> idle_;
  std::size_t open_ = 0;
  std::uint64_t generation_ = 0;
};

}  // namespace ratelimit::detail
