#pragma once
/// @file core/listener.hpp
/// Monitoring hooks: a `Listener` attached to a limiter, a rule set or a Redis storage hears of
/// every decision, storage error, breaker change, over-limit cache hit, round trip, new
/// connection and a storage's first decision. With none attached a
/// decision pays one atomic load (acquire: a plain load on x86-64).

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "decision.hpp"

namespace ratelimit {

/// What a decision came to, for monitoring. Thread safety: a plain value.
enum class Outcome : std::uint8_t {
  allowed,         ///< admitted by the limit
  limited,         ///< denied by the limit (HTTP 429)
  shadow_limited,  ///< the limit denied, but shadow mode admitted it (`Decision::shadow_denied`)
  degraded,        ///< a storage failure policy decided (`Decision::degraded`), either way
  refunded,        ///< units given back (`refund`); the decision is the peek after it
  penalized,       ///< units spent beyond the limit (`penalty`); the decision is the peek after it
  locked_out,      ///< denied because the key is locked out (a limiter's lockout)
};

/// How many outcomes there are (for arrays indexed by `Outcome`).
inline constexpr std::size_t outcome_count = 7;

/// The outcome's lower-case name ("allowed", "limited", "shadow_limited", "degraded",
/// "refunded", "penalized", "locked_out").
constexpr std::string_view to_string(Outcome o) noexcept {
  switch (o) {
    case Outcome::allowed:
      return "allowed";
    case Outcome::limited:
      return "limited";
    case Outcome::shadow_limited:
      return "shadow_limited";
    case Outcome::degraded:
      return "degraded";
    case Outcome::refunded:
      return "refunded";
    case Outcome::penalized:
      return "penalized";
    case Outcome::locked_out:
      return "locked_out";
  }
  return "unknown";
}

/// The outcome a decision reports: degraded first, then shadow_limited, allowed, limited.
constexpr Outcome outcome_of(const Decision& d) noexcept {
  if (d.degraded) return Outcome::degraded;
  if (d.shadow_denied) return Outcome::shadow_limited;
  return d.allowed ? Outcome::allowed : Outcome::limited;
}

/// One decision, as a listener hears it. The views are valid only during the call. The
/// members have no default values (the library sets each; zero-filling the event first costs
/// more than the rest of a notification): value-initialize one you build yourself
/// (`DecisionEvent e{};`). Thread safety: a plain value.
struct DecisionEvent {
  /// The limiter's name, or for a rule set the rule's metric name (the domain and the rule's
  /// path, with the request's values where `detailed_metric` / `value_to_metric` ask for them).
  std::string_view name;
  /// The client: the limiter's key, or a rule's client ("api_key=K"; "" for a shared rule).
  /// Always "" unless the listener was attached with `ListenerOptions::with_keys`.
  std::string_view key;
  Outcome outcome;
  /// Units asked for (>= 1; a rules descriptor's hits).
  std::int64_t cost;
  /// The decision as returned to the caller.
  Decision decision;
  /// The limiter's own time for this decision on the steady clock, measured on about 1 in 64
  /// decisions per thread (two clock reads); negative when not measured (and for non-blocking
  /// calls).
  std::chrono::nanoseconds latency;
};

/// A storage error (RedisFailure): its kind ("connect", "timeout", "io", "reply", "protocol",
/// "circuit_open", "overloaded", "warning") and message. Valid only during the call.
struct StorageErrorEvent {
  std::string_view kind;
  std::string_view message;
};

/// A circuit breaker opened (`open`) or closed for a storage node ("host:port").
struct BreakerEvent {
  std::string_view node;
  bool open = false;
};

/// A denial answered by the over-limit cache without asking Redis (docs/redis.md, "Hot keys").
/// `key` is "" unless the listener was attached with `ListenerOptions::with_keys`.
struct CacheHitEvent {
  std::string_view name;  ///< the binding: its algorithm tag and limiter name (Redis key tail)
  std::string_view key;
};

/// One pipelined request to a storage node and back, answered or not (`ok`).
struct RoundTripEvent {
  std::string_view node;
  std::chrono::nanoseconds latency{0};
  bool ok = true;
};

/// A new connection to a storage node became usable: TCP connected, TLS handshake done (when
/// TLS is on), AUTH/SELECT answered. Times are on the steady clock, from the start of the
/// attempt (name resolution included in `connect`). Cold-start monitoring: a far Redis shows
/// here as a long `connect` and, with TLS, a `tls_handshake` of one more round trip or two.
struct ConnectEvent {
  std::string_view node;                      ///< "host:port", or the Unix socket path
  std::chrono::nanoseconds connect{0};        ///< resolve and TCP connect
  std::chrono::nanoseconds tls_handshake{0};  ///< the TLS handshake alone; 0 without TLS
  std::chrono::nanoseconds ready{0};          ///< the whole: connect, TLS, AUTH/SELECT
};

/// A storage's first decision answered by Redis or failed (`ok`): once per storage (all its
/// copies), the first call that runs a script. `since_start` runs from the storage's
/// construction to its reply (a warm-up in between included); `latency` from the decision's
/// start to its reply: one round trip for a warm or first-EVAL start.
struct FirstDecisionEvent {
  std::chrono::nanoseconds since_start{0};
  std::chrono::nanoseconds latency{0};
  bool ok = true;
};

/// Receives monitoring events. Override what you need; the defaults ignore the event.
///
/// Calls come from the deciding threads (and a Redis storage's I/O thread) at the same time, so
/// an implementation must be thread-safe and quick: it runs inside the decision. What it throws
/// is swallowed (the decision stands). A listener detached while another thread is deciding may
/// still hear from that decision.
class Listener {
 public:
  virtual ~Listener() = default;
  /// A limiter's or rule's decision (not `peek`).
  virtual void on_decision(const DecisionEvent&) {}
  /// A storage failed to decide (the failure policy then decided) or warned.
  virtual void on_storage_error(const StorageErrorEvent&) {}
  /// A storage node's circuit breaker opened or closed.
  virtual void on_breaker_change(const BreakerEvent&) {}
  /// The over-limit cache answered a denial.
  virtual void on_over_limit_cache_hit(const CacheHitEvent&) {}
  /// A storage round trip finished.
  virtual void on_round_trip(const RoundTripEvent&) {}
  /// A new connection to a storage node became usable (from the storage's I/O thread).
  virtual void on_connect(const ConnectEvent&) {}
  /// A storage's first decision finished (once per storage).
  virtual void on_first_decision(const FirstDecisionEvent&) {}
};

/// How a listener is attached. Thread safety: a plain value.
struct ListenerOptions {
  /// Pass client keys in events (`DecisionEvent::key`, `CacheHitEvent::key`). Off by default:
  /// keys may be personal data, and a listener keyed by them must bound its memory.
  bool with_keys = false;
};

namespace detail {

/// One attached listener.
struct ListenerEntry {
  std::shared_ptr<Listener> listener;
  bool with_keys = false;
};

/// An immutable set of listeners and flags, published whole. Owned by shared pointers, so an
/// asynchronous decision's completion, which may outlive the limiter, holds the set itself
/// (`shared_from_this`: one reference count) rather than a copy of it.
struct ObserverSet : std::enable_shared_from_this<ObserverSet> {
  std::vector<ListenerEntry> entries;
  bool shadow = false;  ///< a limiter in shadow mode (see `Limiter::set_shadow_mode`)
};

/// Whether this decision (on this thread) measures its latency: 1 in 64 per thread.
inline bool sample_latency() noexcept {
  thread_local std::uint32_t tick = 0;
  return (++tick & 63u) == 0;
}

/// The attach point of a limiter, rule set or storage: a pointer to the current `ObserverSet`,
/// null when nothing is attached and no flag is set, so the hot path is one atomic load.
///
/// Publishing replaces the set under a mutex; readers never write. A replaced set is kept
/// (not freed) until this object is destroyed, since a decision on another thread may still be
/// reading it: each attach, detach or flag change keeps about 40 B plus 24 B per listener.
/// They are configuration changes, not per-request work.
/// Copies start with the same listeners and flags. Thread safety: every member is safe from
/// many threads.
class Observers {
 public:
  Observers() = default;
  Observers(const Observers& other) { copy_from(other); }
  Observers& operator=(const Observers& other) {
    if (this != &other) copy_from(other);
    return *this;
  }
  ~Observers() = default;

  /// The current set, or null (nothing attached, no flag). One acquire load: on x86-64 the
  /// same plain `mov` as a relaxed one (a relaxed load plus an acquire fence only when
  /// non-null would be as cheap elsewhere, but ThreadSanitizer does not model fences).
  const ObserverSet* current() const noexcept { return head_.load(std::memory_order_acquire); }

  /// Attaches `l` (null is ignored; attaching one listener twice calls it twice).
  void attach(std::shared_ptr<Listener> l, ListenerOptions o) {
    if (!l) return;
    update([&](ObserverSet& s) { s.entries.push_back({std::move(l), o.with_keys}); });
  }

  /// Detaches every attachment of `l`; returns whether it was attached.
  bool detach(const Listener* l) {
    bool found = false;
    update([&](ObserverSet& s) {
      const auto before = s.entries.size();
      std::erase_if(s.entries, [&](const ListenerEntry& e) { return e.listener.get() == l; });
      found = s.entries.size() != before;
    });
    return found;
  }

  void set_shadow(bool on) {
    update([&](ObserverSet& s) { s.shadow = on; });
  }
  bool shadow() const noexcept {
    const ObserverSet* s = current();
    return s != nullptr && s->shadow;
  }

  /// Calls `fn(listener, with_keys)` for each listener of `s`, swallowing what it throws.
  template <class Fn>
  static void each(const ObserverSet& s, Fn&& fn) noexcept {
    for (const ListenerEntry& e : s.entries) {
      try {
        fn(*e.listener, e.with_keys);
      } catch (...) {  // a monitoring hook must not change the decision
      }
    }
  }

  /// Tells every listener of `s` about the decision in `ev` (its `key` field is set per
  /// listener: `key`, or "" for a listener attached without keys).
  static void decision(const ObserverSet& s, DecisionEvent& ev, std::string_view key) noexcept {
    ev.outcome = outcome_of(ev.decision);
    tell(s, ev, key);
  }

  /// The same for a decision `d` named `name` of `cost` units whose outcome is not read from
  /// the decision (a refund, a penalty, a lockout's denial).
  static void decision(const ObserverSet& s, std::string_view name, std::string_view key,
                       std::int64_t cost, const Decision& d, std::chrono::nanoseconds latency,
                       Outcome outcome) noexcept {
    DecisionEvent ev;
    ev.name = name;
    ev.cost = cost;
    ev.decision = d;
    ev.latency = latency;
    ev.outcome = outcome;
    tell(s, ev, key);
  }

  /// Calls every listener's on_decision with `ev` (its key set per listener).
  static void tell(const ObserverSet& s, DecisionEvent& ev, std::string_view key) noexcept {
    for (const ListenerEntry& e : s.entries) {
      ev.key = e.with_keys ? key : std::string_view{};
      try {
        e.listener->on_decision(ev);
      } catch (...) {  // a monitoring hook must not change the decision
      }
    }
  }

  /// The same for a decision `d` named `name` of `cost` units.
  static void decision(const ObserverSet& s, std::string_view name, std::string_view key,
                       std::int64_t cost, const Decision& d,
                       std::chrono::nanoseconds latency) noexcept {
    DecisionEvent ev;
    ev.name = name;
    ev.cost = cost;
    ev.decision = d;
    ev.latency = latency;
    decision(s, ev, key);  // sets key and outcome
  }

 private:
  template <class Edit>
  void update(Edit&& edit) {
    std::lock_guard<std::mutex> lock(mutex_);
    const ObserverSet* cur = head_.load(std::memory_order_relaxed);
    auto next = std::make_shared<ObserverSet>();
    if (cur != nullptr) {
      next->entries = cur->entries;
      next->shadow = cur->shadow;
    }
    edit(*next);
    const ObserverSet* publish = nullptr;
    if (!next->entries.empty() || next->shadow) {
      publish = next.get();
      kept_.push_back(std::move(next));
    }
    head_.store(publish, std::memory_order_release);
  }

  void copy_from(const Observers& other) {
    std::vector<ListenerEntry> entries;
    bool shadow = false;
    {
      std::lock_guard<std::mutex> lock(other.mutex_);
      if (const ObserverSet* s = other.head_.load(std::memory_order_relaxed)) {
        entries = s->entries;
        shadow = s->shadow;
      }
    }
    update([&](ObserverSet& s) {
      s.entries = std::move(entries);
      s.shadow = shadow;
    });
  }

  std::atomic<const ObserverSet*> head_{nullptr};
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<const ObserverSet>> kept_;  ///< every set ever published
};

}  // namespace detail
}  // namespace ratelimit
