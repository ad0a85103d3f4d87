#pragma once
/// @file redis/detail/client_warm.hpp
/// The Redis client's cold start (members of RedisClient, redis/detail/client.hpp): the warm-up's
/// SCRIPT LOAD on every node decisions go to, remembered per node, and the storage's first
/// decision told to the listeners. Include client.hpp.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "client.hpp"

namespace ratelimit::detail {

inline void RedisClient::first_decision(const Op& op) noexcept {
  const bool decision = std::any_of(op.calls.begin(), op.calls.end(),
                                    [](const RedisCall& c) { return c.script != nullptr; });
  if (!decision || first_reported_.exchange(true, std::memory_order_relaxed)) return;
  const auto now = std::chrono::steady_clock::now();
  const FirstDecisionEvent ev{
      now - created_, now - (op.deadline - options_.command_timeout),
      std::none_of(op.results.begin(), op.results.end(),
                   [](const RedisResult& r) { return r.failure.has_value(); })};
  if (const ObserverSet* obs = observers.current())
    Observers::each(*obs, [&](Listener& l, bool) { l.on_first_decision(ev); });
}

inline bool RedisClient::load_scripts(const std::vector<const RedisScript*>& scripts,
                                      std::chrono::steady_clock::time_point deadline) {
  std::vector<RedisCall> calls;
  for (const RedisScript* s : scripts) calls.push_back(load_call(*s));
  const auto results = execute(std::move(calls), deadline);
  RedisNodeClient* node = node_of_every_key();
  bool ok = true;
  for (std::size_t i = 0; i < results.size(); ++i) {
    ok = ok && !results[i].failure;
    if (!results[i].failure && node != nullptr) node->scripts.learned(*scripts[i]);
  }
  return ok;
}

inline bool RedisClient::load_on(const std::vector<RedisNodeClient*>& nodes,
                                 const std::vector<const RedisScript*>& scripts,
                                 std::chrono::steady_clock::time_point deadline) {
  if (nodes.empty()) return false;
  auto op = std::make_shared<Op>();
  op->client = shared_from_this();
  op->deadline = deadline;
  for (std::size_t k = 0; k < nodes.size(); ++k)
    for (const RedisScript* s : scripts) op->calls.push_back(load_call(*s));
  op->results.resize(op->calls.size());
  auto done = std::make_shared<OneShot>();
  op->outstanding.store(nodes.size(), std::memory_order_relaxed);
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    std::vector<std::size_t> indexes(scripts.size());
    for (std::size_t i = 0; i < scripts.size(); ++i) indexes[i] = k * scripts.size() + i;
    send(*nodes[k], op, std::move(indexes), false, [done](const OpPtr& o, auto&&) {
      if (o->outstanding.fetch_sub(1, std::memory_order_acq_rel) == 1) done->notify();
    });
  }
  done->wait();
  bool ok = true;
  for (std::size_t k = 0; k < nodes.size(); ++k)
    for (std::size_t i = 0; i < scripts.size(); ++i) {
      const bool loaded = !op->results[k * scripts.size() + i].failure;
      ok = ok && loaded;
      if (loaded) nodes[k]->scripts.learned(*scripts[i]);
    }
  return ok;
}

}  // namespace ratelimit::detail
