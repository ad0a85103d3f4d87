#pragma once
/// @file over_limit_cache.hpp
/// LOCAL_CACHE_SIZE_IN_BYTES: counters known to be over their limit until their window ends
/// (the reference's local cache, a freecache of that size: src/limiter/base_limiter.go).

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "counters.hpp"

namespace ratelimit::server {

/// Bounded: an entry is charged its key's size plus 64 bytes; when full, expired entries are
/// dropped, and if that frees nothing the new entry is not remembered (the storage still
/// decides it). Thread safety: every member is safe from many threads.
class OverLimitCache {
 public:
  /// At most about `bytes` bytes of entries.
  explicit OverLimitCache(std::size_t bytes) : budget_(bytes) {}

  /// Whether `hit`'s counter in the window of `now_s` (seconds since the epoch) is known over.
  bool over(const Hit& hit, std::int64_t now_s) const;
  /// Remembers `hit`'s counter as over its limit until its window (of `now_s`) ends.
  void remember(const Hit& hit, std::int64_t now_s);

 private:
  static std::string key_of(const Hit& hit, std::int64_t now_s);
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::int64_t> until_;  ///< key -> end of its window (s)
  std::size_t budget_;
  std::size_t used_ = 0;
};

}  // namespace ratelimit::server
