#pragma once
/// @file rules_redis.hpp
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

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "redis.hpp"
#include "rules.hpp"

namespace ratelimit {
namespace detail {

/// lua/rules.lua, the driver of the rule-set script (a test checks it matches the file).
inline constexpr std::string_view rules_lua_driver =
    R"lua(-- rules.lua: one rule-set decision (include/ratelimit/rules_redis.hpp), atomically: every limit
-- that matches the request admits it and spends its cost, or none spends anything.
--
-- Not a standalone script: rules_redis.hpp builds the body as lua/prelude.lua, then each
-- algorithm script (lua/<algorithm>.lua) wrapped as `local function algo_<algorithm>(KEYS,
-- ARGV) ... end`, then this driver. Each limit runs its own algorithm's script unchanged, as a
-- dry run (its peek flag set) or for real; real runs of a request that ends denied are undone
-- (DUMP/RESTORE). Redis runs the whole body atomically: no other decision sees the interim.
--
-- KEYS     every limit's keys, in order. A per-client limit's keys carry the client's hash tag;
--          a shared limit's keys carry their own.
-- ARGV[1]  m, the number of limits (>= 1)
-- ARGV[2]  '1': dry runs only (change nothing), '0': decide
-- then per limit: the algorithm (1 token_bucket, 2 leaky_bucket, 3 fixed_window, 4 sliding_log,
--          5 sliding_counter), its number of keys, '1' if its keys are cheap to save (DUMP) or
--          '0' to dry-run it first instead, its number of dry-run and of real arguments, then
--          its dry-run ARGV and its real ARGV, exactly as its own script takes them.
-- Returns  { admitted (0|1), phase (0: denied, every reply reads as a dry run's; 1: admitted,
--            every reply is a real run's), reply_1, ..., reply_m }, reply_i being limit i's own
--            script reply.
-- TTL      each algorithm script sets its keys' TTLs as it does alone.

local algorithms = {
  algo_token_bucket, algo_leaky_bucket, algo_fixed_window, algo_sliding_log, algo_sliding_counter,
}
local m = tonumber(ARGV[1])
local dry_only = ARGV[2] == '1'
local limits = {}
local a, k = 3, 1
for i = 1, m do
  local id, nk, save, nd, nr = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), ARGV[a + 2] == '1',
    tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  a = a + 5
  local keys, dry, real = {}, {}, {}
  for j = 1, nk do keys[j] = KEYS[k]; k = k + 1 end
  for j = 1, nd do dry[j] = ARGV[a]; a = a + 1 end
  for j = 1, nr do real[j] = ARGV[a]; a = a + 1 end
  limits[i] = { run = algorithms[id], keys = keys, save = save, dry = dry, real = real }
end

-- Undo for the real runs of a decision that ends denied: each key's DUMP and PTTL before it ran.
local function snapshot(keys)
  local saved = {}
  for j, key in ipairs(keys) do
    saved[j] = { redis.call('DUMP', key), redis.call('PTTL', key) }
  end
  return saved
end
local function restore(keys, saved)
  for j, key in ipairs(keys) do
    redis.call('DEL', key)
    local dump, ttl = saved[j][1], saved[j][2]
    if dump then redis.call('RESTORE', key, ttl > 0 and ttl or 0, dump) end
  end
end

local replies, admitted, phase = {}, true, 0
if dry_only then
  for i = 1, m do
    replies[i] = limits[i].run(limits[i].keys, limits[i].dry)
    if replies[i][1] ~= 1 then admitted = false end
  end
else
  -- 1. Limits whose keys are costly to save (a sliding log holds up to N entries) dry-run
  --    first; they are committed last (step 3), when nothing can deny any more.
  for i = 1, m do
    if not limits[i].save then
      replies[i] = limits[i].run(limits[i].keys, limits[i].dry)
      if replies[i][1] ~= 1 then admitted = false end
    end
  end
  -- 2. The others run for real, in order, each saved first (DUMP; the last one need not be: a
  --    denial changes nothing). At the first denial those already run are put back exactly as
  --    they were. Admission, the common case, so costs one run per limit and a DUMP per key.
  local saved, last_saved = {}, 0
  for i = 1, m do
    if limits[i].save then last_saved = i end
  end
  local run_so_far = {}
  for i = 1, m do
    if admitted and limits[i].save then
      if i < last_saved then saved[i] = snapshot(limits[i].keys) end
      replies[i] = limits[i].run(limits[i].keys, limits[i].real)
      if replies[i][1] ~= 1 then
        admitted = false
        for j = #run_so_far, 1, -1 do restore(limits[run_so_far[j]].keys, saved[run_so_far[j]]) end
      else
        run_so_far[#run_so_far + 1] = i
      end
    end
  end
  if admitted then
    -- 3. Commit the dry-run limits: they admitted, and nothing they depend on has moved.
    phase = 1
    for i = 1, m do
      if not limits[i].save then
        replies[i] = limits[i].run(limits[i].keys, limits[i].real)
        if replies[i][1] ~= 1 then admitted = false end
      end
    end
  else
    -- A denied request: every limit not yet asked dry-runs, for its reply. Each reply describes
    -- the state before its run, so real runs that were put back read exactly as dry runs.
    for i = 1, m do
      if replies[i] == nil then replies[i] = limits[i].run(limits[i].keys, limits[i].dry) end
    end
  end
end

local out = { admitted and 1 or 0, phase }
for i = 1, m do out[i + 2] = replies[i] end
return out
)lua";

/// SHA-1 (FIPS 180-4) of `data` as 40 lowercase hex digits: the name EVALSHA calls a script by.
/// Used once, for the rule-set script assembled at run time from the algorithm scripts.
inline std::string sha1_hex(std::string_view data) {
  std::uint32_t h[5] = {0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u};
  std::string msg(data);
  const std::uint64_t bits = static_cast<std::uint64_t>(data.size()) * 8;
  msg.push_back(static_cast<char>(0x80));
  while (msg.size() % 64 != 56) msg.push_back('\0');
  for (int i = 7; i >= 0; --i) msg.push_back(static_cast<char>((bits >> (i * 8)) & 0xFF));
  const auto rotl = [](std::uint32_t x, int n) { return (x << n) | (x >> (32 - n)); };
  for (std::size_t block = 0; block < msg.size(); block += 64) {
    std::uint32_t w[80];
    for (int i = 0; i < 16; ++i) {
      const auto* p = reinterpret_cast<const unsigned char*>(msg.data() + block + 4 * i);
      w[i] = (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) |
             (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
    }
    for (int i = 16; i < 80; ++i) w[i] = rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; ++i) {
      std::uint32_t f, k;
      if (i < 20) {
        f = (b & c) | (~b & d);
        k = 0x5A827999u;
      } else if (i < 40) {
        f = b ^ c ^ d;
        k = 0x6ED9EBA1u;
      } else if (i < 60) {
        f = (b & c) | (b & d) | (c & d);
        k = 0x8F1BBCDCu;
      } else {
        f = b ^ c ^ d;
        k = 0xCA62C1D6u;
      }
      const std::uint32_t t = rotl(a, 5) + f + e + k + w[i];
      e = d;
      d = c;
      c = rotl(b, 30);
      b = a;
      a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
  }
  std::string out;
  static constexpr char digits[] = "0123456789abcdef";
  for (const std::uint32_t v : h)
    for (int i = 28; i >= 0; i -= 4) out.push_back(digits[(v >> i) & 0xF]);
  return out;
}

/// The rule-set script: the prelude once, each algorithm script as a local function, then the
/// driver. The prelude is the common start of the five algorithm bodies (each is prelude.lua +
/// <algorithm>.lua); if that cannot be found, each body is wrapped whole (slower: its prelude
/// is rebuilt on every call, but still correct).
class RulesScript {
 public:
  static const RedisScript& get() {
    static const RulesScript instance;
    return instance.script_;
  }

 private:
  RulesScript() {
    const std::array<const RedisScript*, 5> algos = {
        &redis_scripts::token_bucket, &redis_scripts::leaky_bucket, &redis_scripts::fixed_window,
        &redis_scripts::sliding_log, &redis_scripts::sliding_counter};
    std::size_t common = algos[0]->body.size();
    for (const RedisScript* s : algos) {
      std::size_t i = 0;
      while (i < common && i < s->body.size() && s->body[i] == algos[0]->body[i]) ++i;
      common = i;
    }
    const std::string_view head = algos[0]->body.substr(0, common);
    std::size_t prelude = head.rfind('\n');
    prelude = prelude == std::string_view::npos ? 0 : prelude + 1;
    for (const RedisScript* s : algos)
      if (s->body.substr(prelude, 3 + s->name.size() + 4) != "-- " + std::string(s->name) + ".lua")
        prelude = 0;
    body_ = std::string(algos[0]->body.substr(0, prelude));
    for (const RedisScript* s : algos) {
      body_ += "\nlocal function algo_" + std::string(s->name) + "(KEYS, ARGV)\n";
      body_ += s->body.substr(prelude);
      body_ += "\nend\n";
    }
    body_ += rules_lua_driver;
    sha1_ = sha1_hex(body_);
    script_ = RedisScript{"rules", sha1_, body_};
  }

  std::string body_;
  std::string sha1_;
  RedisScript script_{};
};

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
    call.script = &RulesScript::get();
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
