#pragma once
/// @file memory/detail/single_state.hpp
/// The state of a limiter used without a key (the empty key), kept apart from the table's shards.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <type_traits>

#include "../../core/decision.hpp"
#include "../../core/storage.hpp"
#include "shard_lock.hpp"

namespace ratelimit::detail {

/// The empty key's state (a limiter with a single state, used without a key): nothing is
/// hashed, no slot is searched, nothing is swept. It is never dropped (one state, kept exactly
/// even when the clock steps back); it counts as a key from its first admission until `reset`,
/// or a `reclaim` that finds it fresh.
///
/// Decisions once the state counts as a key, for models whose state is trivially copyable, take
/// no lock: a compare-and-swap sets `busy`, the model decides, and a plain store clears it (a
/// lock's release is an atomic exchange, about 5 ns more on x86, as it must see whether to wake
/// a sleeping waiter). Everything else (the first admission, `reset`, `reclaim`, `held`, and
/// `InMemoryStorage::decide_all`, which holds `lock` across several keys) goes under `lock`,
/// with the protocol of the table's slots (Table::enter_fast): a decision takes `busy`, then
/// backs off if `lock` is held; a holder of `lock` waits until `busy` is clear before it reads
/// or writes the state. Both sides are sequentially consistent, so they cannot miss each other.
/// `lock`, `busy` and the state share one cache line: a decision moves one line between threads.
/// Thread safety: every member is safe from many threads, except `apply_locked`, whose caller
/// holds `lock`.
template <Model M>
struct alignas(64) SingleState {
  using State = typename M::State;
  using Params = typename M::Params;

  /// Whether decisions may go without `lock`: for states that are plain words (a sliding log's
  /// entries live on the heap, and its decisions may allocate).
  static constexpr bool lock_free = std::is_trivially_copyable_v<State>;
  mutable ShardLock lock;
  /// Set by a decision without `lock` while it reads and writes `state`.
  std::atomic<std::uint32_t> busy{0};
  /// Whether the state counts as a key (since the first admission after a reset or reclaim).
  /// Written under `lock`; read without it by decisions, which check it again once they hold
  /// `busy` and have seen `lock` free (whose release made the write visible).
  std::atomic<bool> decided{false};
  State state{};
  Params params{};  ///< of the decision that set `decided`: what `reclaim` judges with

  /// Decides at `now`: without `lock` when the state already counts as a key, else under it.
  Decision apply(const Params& p, std::chrono::nanoseconds now, const Operation& op) {
    if constexpr (lock_free) {
      if (decided.load(std::memory_order_relaxed) && enter_unlocked()) {
        // `busy` is cleared once the decision is built, in the caller's return slot: built in a
        // temporary and copied out, its narrow stores stalled the copy's wide loads (store-to-load
        // forwarding fails), about 6 ns a decision.
        const Leave leave{busy};
        return M::apply(p, state, now, op);
      }
    }
    return apply_under_lock(p, now, op);
  }

  /// Decides at `now`; the caller holds `lock`.
  Decision apply_locked(const Params& p, std::chrono::nanoseconds now, const Operation& op) {
    wait_idle();
    Decision d = M::apply(p, state, now, op);
    if (!decided.load(std::memory_order_relaxed) && !op.peek && d.allowed) [[unlikely]] {
      params = p;
      decided.store(true, std::memory_order_relaxed);
    }
    return d;
  }

  /// Puts the state back to fresh; it no longer counts as a key.
  void reset() {
    std::lock_guard guard(lock);
    wait_idle();
    state = State{};
    decided.store(false, std::memory_order_relaxed);
  }

  /// 1 if the state counts as a key, else 0.
  std::size_t held() const {
    std::lock_guard guard(lock);
    return decided.load(std::memory_order_relaxed) ? 1 : 0;
  }

  /// Stops counting the state as a key once it is fresh (the state itself is kept: it is
  /// what makes a clock that steps back decide as before). 1 if it stopped.
  std::size_t reclaim(std::chrono::nanoseconds now) {
    std::lock_guard guard(lock);
    wait_idle();
    if (!decided.load(std::memory_order_relaxed) || M::fresh_at(params, state) > now) return 0;
    decided.store(false, std::memory_order_relaxed);
    return 1;
  }

 private:
  /// `apply` under `lock`. Out of line, so that `apply` stays small enough for the compiler to
  /// inline it into the limiter's decision (with the lock's and busy's waits inline, it did
  /// or did not from one unrelated change to the next: 28 instructions and 3 ns apart).
  [[gnu::noinline]] Decision apply_under_lock(const Params& p, std::chrono::nanoseconds now,
                                              const Operation& op) {
    std::lock_guard guard(lock);
    return apply_locked(p, now, op);
  }

  /// Clears `busy` when it goes out of scope.
  struct Leave {
    std::atomic<std::uint32_t>& busy;
    ~Leave() { busy.store(0, std::memory_order_release); }
  };

  /// Takes `busy` for a decision without `lock`; false, having changed nothing, if `lock` is
  /// held (or taken meanwhile), `busy` stays set, or the state no longer counts as a key: the
  /// caller then decides under `lock`.
  bool enter_unlocked() noexcept {
    if (!lock.await_free()) return false;
    for (int round = 0;; ++round) {
      std::uint32_t idle = 0;
      if (busy.compare_exchange_weak(idle, 1, std::memory_order_seq_cst, std::memory_order_relaxed))
        break;
      if (round == decision_spins) return false;
      cpu_relax();
    }
    if (lock.held() || !decided.load(std::memory_order_relaxed)) {
      busy.store(0, std::memory_order_release);
      return false;
    }
    return true;
  }

  /// For a holder of `lock`: waits until no decision holds `busy` (pauses, then yields: the
  /// decision's thread may have been preempted holding it).
  void wait_idle() const noexcept {
    if constexpr (lock_free)
      for (int round = 0; busy.load(std::memory_order_seq_cst) != 0; ++round) back_off(round);
  }
};

}  // namespace ratelimit::detail
