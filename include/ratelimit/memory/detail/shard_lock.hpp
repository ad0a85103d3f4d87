#pragma once
/// @file memory/detail/shard_lock.hpp
/// The lock of one shard of the in-memory table.

#include <atomic>
#include <cstdint>

namespace ratelimit::detail {

/// A mutex for the shards' short critical sections (one decision: tens of ns). Free: one CAS to
/// take it and one exchange to leave it, inline (std::mutex costs two calls into libc on top).
/// Held: a short spin, since the holder is about to leave, then a futex wait through
/// `std::atomic::wait`, so a holder that was preempted costs its waiters no CPU (with more
/// threads than cores, pure spinning would burn the time the holder needs to finish).
/// Thread safety: it is the synchronization; satisfies Lockable (lock, try_lock, unlock).
class ShardLock {
 public:
  void lock() noexcept {
    std::uint32_t expected = free_;
    if (!state_.compare_exchange_strong(expected, held_, std::memory_order_acquire,
                                        std::memory_order_relaxed))
      lock_contended();
  }

  /// Takes the lock if it is free, without waiting; true if taken.
  bool try_lock() noexcept {
    std::uint32_t expected = free_;
    return state_.compare_exchange_strong(expected, held_, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }

  void unlock() noexcept {
    if (state_.exchange(free_, std::memory_order_release) == waited_) state_.notify_one();
  }

 private:
  static constexpr std::uint32_t free_ = 0, held_ = 1, waited_ = 2;
  static constexpr int spins_ = 100;

  static void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  void lock_contended() noexcept {
    for (int i = 0; i < spins_; ++i) {
      relax();
      std::uint32_t expected = free_;
      if (state_.load(std::memory_order_relaxed) == free_ &&
          state_.compare_exchange_weak(expected, held_, std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return;
    }
    // Mark the lock as waited on, so that the holder's unlock wakes one of us; whoever takes it
    // this way keeps the mark (it cannot know whether others still wait), costing at most one
    // spare wake-up.
    while (state_.exchange(waited_, std::memory_order_acquire) != free_)
      state_.wait(waited_, std::memory_order_relaxed);
  }

  std::atomic<std::uint32_t> state_{free_};
};

}  // namespace ratelimit::detail
