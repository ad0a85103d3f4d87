// `decide_all` and `decide_all_async` of a storage that decides one key at a time (the regional
// and the leased storages): their bounds are per key, so a rule set's all-or-nothing over
// several keys is refused, and one part is that part's own decision.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../core/decision.hpp"
#include "../../core/detail/validate.hpp"

namespace ratelimit::detail {

/// Refuses more than one part (`storage` names the storage in the error) or an `out` too short.
template <class Part>
void check_one_key(std::span<const Part> parts, std::size_t out_size, std::string_view storage) {
  if (parts.size() > 1)
    invalid("decide_all: parts (count)", static_cast<std::int64_t>(parts.size()),
            "a " + std::string(storage) + " decides one key at a time");
  if (out_size < parts.size())
    invalid("decide_all: out (size)", static_cast<std::int64_t>(out_size),
            "must hold one decision per part");
}

/// The part's decision into out[0]; true if it admitted (or there is no part).
template <class Part>
bool decide_one_key(std::span<const Part> parts, std::chrono::nanoseconds now,
                    std::span<Decision> out, std::string_view storage) {
  check_one_key(parts, out.size(), storage);
  if (parts.empty()) return true;
  out[0] = parts[0].apply(parts[0].binding, parts[0].key, now, parts[0].op);
  return out[0].allowed;
}

/// `done(decisions, all_admitted)` exactly once, as the part's `apply_async` completes (at once
/// when there is no part); an exception from `done` is swallowed (see core/completion.hpp).
template <class Part>
void decide_one_key_async(std::span<const Part> parts, std::chrono::nanoseconds now,
                          std::function<void(std::vector<Decision>&&, bool)> done,
                          std::string_view storage) {
  check_one_key(parts, parts.size(), storage);
  if (parts.empty()) {
    std::vector<Decision> none;
    try {
      done(std::move(none), true);
    } catch (...) {  // see core/completion.hpp
    }
    return;
  }
  parts[0].apply_async(parts[0].binding, parts[0].key, now, parts[0].op,
                       [done = std::move(done)](Decision d) {
                         const bool all = d.allowed;
                         std::vector<Decision> ds{d};
                         try {
                           done(std::move(ds), all);
                         } catch (...) {  // see core/completion.hpp
                         }
                       });
}

}  // namespace ratelimit::detail
