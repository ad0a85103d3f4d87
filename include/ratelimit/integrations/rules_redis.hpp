#pragma once
/// @file integrations/rules_redis.hpp
/// Rule sets on Redis: every limit that matches a request is decided in one Lua script, so the
/// request is admitted by all of them or spends nothing anywhere, whichever service instance
/// decides it. Include it (with rules.hpp) wherever a `RuleSet<RedisStorage>` is used; link
/// `ratelimit::rules` and `ratelimit::redis`.
///
///     ratelimit::RuleSet<ratelimit::RedisStorage> set(ratelimit::Rules::from_file("rules.yaml"),
///                                                     ratelimit::RedisStorage(options));
///     auto d = set.decide({{"api_key", key}, {"path", "/login"}});
///
/// The script (lua/rules.lua) runs each limit's own algorithm script, unchanged, with the
/// request's real cost: sliding logs as a dry run first (committed last), the others for real
/// after saving their keys (DUMP), restoring them if a later limit denies. A denied request
/// thus leaves no trace, and Redis runs the whole script atomically: no other decision sees the
/// interim state.
/// Decisions then come from the same C++ models as `RedisStorage`'s own (exact, microsecond
/// time), and they equal the in-process rule set's on whole-microsecond times.
///
/// Keys: the Redis storage's encoding (detail/redis_keys.hpp),
/// `<key_prefix>{k<hex(tag)>}:<algorithm>:<hex(rule id)>:<hex(counter key)>[suffix]`, where the
/// tag is the client ("api_key=K") for a per-client rule and the counter key for a shared one.
/// All per-client limits of a request thus share one hash tag (one Redis Cluster slot). A
/// request that also matches a shared limit (one counter for every client, e.g. `path: /login`
/// with its own limit) has keys in two slots: on a single Redis (the supported deployment
/// today) the script is still one atomic unit; on Redis Cluster such a script would be refused
/// (CROSSSLOT), so shared limits there need their own script and lose the all-or-nothing
/// guarantee with respect to the per-client ones.
///
/// Failures: when Redis cannot decide (down, slow, error), each limit gets its binding's failure
/// policy (`degraded = true`): fail_open admits, fail_closed denies; local_fallback decides
/// each limit on its per-instance fallback, one by one (a local denial may follow a local
/// admission of another limit of the same request).

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../redis/storage.hpp"
#include "../rules/rules.hpp"

namespace ratelimit {
namespace detail {

/// What the rule-set backend needs from a `RedisBinding` beyond its public interface: the
/// script call it would make, its model's reading of a reply, and its failure policy. (The
/// one hook in redis.hpp is the friend declaration of this struct.)
struct RedisRuleAccess {
  template <Model M>
  static RedisCall call(const RedisBinding<M>& b, std::string_view key,
                        std::chrono::nanoseconds now, const Operation& op) {
    return b.call(key, now, op);
  }
  template <Model M>
  static Decision degrade(RedisBinding<M>& b, const RedisFailure& f, std::string_view key,
                          std::chrono::nanoseconds now, const Operation& op) {
    return b.degrade(f, key, now, op);
  }
  template <Model M>
  static std::shared_ptr<RedisClient> client(const RedisBinding<M>& b) {
    return b.client_;
  }
};

/// Decides a request's limits on Redis in one script call (see the file comment).
class RedisRuleBackend {
 public:
  RedisRuleBackend(const Rules& rules, RedisStorage& storage) {
    for (const Rule& r : rules.rules()) limits_.push_back(make_limit(r, storage));
  }

  template <Clock C>
  bool decide(const Rules& rules, const std::vector<RuleMatch>& matches, C& clock,
              std::int64_t cost, std::vector<Decision>& out) {
    return run(rules, matches, clock.now(), cost, false, out);
  }

  template <Clock C>
  void peek(const Rules& rules, const std::vector<RuleMatch>& matches, C& clock, std::int64_t cost,
            std::vector<Decision>& out) {
    (void)run(rules, matches, clock.now(), cost, true, out);
  }

 private:
  struct Limit {
    int algorithm = 0;  ///< the driver's algorithm number
    std::function<void(std::string_view tag, std::string_view key, std::chrono::nanoseconds now,
                       const Operation& op, RedisCall& call, std::vector<std::string>& argv)>
        add;
    std::function<std::optional<Decision>(const redisReply&, const Operation&)> read;
    std::function<Decision(const RedisFailure&, std::string_view key, std::chrono::nanoseconds,
                           const Operation&)>
        degrade;
    std::shared_ptr<RedisClient> client;
  };

  template <Model M>
  static Limit limit_of(RedisStorage& storage, const Rule& r, const typename M::Params& params,
                        int algorithm) {
    auto b = std::make_shared<RedisBinding<M>>(storage.template bind<M>(r.id, params));
    Limit l;
    l.algorithm = algorithm;
    l.client = RedisRuleAccess::client(*b);
    const std::string tail = redis_key_tail(M::name, r.id) + ":";
    l.add = [b, tail](std::string_view tag, std::string_view key, std::chrono::nanoseconds now,
                      const Operation& op, RedisCall& call, std::vector<std::string>& argv) {
      RedisCall own = RedisRuleAccess::call(*b, tag, now, op);
      if (op.peek) {  // keys once per limit: the dry run's (its real run's are the same)
        std::string key_tail = tail;
        append_hex(key_tail, key);
        for (const auto suffix : RedisModel<M>::key_suffixes)
          call.keys.push_back(
              redis_key(RedisRuleAccess::client(*b)->options().key_prefix, tag, key_tail, suffix));
      }
      argv.push_back(std::to_string(own.argv.size()));
      argv.insert(argv.end(), std::make_move_iterator(own.argv.begin()),
                  std::make_move_iterator(own.argv.end()));
    };
    l.read = [b](const redisReply& reply, const Operation& op) {
      return RedisModel<M>::decide(b->params(), reply, op);
    };
    l.degrade = [b](const RedisFailure& f, std::string_view key, std::chrono::nanoseconds now,
                    const Operation& op) { return RedisRuleAccess::degrade(*b, f, key, now, op); };
    return l;
  }

  static Limit make_limit(const Rule& r, RedisStorage& storage) {
    if (r.blocks()) return {};
    switch (r.algorithm) {
      case Algorithm::token_bucket:
        return limit_of<TokenBucketModel>(storage, r,
                                          TokenBucketModel::make_params({r.rate.count, r.rate}), 1);
      case Algorithm::leaky_bucket:
        return limit_of<LeakyBucketModel>(storage, r,
                                          LeakyBucketModel::make_params({r.rate.count, r.rate}), 2);
      case Algorithm::fixed_window:
        return limit_of<FixedWindowModel>(storage, r, make_window_params(r.rate), 3);
      case Algorithm::sliding_log:
        return limit_of<SlidingLogModel>(storage, r, make_window_params(r.rate), 4);
      case Algorithm::sliding_counter:
        break;
    }
    return limit_of<SlidingCounterModel>(storage, r, make_window_params(r.rate), 5);
  }

  static std::optional<std::int64_t> int_at(const redisReply& r, std::size_t i) {
    if (r.type != REDIS_REPLY_ARRAY || i >= r.elements || r.element[i]->type != REDIS_REPLY_INTEGER)
      return std::nullopt;
    return r.element[i]->integer;
  }

  bool run(const Rules& rules, const std::vector<RuleMatch>& matches, std::chrono::nanoseconds now,
           std::int64_t cost, bool dry_only, std::vector<Decision>& out) {
    const Operation dry{cost, true}, real{cost, false};
    std::vector<Limit*> ls;
    for (const RuleMatch& m : matches)
      ls.push_back(&limits_[static_cast<std::size_t>(m.rule - rules.rules().data())]);
    // The tag: the client for a per-client rule, the counter itself for a shared one.
    const auto tag = [](const RuleMatch& m) -> std::string_view {
      return m.client.empty() ? std::string_view(m.key) : std::string_view(m.client);
    };
    std::vector<RedisCall> calls(1);
    RedisCall& call = calls.front();
    call.script = &redis_scripts::rules;
    call.argv.push_back(std::to_string(matches.size()));
    call.argv.push_back(dry_only ? "1" : "0");
    for (std::size_t i = 0; i < matches.size(); ++i) {
      const std::size_t keys_before = call.keys.size();
      std::vector<std::string> d, r;  // each: its argument count, then the arguments
      ls[i]->add(tag(matches[i]), matches[i].key, now, dry, call, d);
      ls[i]->add(tag(matches[i]), matches[i].key, now, real, call, r);
      call.argv.push_back(std::to_string(ls[i]->algorithm));
      call.argv.push_back(std::to_string(call.keys.size() - keys_before));
      // A sliding log's keys hold up to N entries: DUMPing them costs more than a dry run.
      call.argv.push_back(ls[i]->algorithm == 4 ? "0" : "1");
      call.argv.push_back(d.front());
      call.argv.push_back(r.front());
      call.argv.insert(call.argv.end(), d.begin() + 1, d.end());
      call.argv.insert(call.argv.end(), r.begin() + 1, r.end());
    }
    auto results = ls.front()->client->execute(calls);
    RedisResult& res = results.front();
    out.assign(matches.size(), Decision{});
    const auto degrade_all = [&](const RedisFailure& f) {
      bool all = true;
      for (std::size_t i = 0; i < matches.size(); ++i) {
        out[i] = ls[i]->degrade(f, matches[i].key, now, dry_only ? dry : real);
        all = all && out[i].allowed;
      }
      return all;
    };
    if (res.failure) return degrade_all(*res.failure);
    const redisReply& reply = *res.reply;
    const auto admitted = int_at(reply, 0), phase = int_at(reply, 1);
    if (!admitted || !phase || reply.elements != matches.size() + 2) {
      const RedisFailure f{RedisFailureKind::protocol, "unexpected reply from the rules script"};
      ls.front()->client->report(f);
      return degrade_all(f);
    }
    bool all = true;
    for (std::size_t i = 0; i < matches.size(); ++i) {
      const Operation& op = *phase == 1 ? real : dry;
      if (auto d = ls[i]->read(*reply.element[i + 2], op)) {
        ls[i]->client->count_decision();
        out[i] = *d;
      } else {
        const RedisFailure f{RedisFailureKind::protocol,
                             "unexpected reply for rule \"" + matches[i].rule->name + "\""};
        ls[i]->client->report(f);
        out[i] = ls[i]->degrade(f, matches[i].key, now, op);
      }
      all = all && out[i].allowed;
    }
    return all && *admitted == 1;
  }

  std::vector<Limit> limits_;
};

/// `RuleSet<RedisStorage>` decides through Redis (one script per request).
template <>
struct RuleBackendFor<RedisStorage> {
  using type = RedisRuleBackend;
};

}  // namespace detail
}  // namespace ratelimit
