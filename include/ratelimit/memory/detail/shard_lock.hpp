#pragma once
/// @file memory/detail/shard_lock.hpp
/// The lock of one shard of the in-memory table.

#include <atomic>
#include <cstdint>
#include <thread>

namespace ratelimit::detail {

/// Tells the CPU that this thread spins on a value another core is about to change.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Pauses a decision without a ShardLock (holding a table slot's lock bit or a single state's
/// `busy` word) waits for the lock's holder or for another such decision, before it gives up
/// and queues on the lock; also what a holder of the lock spins for such a decision to leave
/// before it yields.
inline constexpr int decision_spins = 64;

/// One round of a ShardLock holder's wait for a decision without the lock to leave the state it
/// guards: a pause for the first `decision_spins` rounds, then a yield (the decision's thread may
/// have been preempted).
inline void back_off(int round) noexcept {
  round < decision_spins ? cpu_relax() : std::this_thread::yield();
}

/// A mutex for the shards' short critical sections (one decision: tens of ns). Free: one CAS to
/// take it and one exchange to leave it, inline (std::mutex costs two calls into libc on top).
/// Held: a short spin, since the holder is about to leave, then a futex wait through
/// `std::atomic::wait`, so a holder that was preempted costs its waiters no CPU (with more
/// threads than cores, pure spinning would burn the time the holder needs to finish).
/// Every operation is sequentially consistent (on x86 the same instructions as acquire and
/// release): the table's lock-free path relies on it (see Table::enter_fast: a decision that
/// took a slot's lock bit and then sees this lock free, and a holder of this lock that then sees
/// the slot's bit clear, cannot both miss each other).
/// Thread safety: it is the synchronization; satisfies Lockable (lock, try_lock, unlock).
class ShardLock {
 public:
  void lock() noexcept {
    std::uint32_t expected = free_;
    if (!state_.compare_exchange_strong(expected, held_, std::memory_order_seq_cst,
                                        std::memory_order_relaxed))
      lock_contended();
  }

  /// Takes the lock if it is free, without waiting; true if taken.
  bool try_lock() noexcept {
    std::uint32_t expected = free_;
    return state_.compare_exchange_strong(expected, held_, std::memory_order_seq_cst,
                                          std::memory_order_relaxed);
  }

  void unlock() noexcept {
    if (state_.exchange(free_, std::memory_order_seq_cst) == waited_) state_.notify_one();
  }

  /// Whether some thread holds the lock (a sequentially consistent load, see the class comment).
  bool held() const noexcept { return state_.load(std::memory_order_seq_cst) != free_; }

  /// For a decision that goes without the lock: waits up to `decision_spins` pauses while the
  /// lock is held (a holder leaves within tens of ns), rather than queue behind it; true once
  /// it is free, false if it stayed held.
  bool await_free() const noexcept {
    for (int round = 0; held(); ++round) {
      if (round == decision_spins) return false;
      cpu_relax();
    }
    return true;
  }

 private:
  static constexpr std::uint32_t free_ = 0, held_ = 1, waited_ = 2;
  static constexpr int spins_ = 100;

  void lock_contended() noexcept {
    for (int i = 0; i < spins_; ++i) {
      cpu_relax();
      std::uint32_t expected = free_;
      if (state_.load(std::memory_order_relaxed) == free_ &&
          state_.compare_exchange_weak(expected, held_, std::memory_order_seq_cst,
                                       std::memory_order_relaxed))
        return;
    }
    // Mark the lock as waited on, so that the holder's unlock wakes one of us; whoever takes it
    // this way keeps the mark (it cannot know whether others still wait), costing at most one
    // spare wake-up.
    while (state_.exchange(waited_, std::memory_order_seq_cst) != free_)
      state_.wait(waited_, std::memory_order_relaxed);
  }

  std::atomic<std::uint32_t> state_{free_};
};

}  // namespace ratelimit::detail
