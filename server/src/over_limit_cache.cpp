#include "over_limit_cache.hpp"

namespace ratelimit::server {

std::string OverLimitCache::key_of(const Hit& h, std::int64_t now_s) {
  // The counter and its window, as the reference's cache key names both.
  std::string key = h.limit_id;
  key += '\0';
  key += h.key;
  key += '\0';
  key += std::to_string(now_s / h.window_s);
  return key;
}

bool OverLimitCache::over(const Hit& hit, std::int64_t now_s) const {
  const std::string key = key_of(hit, now_s);
  const std::lock_guard lock(mutex_);
  const auto it = until_.find(key);
  return it != until_.end() && now_s < it->second;
}

void OverLimitCache::remember(const Hit& hit, std::int64_t now_s) {
  std::string key = key_of(hit, now_s);
  const std::int64_t until_s = (now_s / hit.window_s + 1) * hit.window_s;
  const std::lock_guard lock(mutex_);
  const std::size_t cost = key.size() + 64;
  if (used_ + cost > budget_) {
    for (auto it = until_.begin(); it != until_.end();) {
      if (it->second <= now_s) {
        used_ -= it->first.size() + 64;
        it = until_.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (used_ + cost > budget_) return;
  if (until_.emplace(std::move(key), until_s).second) used_ += cost;
}

}  // namespace ratelimit::server
