/// @file bench/redis_cost.cpp
/// Redis's cost of the library's decisions, beside a plain GCRA script in the same Redis
/// (the Redis-cost benchmark). No Google Benchmark: a fixed workload per run, measured by Redis
/// itself.
///
///     redis_cost --port PORT [--host H] [--rounds 5] [--decisions 20000] [--keys 10000]
///                [--memory-keys 100000] [--only TokenBucket,RuleSet] [--prefix P]
///                [--out FILE.json] [--quick]
///
/// It FLUSHALLs the server: give it a throwaway one (`bench/run --redis-cost` starts one, pins
/// it to one core and writes bench/results/redis_cost.md).
///
/// **CPU** (per scenario, `--rounds` interleaved pairs: library run, plain run, library, ...):
/// each run is FLUSHALL, CONFIG RESETSTAT, then `--decisions` synchronous decisions on one
/// connection over `--keys` client keys `user:N`, each key decided decisions/keys times in a
/// fixed shuffled order (the same order for both sides). The figure is Redis's time inside the
/// script calls (INFO commandstats: usec of EVAL, EVALSHA, their _RO forms, FCALL and FCALL_RO)
/// per decision. Beside it: the usec of the commands the scripts called (commandstats counts
/// every redis.call), redis-server's process CPU (INFO cpu, user + sys: networking and the
/// event loop included) and the client's wall time, per decision.
///
/// **Memory** (per scenario, once): FLUSHALL, INFO memory used_memory, `--memory-keys`
/// decisions on keys `user:0`, `user:1`, ... (one admission each), used_memory again: bytes per
/// client key. Scripts are loaded (a warm-up decision) before the first reading.
///
/// The library side uses only the public API (RedisStorage, the five limiters with
/// SystemClock, RuleSet), so this program measures whatever scripts and key format the library
/// has. Limits are generous and long (per day, per hour) so that every decision is admitted and
/// writes, and no key expires during a run (with 1,000,000/s a key's state would be worth
/// keeping for 1 µs: the plain script's keys would expire between two decisions and the memory
/// run would measure nothing).
///
/// Output: a summary on stdout, and with `--out` the raw runs as JSON (read by bench/report.py).
/// Exit status 1 on bad arguments, an unreachable Redis, or an error reply.

#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>
#if RATELIMIT_BENCH_RULES
#include <ratelimit/rules.hpp>
#endif

namespace {

using ratelimit::RedisStorage;
using ratelimit::SystemClock;

/// The reference, NOT the library: the plain floating-point GCRA script a user would write
/// (one GET, one SET with PX). Times in milliseconds as doubles; state = the theoretical
/// arrival time (TAT) as a decimal string.
///   KEYS[1]  the client's key
///   ARGV[1]  now, ms (a float: microseconds after the point)
///   ARGV[2]  emission interval T, ms per request (period / count)
///   ARGV[3]  burst tolerance tau = (capacity - 1) * T, ms
/// Admit iff max(TAT, now) - now <= tau, then TAT <- max(TAT, now) + T, kept until it equals
/// now again. Returns {1, remaining} or {0, retry after in ms}.
constexpr const char* plain_gcra_script = R"lua(
local now = tonumber(ARGV[1])
local t = tonumber(ARGV[2])
local tau = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local diff = tat - now
if diff > tau then
  return {0, math.ceil(diff - tau)}
end
local new_tat = tat + t
redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil(new_tat - now))
return {1, math.floor((tau - diff) / t)}
)lua";

/// The plain script's limit: capacity 1000 refilled at 1000 per day, as the library's token
/// bucket below. T = 86,400 ms; tau = 999 T.
constexpr const char* plain_interval_ms = "86400";
constexpr const char* plain_tolerance_ms = "86313600";

/// Thrown on an unreachable Redis or an error reply; main reports it and exits 1.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Frees a hiredis reply.
struct ReplyDeleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
/// An owned hiredis reply (never null once returned by Connection::command).
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

/// One synchronous hiredis connection. Thread safety: none (one thread).
class Connection {
 public:
  /// Connects to host:port within 2 s. Throws Failure if it cannot.
  Connection(const std::string& host, int port) {
    const timeval timeout{2, 0};
    ctx_ = redisConnectWithTimeout(host.c_str(), port, timeout);
    if (ctx_ == nullptr || ctx_->err != 0) {
      const std::string why = ctx_ != nullptr ? ctx_->errstr : "out of memory";
      if (ctx_ != nullptr) redisFree(ctx_);
      throw Failure("cannot connect to " + host + ":" + std::to_string(port) + ": " + why);
    }
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() { redisFree(ctx_); }

  /// Sends one command (binary-safe arguments) and returns its reply. Throws Failure on an
  /// I/O error or an error reply.
  Reply command(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    Reply r(static_cast<redisReply*>(
        redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data())));
    if (!r) throw Failure("redis: " + args.front() + ": " + ctx_->errstr);
    if (r->type == REDIS_REPLY_ERROR)
      throw Failure("redis: " + args.front() + ": " + std::string(r->str, r->len));
    return r;
  }

  /// The text of INFO `section`.
  std::string info(const std::string& section) {
    const Reply r = command({"INFO", section});
    return std::string(r->str, r->len);
  }

 private:
  redisContext* ctx_ = nullptr;
};

/// The value of `field` in INFO text ("field:value" lines); empty if absent.
std::string info_field(const std::string& info, const std::string& field) {
  std::istringstream in(info);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.size() > field.size() && line.compare(0, field.size(), field) == 0 &&
        line[field.size()] == ':')
      return line.substr(field.size() + 1);
  }
  return {};
}

/// One command's line of INFO commandstats.
struct CommandStat {
  double calls = 0;  ///< calls since CONFIG RESETSTAT
  double usec = 0;   ///< microseconds spent in them
};

/// INFO commandstats by command name (a subcommand such as "config|resetstat" under its own
/// name).
std::map<std::string, CommandStat> command_stats(Connection& admin) {
  std::map<std::string, CommandStat> out;
  std::istringstream in(admin.info("commandstats"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("cmdstat_", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    CommandStat s;
    std::istringstream fields(line.substr(colon + 1));
    for (std::string kv; std::getline(fields, kv, ',');) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos) continue;
      const std::string k = kv.substr(0, eq);
      if (k == "calls") s.calls = std::atof(kv.c_str() + eq + 1);
      if (k == "usec") s.usec = std::atof(kv.c_str() + eq + 1);
    }
    out[line.substr(8, colon - 8)] = s;
  }
  return out;
}

/// The commands that run a script: their usec is the time inside the script, the commands it
/// called included.
bool is_script_command(std::string_view name) {
  return name == "eval" || name == "evalsha" || name == "eval_ro" || name == "evalsha_ro" ||
         name == "fcall" || name == "fcall_ro";
}

/// Commands this harness or a client's connection setup sends: neither script nor called by a
/// script.
bool is_admin_command(std::string_view name) {
  const std::string_view base = name.substr(0, name.find('|'));
  for (std::string_view a : {"info", "config", "flushall", "flushdb", "dbsize", "ping", "script",
                             "function", "client", "hello", "auth", "select", "command"})
    if (base == a) return true;
  return false;
}

/// redis-server's CPU time so far, seconds (INFO cpu: used_cpu_user + used_cpu_sys).
double process_cpu_seconds(Connection& admin) {
  const std::string info = admin.info("cpu");
  return std::atof(info_field(info, "used_cpu_user").c_str()) +
         std::atof(info_field(info, "used_cpu_sys").c_str());
}

/// INFO memory used_memory, bytes.
double used_memory(Connection& admin) {
  return std::atof(info_field(admin.info("memory"), "used_memory").c_str());
}

/// The number of keys in the database.
long long dbsize(Connection& admin) { return admin.command({"DBSIZE"})->integer; }

/// What one decision came to.
struct Outcome {
  bool allowed = false;
  bool degraded = false;  ///< decided by the library's failure policy, not by Redis
};

/// Decides one request for a client key, on one side (library or plain script).
using Decide = std::function<Outcome(const std::string& key)>;

/// The plain script on its own connection, loaded once with SCRIPT LOAD and called with
/// EVALSHA. Thread safety: none.
class PlainGcra {
 public:
  /// Connects and loads the script. Throws Failure.
  PlainGcra(const std::string& host, int port) : conn_(host, port) {
    const Reply r = conn_.command({"SCRIPT", "LOAD", plain_gcra_script});
    sha_.assign(r->str, r->len);
  }

  /// One decision for `key` at the system clock's time. Throws Failure on an error reply.
  Outcome operator()(const std::string& key) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
    char now[32];
    std::snprintf(now, sizeof now, "%lld.%03lld", static_cast<long long>(us / 1000),
                  static_cast<long long>(us % 1000));
    const Reply r =
        conn_.command({"EVALSHA", sha_, "1", key, now, plain_interval_ms, plain_tolerance_ms});
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) throw Failure("plain script: bad reply");
    return {r->element[0]->integer == 1, false};
  }

 private:
  Connection conn_;
  std::string sha_;
};

/// Where to find Redis and what to run.
struct Options {
  std::string host = "127.0.0.1";  ///< Redis host
  int port = 0;                    ///< Redis port (required)
  int rounds = 5;                  ///< interleaved (library, plain) pairs per scenario, >= 1
  int decisions = 20'000;          ///< decisions per CPU run, a multiple of keys
  int keys = 10'000;               ///< client keys per CPU run
  int memory_keys = 100'000;       ///< client keys of the memory run
  std::string prefix;              ///< RedisOptions::key_prefix for the library
  std::string only;                ///< comma-separated scenario names; empty: all
  std::string out;                 ///< JSON output file; empty: none
};

/// One workload: a library side, how it spreads its decisions, and the Redis-cost goals.
struct Scenario {
  std::string name;                          ///< e.g. "TokenBucket"
  std::string setup;                         ///< the limit, in words
  int keys = 0;                              ///< client keys of a CPU run (0: Options::keys)
  double cpu_goal = 0;                       ///< at most this ratio to the plain script (0: none)
  double memory_goal = 0;                    ///< same for bytes per key (0: none)
  bool memory_run = true;                    ///< run the 100,000-key memory measurement
  std::function<Decide(RedisStorage)> make;  ///< the library side on this storage
};

/// Wraps a limiter (constructed from `config` on `storage`) as a Decide.
template <class Limiter, class Config>
Decide limiter_side(const Config& config, RedisStorage storage) {
  auto limiter = std::make_shared<Limiter>(config, std::move(storage));
  return [limiter](const std::string& key) {
    const ratelimit::Decision d = limiter->try_acquire(key);
    return Outcome{d.allowed, d.degraded};
  };
}

#if RATELIMIT_BENCH_RULES
/// The rule set: one request matches two per-client token-bucket limits (api_key at 1000 per
/// day; plan -> api_key at 100 per hour), decided by one script.
constexpr const char* two_limits_yaml = R"(domain: redis_cost
descriptors:
  - key: api_key
    rate_limit: {unit: day, requests_per_unit: 1000, algorithm: token_bucket, name: daily}
  - key: plan
    descriptors:
      - key: api_key
        rate_limit: {unit: hour, requests_per_unit: 100, algorithm: token_bucket, name: hourly}
)";
#endif

std::vector<Scenario> scenarios() {
  using namespace ratelimit;
  std::vector<Scenario> s;
  s.push_back(
      {"TokenBucket", "capacity 1000, 1000 per day", 0, 1.25, 1.2, true, [](RedisStorage st) {
         return limiter_side<TokenBucket<SystemClock, RedisStorage>>(
             TokenBucketConfig{1000, per_day(1000)}, std::move(st));
       }});
  s.push_back({"LeakyBucket", "queue 1000, 1000 per day", 0, 1.25, 1.2, true, [](RedisStorage st) {
                 return limiter_side<LeakyBucket<SystemClock, RedisStorage>>(
                     LeakyBucketConfig{1000, per_day(1000)}, std::move(st));
               }});
  s.push_back({"FixedWindow", "1000 per day", 0, 1.25, 1.2, true, [](RedisStorage st) {
                 return limiter_side<FixedWindow<SystemClock, RedisStorage>>(per_day(1000),
                                                                             std::move(st));
               }});
  s.push_back({"SlidingCounter", "1000 per day", 0, 1.25, 1.2, true, [](RedisStorage st) {
                 return limiter_side<SlidingCounter<SystemClock, RedisStorage>>(per_day(1000),
                                                                                std::move(st));
               }});
  s.push_back({"SlidingLog", "100 per hour", 0, 2.0, 2.0, true, [](RedisStorage st) {
                 return limiter_side<SlidingLog<SystemClock, RedisStorage>>(per_hour(100),
                                                                            std::move(st));
               }});
  // The same limit with the logs filled: 200 keys decided 100 times each, so a key's log holds
  // 0..99 entries before a decision (49.5 on average) and 100 after its last. No goal of its own.
  s.push_back({"SlidingLogFull", "100 per hour, 200 keys", 200, 0, 0, false, [](RedisStorage st) {
                 return limiter_side<SlidingLog<SystemClock, RedisStorage>>(per_hour(100),
                                                                            std::move(st));
               }});
#if RATELIMIT_BENCH_RULES
  s.push_back({"RuleSet", "two token buckets per request: 1000 per day, 100 per hour", 0, 2.5, 0,
               true, [](RedisStorage st) -> Decide {
                 using Set = RuleSet<RedisStorage, SystemClock>;
                 auto set =
                     std::make_shared<Set>(Rules::from_string(two_limits_yaml), std::move(st));
                 return [set](const std::string& key) {
                   const RuleSetDecision d = set->decide({{"api_key", key}, {"plan", "pro"}});
                   bool degraded = false;
                   for (const auto& o : d.outcomes) degraded = degraded || o.decision.degraded;
                   return Outcome{d.allowed, degraded};
                 };
               }});
#endif
  return s;
}

/// "user:0" .. "user:(n-1)".
std::vector<std::string> user_keys(int n) {
  std::vector<std::string> v;
  v.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v.push_back("user:" + std::to_string(i));
  return v;
}

/// Each of `keys` keys `per_key` times, in a fixed shuffled order.
std::vector<std::size_t> spread(int keys, int per_key) {
  std::vector<std::size_t> order;
  order.reserve(static_cast<std::size_t>(keys) * static_cast<std::size_t>(per_key));
  for (int r = 0; r < per_key; ++r)
    for (int k = 0; k < keys; ++k) order.push_back(static_cast<std::size_t>(k));
  std::mt19937 rng(20261201);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

/// What one run measured (per decision unless said otherwise).
struct Run {
  double script_us = 0;       ///< Redis's time inside script calls (the CPU figure)
  double script_calls = 0;    ///< script calls (1 expected)
  double inner_us = 0;        ///< of script_us: the commands the scripts called
  double inner_calls = 0;     ///< those commands
  double process_cpu_us = 0;  ///< redis-server's user + sys CPU
  double wall_us = 0;         ///< the client's wall time (one round trip, client work included)
  double admitted = 0;        ///< fraction admitted
  long long degraded = 0;     ///< decisions the failure policy made (count; must be 0)
  double bytes_per_key = 0;   ///< used_memory growth over the run / distinct client keys
  long long redis_keys = 0;   ///< DBSIZE after the run
};

/// One measured run: `decide` on keys[order[i]] for every i, on a flushed Redis with reset
/// statistics. `distinct` is the number of distinct keys (for bytes per key).
Run measure(Connection& admin, const Decide& decide, const std::vector<std::string>& keys,
            const std::vector<std::size_t>& order, std::size_t distinct) {
  (void)decide("warmup");  // loads the script if needed, so the run does not pay for it
  admin.command({"FLUSHALL"});
  admin.command({"CONFIG", "RESETSTAT"});
  const double mem0 = used_memory(admin);
  const double cpu0 = process_cpu_seconds(admin);
  long long admitted = 0;
  long long degraded = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::size_t i : order) {
    const Outcome o = decide(keys[i]);
    admitted += o.allowed;
    degraded += o.degraded;
  }
  const auto wall = std::chrono::steady_clock::now() - t0;
  const double cpu1 = process_cpu_seconds(admin);
  const double mem1 = used_memory(admin);
  const double n = static_cast<double>(order.size());
  Run r;
  for (const auto& [name, stat] : command_stats(admin)) {
    if (is_script_command(name)) {
      r.script_us += stat.usec;
      r.script_calls += stat.calls;
    } else if (!is_admin_command(name)) {
      r.inner_us += stat.usec;
      r.inner_calls += stat.calls;
    }
  }
  r.script_us /= n;
  r.script_calls /= n;
  r.inner_us /= n;
  r.inner_calls /= n;
  r.process_cpu_us = (cpu1 - cpu0) * 1e6 / n;
  r.wall_us = std::chrono::duration<double, std::micro>(wall).count() / n;
  r.admitted = static_cast<double>(admitted) / n;
  r.degraded = degraded;
  r.bytes_per_key = (mem1 - mem0) / static_cast<double>(distinct);
  r.redis_keys = dbsize(admin);
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

/// A JSON object of a run's fields.
std::string json(const Run& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"script_us\": %.4f, \"script_calls\": %.4f, \"inner_us\": %.4f, "
                "\"inner_calls\": %.4f, \"process_cpu_us\": %.4f, \"wall_us\": %.4f, "
                "\"admitted\": %.6f, \"degraded\": %lld, \"bytes_per_key\": %.2f, "
                "\"redis_keys\": %lld}",
                r.script_us, r.script_calls, r.inner_us, r.inner_calls, r.process_cpu_us, r.wall_us,
                r.admitted, r.degraded, r.bytes_per_key, r.redis_keys);
  return buf;
}

/// A JSON string literal (the names here need no escaping beyond quotes and backslashes).
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

/// What every run of a scenario measured.
struct ScenarioResult {
  const Scenario* scenario = nullptr;
  std::vector<Run> library;  ///< CPU runs, in the order run
  std::vector<Run> plain;    ///< the plain script's CPU runs, each right after its library run
  Run library_memory;        ///< the memory run (when the scenario has one)
  bool has_memory = false;
};

int usage(const char* why) {
  std::fprintf(stderr,
               "redis_cost: %s\nusage: redis_cost --port PORT [--host H] [--rounds N] "
               "[--decisions N] [--keys N] [--memory-keys N] [--only A,B] [--prefix P] "
               "[--out FILE] [--quick]\n",
               why);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--host") {
        opt.host = value();
      } else if (a == "--port") {
        opt.port = std::stoi(value());
      } else if (a == "--rounds") {
        opt.rounds = std::stoi(value());
      } else if (a == "--decisions") {
        opt.decisions = std::stoi(value());
      } else if (a == "--keys") {
        opt.keys = std::stoi(value());
      } else if (a == "--memory-keys") {
        opt.memory_keys = std::stoi(value());
      } else if (a == "--only") {
        opt.only = "," + value() + ",";
      } else if (a == "--prefix") {
        opt.prefix = value();
      } else if (a == "--out") {
        opt.out = value();
      } else if (a == "--quick") {
        opt.rounds = 1;
        opt.decisions = 2'000;
        opt.keys = 1'000;
        opt.memory_keys = 10'000;
      } else {
        return usage(("unknown argument " + a).c_str());
      }
    } catch (const std::exception& e) {
      return usage(e.what());
    }
  }
  if (opt.port <= 0) return usage("--port is required");
  if (opt.rounds < 1 || opt.keys < 1 || opt.decisions < opt.keys || opt.decisions % opt.keys != 0 ||
      opt.memory_keys < 1)
    return usage("need rounds >= 1, memory-keys >= 1, keys >= 1 and decisions a multiple of keys");

  try {
    Connection admin(opt.host, opt.port);
    PlainGcra plain(opt.host, opt.port);
    const Decide plain_side = [&plain](const std::string& key) { return plain(key); };
    const std::string version = info_field(admin.info("server"), "redis_version");

    ratelimit::RedisOptions ro;
    ro.host = opt.host;
    ro.port = opt.port;
    ro.key_prefix = opt.prefix;
    ro.pool_size = 1;
    // Generous: a loaded machine must measure Redis, not the failure policy.
    ro.command_timeout = std::chrono::milliseconds{2000};
    ro.connect_timeout = std::chrono::milliseconds{2000};

    const auto memory_keys = user_keys(opt.memory_keys);
    std::vector<std::size_t> memory_order(memory_keys.size());
    for (std::size_t i = 0; i < memory_order.size(); ++i) memory_order[i] = i;

    std::printf("redis_cost: Redis %s on %s:%d; %d rounds of %d decisions\n", version.c_str(),
                opt.host.c_str(), opt.port, opt.rounds, opt.decisions);
    const Run plain_memory =
        measure(admin, plain_side, memory_keys, memory_order, memory_keys.size());
    std::printf("  plain script: %.1f B per key over %d keys\n", plain_memory.bytes_per_key,
                opt.memory_keys);

    const std::vector<Scenario> all = scenarios();
    std::vector<ScenarioResult> results;
    for (const Scenario& s : all) {
      if (!opt.only.empty() && opt.only.find("," + s.name + ",") == std::string::npos) continue;
      ScenarioResult res;
      res.scenario = &s;
      const Decide library = s.make(RedisStorage(ro));
      const int keys = s.keys > 0 ? std::min(s.keys, opt.decisions) : opt.keys;
      const auto cpu_keys = user_keys(keys);
      const auto order = spread(keys, opt.decisions / keys);
      for (int round = 0; round < opt.rounds; ++round) {
        res.library.push_back(measure(admin, library, cpu_keys, order, cpu_keys.size()));
        res.plain.push_back(measure(admin, plain_side, cpu_keys, order, cpu_keys.size()));
      }
      if (s.memory_run) {
        res.library_memory = measure(admin, library, memory_keys, memory_order, memory_keys.size());
        res.has_memory = true;
      }
      std::vector<double> lib_us, plain_us;
      long long degraded = 0;
      for (const Run& r : res.library) {
        lib_us.push_back(r.script_us);
        degraded += r.degraded;
      }
      for (const Run& r : res.plain) plain_us.push_back(r.script_us);
      const double lm = median(lib_us), pm = median(plain_us);
      std::printf("  %-15s %6.2f us/decision (plain %5.2f): %.2fx", s.name.c_str(), lm, pm,
                  lm / pm);
      if (res.has_memory)
        std::printf("; %.1f B per key (plain %.1f): %.2fx", res.library_memory.bytes_per_key,
                    plain_memory.bytes_per_key,
                    res.library_memory.bytes_per_key / plain_memory.bytes_per_key);
      std::printf("%s\n", degraded > 0 ? "  [DEGRADED decisions: not measured]" : "");
      std::fflush(stdout);
      results.push_back(std::move(res));
    }

    if (!opt.out.empty()) {
      std::FILE* f = std::fopen(opt.out.c_str(), "w");
      if (f == nullptr) throw Failure("cannot write " + opt.out);
      std::fprintf(f,
                   "{\"redis_version\": %s, \"rounds\": %d, \"decisions\": %d, \"keys\": %d, "
                   "\"memory_keys\": %d, \"key_prefix\": %s,\n \"plain_memory\": %s,\n"
                   " \"scenarios\": [",
                   json_string(version).c_str(), opt.rounds, opt.decisions, opt.keys,
                   opt.memory_keys, json_string(opt.prefix).c_str(), json(plain_memory).c_str());
      for (std::size_t i = 0; i < results.size(); ++i) {
        const ScenarioResult& r = results[i];
        const Scenario& s = *r.scenario;
        const int keys = s.keys > 0 ? std::min(s.keys, opt.decisions) : opt.keys;
        std::string setup = s.setup;
        if (s.keys > 0)
          setup += ", each decided " + std::to_string(opt.decisions / keys) + " times";
        std::fprintf(f,
                     "%s\n  {\"name\": %s, \"setup\": %s, \"keys\": %d, \"cpu_goal\": %g, "
                     "\"memory_goal\": %g,\n   \"library\": [",
                     i == 0 ? "" : ",", json_string(s.name).c_str(), json_string(setup).c_str(),
                     keys, s.cpu_goal, s.memory_goal);
        for (std::size_t j = 0; j < r.library.size(); ++j)
          std::fprintf(f, "%s\n    %s", j == 0 ? "" : ",", json(r.library[j]).c_str());
        std::fprintf(f, "],\n   \"plain\": [");
        for (std::size_t j = 0; j < r.plain.size(); ++j)
          std::fprintf(f, "%s\n    %s", j == 0 ? "" : ",", json(r.plain[j]).c_str());
        std::fprintf(f, "],\n   \"memory\": %s}",
                     r.has_memory ? json(r.library_memory).c_str() : "null");
      }
      std::fprintf(f, "]}\n");
      std::fclose(f);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redis_cost: %s\n", e.what());
    return 1;
  }
  return 0;
}
