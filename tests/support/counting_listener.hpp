#pragma once
/// @file counting_listener.hpp
/// A listener for the monitoring tests: counts decision events per name and outcome,
/// and limited events per key, under a mutex (so it may be called from many threads).

#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include <ratelimit/core/listener.hpp>

namespace rltest {

class CountingListener : public ratelimit::Listener {
 public:
  void on_decision(const ratelimit::DecisionEvent& e) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++by_outcome_[{std::string(e.name), e.outcome}];
    if (e.outcome != ratelimit::Outcome::allowed) ++limited_keys_[std::string(e.key)];
    ++total_;
  }
  void on_storage_error(const ratelimit::StorageErrorEvent& e) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++errors_[std::string(e.kind)];
  }
  void on_breaker_change(const ratelimit::BreakerEvent& e) override {
    std::lock_guard<std::mutex> lock(mutex_);
    (e.open ? opened_ : closed_) += 1;
  }
  void on_over_limit_cache_hit(const ratelimit::CacheHitEvent&) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++cache_hits_;
  }
  void on_round_trip(const ratelimit::RoundTripEvent& e) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++(e.ok ? round_trips_ok_ : round_trips_failed_);
  }

  std::uint64_t count(const std::string& name, ratelimit::Outcome o) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = by_outcome_.find({name, o});
    return it == by_outcome_.end() ? 0 : it->second;
  }
  std::uint64_t limited_key(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = limited_keys_.find(key);
    return it == limited_keys_.end() ? 0 : it->second;
  }
  std::uint64_t errors(const std::string& kind) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = errors_.find(kind);
    return it == errors_.end() ? 0 : it->second;
  }
  std::uint64_t total() const { return read(total_); }
  std::uint64_t opened() const { return read(opened_); }
  std::uint64_t cache_hits() const { return read(cache_hits_); }
  std::uint64_t round_trips_ok() const { return read(round_trips_ok_); }
  std::uint64_t round_trips_failed() const { return read(round_trips_failed_); }

 private:
  std::uint64_t read(const std::uint64_t& field) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return field;
  }

  mutable std::mutex mutex_;
  std::map<std::pair<std::string, ratelimit::Outcome>, std::uint64_t> by_outcome_;
  std::map<std::string, std::uint64_t> limited_keys_, errors_;
  std::uint64_t total_ = 0, opened_ = 0, closed_ = 0, cache_hits_ = 0;
  std::uint64_t round_trips_ok_ = 0, round_trips_failed_ = 0;
};

/// A listener that throws from every hook.
class ThrowingListener : public ratelimit::Listener {
 public:
  void on_decision(const ratelimit::DecisionEvent&) override { throw std::runtime_error("boom"); }
  void on_storage_error(const ratelimit::StorageErrorEvent&) override { throw 42; }
};

}  // namespace rltest
