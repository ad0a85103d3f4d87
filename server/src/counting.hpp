#pragma once
/// @file counting.hpp
/// The second step of a call: its hits counted on the storage by one of three strategies, each
/// asynchronous (the blocking call waits on it). Each fills `Call::decisions` (one per hit)
/// and calls `done(nullptr)`, or `done(error)` when the storage fails, exactly once, on the
/// storage's I/O thread or before it returns.
///
/// - `count_each`: the reference's default (src/redis/fixed_cache_impl.go, DoLimit): every
///   descriptor counted by its hits, over its limit or not; with the over-limit cache, a
///   counter known over is not sent.
/// - the same with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT (getHitsAddend): see
///   `ServiceSettings::stop_increment_when_over`.
/// - `count_all_or_nothing` (ours): the library's rule-set rounds (rules/detail/rounds.hpp)
///   over the storage's all-or-nothing `count_all`.

#include <exception>
#include <functional>
#include <memory>

#include "call.hpp"
#include "counters.hpp"
#include "over_limit_cache.hpp"

namespace ratelimit::server {

/// Called once when the hits are counted (nullptr) or the storage failed.
using Counted = std::function<void(std::exception_ptr)>;

/// The reference's counting, with `cache` (may be null) and its stop-increment option.
void count_each(std::shared_ptr<Counters> counters, OverLimitCache* cache, bool stop_increment,
                std::shared_ptr<Call> call, Counted done);

/// All or nothing: counted only if every enforced hit is admitted, else nothing is counted
/// (`Call::counted` false). A blocked descriptor (a library algorithm's limit of 0) and a
/// locked-out one deny without the storage. Two descriptors on one counter are merged into one
/// hit first.
void count_all_or_nothing(std::shared_ptr<Counters> counters, std::shared_ptr<Call> call,
                          Counted done);

/// Lockouts, before counting (`Rule::block_duration`, the library's `Lockout`): the lock of
/// every descriptor of a rule with one is peeked (one `count_async` for the call; none when no
/// rule of the call has a lockout); a descriptor found locked out is decided as the lock's
/// denial (`PlannedDescriptor::locked`, remaining 0, waiting the lock's time left) and its hit
/// is dropped: nothing is counted for it. `done(error)` when the storage fails.
void check_locks(std::shared_ptr<Counters> counters, std::shared_ptr<Call> call, Counted done);

/// Lockouts, after counting: each descriptor of a rule with a lockout whose hits (> 0) its
/// limit denied takes its lock (one `count_async` for the call): locked for the block duration
/// from the call's time, or, if a racing call took it first, for what is left of that lock
/// (never extended); `PlannedDescriptor::lock_wait` says which. A storage failing here leaves
/// the counters unlocked and the call answered: `done(nullptr)` always.
void take_locks(std::shared_ptr<Counters> counters, std::shared_ptr<Call> call, Counted done);

}  // namespace ratelimit::server
