#pragma once
/// @file core/completion.hpp
/// How a non-blocking decision hands over its result: a completion, called exactly once.
///
/// Thread rule (every storage and every later background feature follows it): a completion
/// runs on the storage's I/O thread (Redis) or on the calling thread before the call returns
/// (in process, or when Redis is not tried: circuit open, backpressure). It must be quick and
/// must not block (a blocking Redis decision made there is degraded at once, whatever its
/// storage, since I/O threads waiting on each other would deadlock): to continue on your own
/// executor,
/// post from the completion (`[ex](Decision d) { asio::post(ex, [d] { ... }); }`). An
/// exception thrown by a completion is swallowed: there is nowhere to deliver it.

#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

namespace ratelimit {

/// The type-erased completion of a non-blocking call that produces a `T`.
template <class T>
using Completion = std::function<void(T)>;

namespace detail {

/// Wraps any callable taking a `T` (move-only ones too, such as a lambda holding a promise).
template <class T, class F>
Completion<T> make_completion(F&& f) {
  using Fn = std::decay_t<F>;
  if constexpr (std::is_copy_constructible_v<Fn>) {
    return Completion<T>(std::forward<F>(f));
  } else {
    auto held = std::make_shared<Fn>(std::forward<F>(f));
    return [held](T value) { (*held)(std::move(value)); };
  }
}

/// Calls `done(value)`, swallowing what it throws (see the file comment).
template <class T, class F>
void complete_safely(F& done, T&& value) noexcept {
  try {
    done(std::forward<T>(value));
  } catch (...) {
  }
}

}  // namespace detail
}  // namespace ratelimit
