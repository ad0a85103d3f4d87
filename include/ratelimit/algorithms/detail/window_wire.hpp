#pragma once
/// @file algorithms/detail/window_wire.hpp
/// What the window algorithms share on the wire (see core/wire.hpp): their parameters'
/// checks, their fallback share, and (fixed window, sliding counter) their arguments.

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "../../core/detail/validate.hpp"
#include "../../core/storage.hpp"
#include "window.hpp"

namespace ratelimit::detail {

inline void check_window_params(const WindowParams& p) {
  check_count("params.limit", p.limit);
  if (p.window < min_period.count() || p.window > max_period.count())
    invalid("params.window (ns)", p.window,
            "must be in [1 ms, 366 days] = [1000000, 31622400000000000] ns");
}

/// The fixed window's and the sliding counter's parameters, arguments and fallback: one hash
/// per client key; only the script and the reply they decide from differ.
struct WindowWireBase {
  static constexpr std::array<std::string_view, 1> key_suffixes{""};
  static constexpr bool cheap_to_save = true;
  struct BoundArgs {
    std::string window;
    std::string limit;
  };
  static BoundArgs bound_args(const WindowParams& p) {
    check_window_params(p);
    return {std::to_string(p.window), std::to_string(p.limit)};
  }
  static void args(const BoundArgs& f, const WindowParams&, std::string now_us, const Operation& op,
                   const std::string& margin_ms, std::vector<std::string>& out) {
    out.push_back(std::move(now_us));
    out.push_back(f.window);
    out.push_back(std::to_string(op.cost));
    out.push_back(f.limit);
    out.push_back(op.peek ? "1" : "0");
    out.push_back(margin_ms);
  }
  /// limit / divisor (at least 1) per window.
  static WindowParams fallback(const WindowParams& p, std::int64_t divisor) noexcept {
    return {std::max<std::int64_t>(1, p.limit / divisor), p.window};
  }
};

}  // namespace ratelimit::detail
