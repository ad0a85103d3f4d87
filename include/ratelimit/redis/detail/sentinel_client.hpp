#pragma once
/// @file redis/detail/sentinel_client.hpp
/// Runs script calls on the primary that Redis Sentinel names for a master: asks the sentinels
/// on first use, and again after the primary fails (connection lost, timeout, -READONLY from a
/// demoted primary), on the I/O thread; decisions never wait for a sentinel longer than their
/// own deadline. Everything per node (breaker, EVALSHA, NOSCRIPT) is RedisClient's.

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../options.hpp"
#include "client.hpp"
#include "cluster_client.hpp"

namespace ratelimit::detail {

/// Thread safety: every member is safe from many threads.
class RedisSentinelClient final : public RedisClient {
 public:
  /// `options.sentinel` names the sentinels and the master (checked by check_redis_options).
  explicit RedisSentinelClient(RedisOptions options) : RedisClient(std::move(options)) {
    RedisConnectionSettings s = data_settings();
    s.username = this->options().sentinel.username;
    s.password = this->options().sentinel.password;
    s.db = 0;
    s.on_eviction_policy = nullptr;  // a sentinel holds no keys
    const auto& list = this->options().sentinel.sentinels;
    for (std::size_t i = 0; i < list.size(); ++i)
      sentinels_.push_back(loop().node(
          parse_redis_node(list[i], "sentinel.sentinels[" + std::to_string(i) + "]"), &s));
  }

  RedisStats stats() const noexcept override {
    RedisStats s = RedisClient::stats();
    RedisNodeClient* p = primary_.load(std::memory_order_acquire);
    s.circuit_open = p != nullptr && p->breaker.is_open();
    return s;
  }

 protected:
  /// The primary known now (nullptr before the sentinels' first answer).
  RedisNodeClient* node_of_every_key() noexcept override {
    return primary_.load(std::memory_order_acquire);
  }

  /// To the known primary; with none yet, the call waits (within its deadline) for the
  /// sentinels' answer.
  void start(const OpPtr& op) override {
    if (RedisNodeClient* p = primary_.load(std::memory_order_acquire)) return send_to(*p, op);
    {
      std::lock_guard lock(parked_mutex_);
      parked_.push_back(op);
    }
    loop().post_at(op->deadline, [this, op] {
      if (unpark(op))
        fail_all(op, {RedisFailureKind::connect, "no sentinel named the primary of \"" +
                                                     options().sentinel.master_name + "\" in time" +
                                                     last_reasons()});
    });
    discover_in_background(std::chrono::nanoseconds{0});
  }

 private:
  void send_to(RedisNodeClient& primary, const OpPtr& op) {
    std::vector<std::size_t> all(op->calls.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    op->outstanding.store(1, std::memory_order_relaxed);
    send(primary, op, std::move(all), false, [this](const OpPtr& o, std::vector<std::size_t>&&) {
      if (primary_failed(*o)) discover_in_background(options().breaker_backoff);
      finish(o);
    });
  }

  /// A failure that may mean the primary moved: the node unreachable or demoted.
  static bool primary_failed(const Op& op) {
    for (const auto& r : op.results) {
      if (!r.failure) continue;
      if (r.failure->kind == RedisFailureKind::connect || r.failure->kind == RedisFailureKind::io ||
          r.failure->kind == RedisFailureKind::timeout ||
          r.failure->kind == RedisFailureKind::circuit_open ||
          r.failure->message.find("READONLY") != std::string::npos)
        return true;
    }
    return false;
  }

  void fail_all(const OpPtr& op, const RedisFailure& f) {
    for (auto& r : op->results) r.failure = f;
    report(f);
    finish(op);
  }

  /// True if `op` was still waiting for the primary (and is now the caller's to finish).
  bool unpark(const OpPtr& op) {
    std::lock_guard lock(parked_mutex_);
    const auto it = std::find(parked_.begin(), parked_.end(), op);
    if (it == parked_.end()) return false;
    parked_.erase(it);
    return true;
  }

  /// Asks the sentinels unless an inquiry is running or one started less than `min_interval`
  /// ago; then sends the calls that waited for it.
  void discover_in_background(std::chrono::nanoseconds min_interval) {
    const std::int64_t now = CircuitBreaker::steady_ns();
    const std::int64_t last = last_discovery_ns_.load(std::memory_order_relaxed);
    if (last != 0 && now - last < min_interval.count() &&
        primary_.load(std::memory_order_acquire) != nullptr)
      return;
    if (discovering_.exchange(true, std::memory_order_acq_rel)) return;
    last_discovery_ns_.store(now, std::memory_order_relaxed);
    ask(0);
  }

  /// Asks sentinel k (then k + 1, ...) for the primary's address, each with its own budget.
  void ask(std::size_t k) {
    if (k == 0) reasons_.clear();
    if (k >= sentinels_.size()) return discovered(nullptr);
    IoRequest req;
    append_command(req.wire,
                   {"SENTINEL", "get-master-addr-by-name", options().sentinel.master_name});
    req.replies = 1;
    req.deadline =
        std::chrono::steady_clock::now() + options().connect_timeout + options().command_timeout;
    req.done = [self = shared_from_this(), this, k](IoOutcome&& o) {
      const redisReply* r = o.error ? nullptr : o.replies.front().get();
      if (r != nullptr && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
          r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING) {
        try {
          const RedisNode address =
              parse_redis_node(std::string(r->element[0]->str, r->element[0]->len) + ":" +
                                   std::string(r->element[1]->str, r->element[1]->len),
                               "sentinel reply");
          return discovered(&node(address));
        } catch (const std::invalid_argument&) {  // not an address: ask the next one
        }
      }
      // Why this sentinel did not name it, for the failure's message (a refused password, an
      // unknown master name, no answer).
      // An I/O error names the sentinel itself.
      const std::string why =
          o.error        ? std::string(o.error->what())
          : r == nullptr ? options().sentinel.sentinels[k] + ": no reply"
          : r->type == REDIS_REPLY_ERROR
              ? options().sentinel.sentinels[k] + ": " + std::string(r->str, r->len)
          : r->type == REDIS_REPLY_NIL ? options().sentinel.sentinels[k] + ": does not monitor it"
                                       : options().sentinel.sentinels[k] + ": an unexpected reply";
      reasons_ += (reasons_.empty() ? "" : "; ") + why;
      ask(k + 1);
    };
    loop().submit(sentinels_[k], std::move(req));
  }

  /// The inquiry's result (null: no sentinel knew): route there, and send what waited.
  void discovered(RedisNodeClient* primary) {
    if (primary != nullptr) primary_.store(primary, std::memory_order_release);
    {
      std::lock_guard lock(reasons_mutex_);
      last_reasons_ = primary != nullptr ? std::string() : reasons_;
    }
    std::vector<OpPtr> waiting;
    {
      std::lock_guard lock(parked_mutex_);
      waiting.swap(parked_);
    }
    discovering_.store(false, std::memory_order_release);
    for (auto& op : waiting) {
      if (primary != nullptr)
        send_to(*primary, op);
      else
        fail_all(op, {RedisFailureKind::connect, "no sentinel named the primary of \"" +
                                                     options().sentinel.master_name + "\"" +
                                                     last_reasons()});
    }
  }

  /// The node client of `address`, created on first sight (never removed: pointers stay valid).
  RedisNodeClient& node(const RedisNode& address) {
    std::lock_guard lock(nodes_mutex_);
    for (const auto& n : primaries_)
      if (n->address() == address) return *n;
    primaries_.push_back(
        std::make_unique<RedisNodeClient>(loop().node(address), options().breaker_backoff,
                                          options().breaker_max_backoff, probe_budget()));
    return *primaries_.back();
  }

  /// " (why each sentinel did not name the primary)" of the last inquiry that found none.
  std::string last_reasons() const {
    std::lock_guard lock(reasons_mutex_);
    return last_reasons_.empty() ? std::string() : " (" + last_reasons_ + ")";
  }

  std::vector<IoNode*> sentinels_;
  std::string reasons_;  ///< the running inquiry's (one at a time: `discovering_`)
  mutable std::mutex reasons_mutex_;
  std::string last_reasons_;  ///< guarded by reasons_mutex_
  std::atomic<RedisNodeClient*> primary_{nullptr};
  std::mutex nodes_mutex_;
  std::vector<std::unique_ptr<RedisNodeClient>> primaries_;
  std::mutex parked_mutex_;
  std::vector<OpPtr> parked_;
  std::atomic<bool> discovering_{false};
  std::atomic<std::int64_t> last_discovery_ns_{0};
};

}  // namespace ratelimit::detail
