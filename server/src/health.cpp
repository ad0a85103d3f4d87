#include "health.hpp"

#include <string_view>

namespace ratelimit::server {

Health::Health(bool with_config) {
  components_[HealthComponent::redis] = false;
  if (with_config) components_[HealthComponent::config] = false;
  components_[HealthComponent::sigterm] = true;
}

void Health::publish() {
  bool all = true;
  for (const auto& [c, healthy] : components_) all = all && healthy;
  serving_.store(all);
  if (on_change_) on_change_(all);
}

void Health::ok(HealthComponent c) {
  const std::lock_guard lock(mutex_);
  const auto it = components_.find(c);
  if (it == components_.end()) return;
  it->second = true;
  publish();
}

void Health::fail(HealthComponent c) {
  const std::lock_guard lock(mutex_);
  const auto it = components_.find(c);
  if (it == components_.end()) return;
  it->second = false;
  publish();
}

bool Health::healthy(HealthComponent c) const {
  const std::lock_guard lock(mutex_);
  const auto it = components_.find(c);
  return it != components_.end() && it->second;
}

void Health::on_change(std::function<void(bool)> f) {
  const std::lock_guard lock(mutex_);
  on_change_ = std::move(f);
  if (on_change_) on_change_(serving_.load());
}

void StorageHealthListener::on_decision(const DecisionEvent& e) {
  if (next_) next_->on_decision(e);
}
void StorageHealthListener::on_storage_error(const StorageErrorEvent& e) {
  if (e.kind == "connect" || e.kind == "io" || e.kind == "timeout")
    health_->fail(HealthComponent::redis);
  if (next_) next_->on_storage_error(e);
}
void StorageHealthListener::on_breaker_change(const BreakerEvent& e) {
  if (next_) next_->on_breaker_change(e);
}
void StorageHealthListener::on_over_limit_cache_hit(const CacheHitEvent& e) {
  if (next_) next_->on_over_limit_cache_hit(e);
}
void StorageHealthListener::on_round_trip(const RoundTripEvent& e) {
  if (e.ok)
    health_->ok(HealthComponent::redis);
  else
    health_->fail(HealthComponent::redis);
  if (next_) next_->on_round_trip(e);
}
void StorageHealthListener::on_connect(const ConnectEvent& e) {
  health_->ok(HealthComponent::redis);
  if (next_) next_->on_connect(e);
}
void StorageHealthListener::on_first_decision(const FirstDecisionEvent& e) {
  if (next_) next_->on_first_decision(e);
}

}  // namespace ratelimit::server
