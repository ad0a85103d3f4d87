// The decision path both leased bindings share (LeasedBucketBinding, LeasedWindowBinding): try
// the lease and the remembered denials first, else one lease round trip, blocking or not. Each
// binding gives its own parts: `Miss` (what a miss carries to its round trip), `local`, `call`
// and `finish`; this holds only their order, once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../core/completion.hpp"
#include "../../core/decision.hpp"
#include "../../core/detail/validate.hpp"
#include "../../core/storage.hpp"
#include "../detail/client.hpp"
#include "../detail/keys.hpp"
#include "options.hpp"

namespace ratelimit::detail {

/// `apply` and `apply_async` of a leased binding `B` (B befriends it). Thread safety: as B's.
template <class B>
struct LeaseDecide {
  /// From the lease when it answers, else one blocking round trip.
  static Decision apply(const B& b, std::string_view key, std::chrono::nanoseconds now,
                        const Operation& op) {
    check_cost(op.cost);
    now = lease_clamp_time(now);
    typename B::Miss m;
    if (auto d = b.local(key, now, op, m)) return *d;
    auto& client = *b.shared_->client;
    b.shared_->round_trips.fetch_add(1, std::memory_order_relaxed);
    auto r =
        client.execute_one([&] { return b.call(key, now, op, m); }, client.deadline_from_now());
    return b.finish(key, now, op, m, r.front());
  }

  /// From the lease before returning when it answers, else `done` on the client's I/O thread
  /// once the round trip returns (the key copied, the binding's shared state held till then).
  static void apply_async(const B& b, std::string_view key, std::chrono::nanoseconds now,
                          const Operation& op, Completion<Decision> done) {
    check_cost(op.cost);
    now = lease_clamp_time(now);
    typename B::Miss m;
    if (auto d = b.local(key, now, op, m)) {
      complete_safely(done, std::move(*d));
      return;
    }
    auto& client = *b.shared_->client;
    b.shared_->round_trips.fetch_add(1, std::memory_order_relaxed);
    const auto deadline = client.deadline_from_now();
    std::string kept(key);
    const std::size_t held = kept.size() > max_plain_key_bytes ? kept.size() : 0;
    auto finish_here = [binding = b, kept = std::move(kept), now, op, m,
                        done = std::move(done)](std::vector<RedisResult>&& r) {
      complete_safely(done, binding.finish(kept, now, op, m, r.front()));
    };
    client.execute_one_async([&] { return b.call(key, now, op, m); }, deadline,
                             std::move(finish_here), held);
  }
};

}  // namespace ratelimit::detail
