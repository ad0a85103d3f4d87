#pragma once
/// @file core/wire.hpp
/// What a shared storage (Redis) needs from an algorithm beyond its model: its Lua twin, the
/// arguments of one call, and how to read the script's reply back into a Decision.
///
/// The wire lives with the algorithm (algorithms/), not with the storage: it depends on nothing
/// but strings and integers, so the Redis layer stays generic over every model that has one,
/// and adding an algorithm touches its own files and one line of the registry
/// (algorithms/registry.hpp).

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "clock.hpp"
#include "detail/arith.hpp"
#include "storage.hpp"

namespace ratelimit {

/// A model that a script-running storage can hold.
///
/// Requirements on `M::Wire` (all static, pure, thread-safe):
/// - `lua`: the algorithm's script (lua/<script>.lua embedded in lua/<script>.hpp), run after
///   lua/prelude.lua. It returns two functions (lua/single.lua): `decide(key, ARGV, offset)`
///   reads the one Redis key of a client key, decides from ARGV[offset + 1] on, and returns its
///   reply and whether to write (admitted and not a peek); `write(key, ARGV, offset, reply)`
///   writes the new state. The header comment of each script gives its key, ARGV and reply.
///   Models that share the arithmetic share the script.
/// - `key_tag`: a short name for the algorithm in Redis key names ("tb", "sl", ...), unique
///   per registry, without ':', '{', '}' or '%'.
/// - `BoundArgs bound_args(params)`: validates the parameters for the script's exact range (throws
///   `std::invalid_argument` naming the field) and formats what every call repeats.
/// - `args(bound, params, now_us, op, margin_ms, out)`: appends one call's ARGV; its count is
///   the same for every call of a model.
/// - `decode(params, reply, op)`: the Decision from the script's reply (its integers, exact), or
///   nullopt if the reply cannot come from the script (a protocol error).
/// - `fallback(params, divisor)`: a per-instance share of the limit for `local_fallback`.
/// - optional `needs_client_time` (true): the arguments are computed from the client's time,
///   so a storage deciding on its own clock (Redis's `TimeSource::redis`) refuses it at `bind`.
/// `M::wire_id` (1..255) identifies the algorithm inside a composed script; unique per registry.
/// Optional (`StateWire`): `state(params, reply, op)`, the key's state the reply describes, which
/// lets a storage remember a denial exactly (the over-limit cache,
/// redis/detail/over_limit_cache.hpp).
template <class M>
concept WireModel = Model<M> &&
    requires(const typename M::Params& p, const Operation& op, std::string now_us,
             const std::string& margin, std::vector<std::string>& out,
             std::span<const detail::i128> reply) {
  { M::wire_id } -> std::convertible_to<int>;
  { M::Wire::lua } -> std::convertible_to<std::string_view>;
  { M::Wire::key_tag } -> std::convertible_to<std::string_view>;
  typename M::Wire::BoundArgs;
  { M::Wire::bound_args(p) } -> std::same_as<typename M::Wire::BoundArgs>;
  M::Wire::args(std::declval<const typename M::Wire::BoundArgs&>(), p, now_us, op, margin, out);
  { M::Wire::decode(p, reply, op) } -> std::same_as<std::optional<Decision>>;
  { M::Wire::fallback(p, std::int64_t{1}) } -> std::same_as<typename M::Params>;
};

/// What a script's reply says about the key's state, for a storage that answers later requests
/// from it (the over-limit cache). Exact: for the operations it covers, until `until`,
/// `M::apply(params, copy of state, t, op)` at any t >= `time` decides exactly as the script would
/// on the key as it was, had nothing else happened to the key since.
/// Thread safety: a plain value.
template <class S>
struct WireState {
  S state;                        ///< the state the script decided on, or one deciding alike
  std::chrono::nanoseconds time;  ///< the decision time (the reply's, ns)
  /// true: `state` is the key's whole state, good for any operation; false: only for one of the
  /// reply's cost (the sliding log rebuilds the smallest log that decides that cost alike).
  bool any_cost = true;
  /// Decisions from `state` are exact only before this time (ns).
  std::chrono::nanoseconds until = std::chrono::nanoseconds::max();
};

/// A wire that can also say what state its reply describes (see `WireState`).
template <class M>
concept StateWire = WireModel<M> &&
    requires(const typename M::Params& p, std::span<const detail::i128> reply,
             const Operation& op) {
  { M::Wire::state(p, reply, op) } -> std::same_as<std::optional<WireState<typename M::State>>>;
};

namespace detail {

/// The largest decision time the scripts accept, ns (the clock range).
inline constexpr std::int64_t max_wire_time_ns = max_clock_time.count();

/// The decision time the scripts work in: whole microseconds (floor), clamped to the clock range
/// [0, 2^62 ns], so it stays below 2^53 (exact in a Lua number).
inline std::int64_t wire_time_us(std::chrono::nanoseconds now) noexcept {
  const std::int64_t t = now.count() < 0 ? 0 : now.count();
  return (t > max_wire_time_ns ? max_wire_time_ns : t) / 1000;
}

/// Reply element `i` as the decision time in ns, if it is one a script can return.
inline std::optional<std::int64_t> wire_reply_time_ns(std::span<const i128> r,
                                                      std::size_t i) noexcept {
  if (i >= r.size() || r[i] < 0 || r[i] > max_wire_time_ns / 1000) return std::nullopt;
  return static_cast<std::int64_t>(r[i] * 1000);
}

/// Reply element `i` as the admit bit.
inline std::optional<bool> wire_reply_admitted(std::span<const i128> r, std::size_t i) noexcept {
  if (i >= r.size() || (r[i] != 0 && r[i] != 1)) return std::nullopt;
  return r[i] == 1;
}

}  // namespace detail
}  // namespace ratelimit
