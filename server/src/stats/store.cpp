#include "stats/store.hpp"

namespace ratelimit::server::stats {

Store::Store(std::shared_ptr<Sink> sink, std::size_t max_counters)
    : sink_(std::move(sink)), max_counters_(max_counters) {}

Store::~Store() { stop(); }

std::atomic<std::uint64_t>* Store::counter(std::string_view name) {
  {
    const std::shared_lock lock(mutex_);
    const auto it = slots_.find(name);
    if (it != slots_.end()) return &it->second->value;
  }
  const std::unique_lock lock(mutex_);
  const auto it = slots_.find(name);
  if (it != slots_.end()) return &it->second->value;
  if (slots_.size() >= max_counters_) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return &overflow_.value;
  }
  return &slots_.emplace(std::string(name), std::make_unique<Slot>()).first->second->value;
}

void Store::timer(std::string_view name, double milliseconds) {
  if (sink_) sink_->timer(name, milliseconds);
}

void Store::flush() {
  const std::lock_guard flush_lock(flush_mutex_);
  // Latch under the shared lock: counting goes on meanwhile (an increase that lands after
  // its counter was read goes with the next flush, as gostats' latch does).
  std::vector<std::pair<const std::string*, std::uint64_t>> due;
  {
    const std::shared_lock lock(mutex_);
    for (auto& [name, slot] : slots_) {
      const std::uint64_t now = slot->value.load(std::memory_order_relaxed);
      if (now != slot->flushed) {
        due.emplace_back(&name, now - slot->flushed);
        slot->flushed = now;
      }
    }
  }
  if (!sink_) return;
  // Names are never erased, so the pointers stay valid without the lock.
  for (const auto& [name, value] : due) sink_->counter(*name, value);
  sink_->flush();
}

void Store::start(std::chrono::milliseconds interval) {
  const std::lock_guard lock(thread_mutex_);
  if (thread_.joinable() || stopped_) return;
  thread_ = std::thread([this, interval] {
    std::unique_lock lock(thread_mutex_);
    while (!wake_.wait_for(lock, interval, [this] { return stopping_; })) {
      lock.unlock();
      flush();
      lock.lock();
    }
  });
}

void Store::stop(std::chrono::milliseconds deadline) {
  {
    const std::lock_guard lock(thread_mutex_);
    if (stopped_) return;
    stopped_ = stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  flush();
  if (sink_) sink_->close(deadline);
}

std::vector<std::pair<std::string, std::uint64_t>> Store::totals() const {
  std::vector<std::pair<std::string, std::uint64_t>> out;
  const std::shared_lock lock(mutex_);
  out.reserve(slots_.size());
  for (const auto& [name, slot] : slots_)
    out.emplace_back(name, slot->value.load(std::memory_order_relaxed));
  return out;
}

}  // namespace ratelimit::server::stats
