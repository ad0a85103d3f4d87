// http_gateway: a small HTTP service with ratelimit in front of its endpoints.
//
//   http_gateway [--port N] [--host ADDR] [--rules FILE] [--keys FILE] [--redis HOST:PORT]
//                [--key-prefix P] [--threads N] [--no-limit]
//                [--shed-capacity N --shed-rate RATE [--shed-reserves NORMAL,SHEDDABLE]]
//
// Every request is decided by the rules file (Envoy rate limit YAML, see
// include/ratelimit/rules.hpp) against the descriptors remote_address=<peer IP> and path, plus
// api_key=<key> and plan=<its plan> when its X-API-Key is in the key file (lines "KEY PLAN"),
// or auth=anonymous otherwise. So every request counts against its IP; a key nobody issued is
// anonymous (limited by IP) and, if the limits admit it, answered 401: made-up keys buy
// nothing. A request with a control character (NUL included) in a header is answered 400
// before anything else (cpp-httplib would cut the value at a NUL). Denied requests get 429
// with a small problem+json body; every limited response carries the RateLimit/X-RateLimit
// headers.
// Load shedding (optional, --shed-capacity): before the rules, every API request spends one token
// of one gateway-wide token bucket (capacity N, refilled at --shed-rate, e.g. "20/s") at the
// priority of its X-Priority header (critical, normal or sheddable; absent: normal; anything
// else: 400). Sheddable requests may use the bucket only while more than the sheddable reserve
// is left (default 40 %), normal ones while more than the normal reserve is (default 10 %), so
// under overload the sheddable traffic is cut first and critical traffic keeps its rate
// (core/priority.hpp). A shed request gets 429 before any rule is spent.
// GET /metrics (never limited) is the library's Prometheus exporter (ratelimit/metrics/
// prometheus.hpp: decisions per rule and outcome, the most limited clients, latency, Redis
// errors, round trips and breaker), then the gateway's own request outcomes and added latency.
// --port 0 picks a free port; the chosen one is printed as "listening on http://HOST:PORT". SIGINT
// or SIGTERM stops it cleanly.

#include <httplib.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <ratelimit/http.hpp>
#include <ratelimit/metrics.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/rules.hpp>

#if defined(RATELIMIT_GATEWAY_WITH_REDIS) && __has_include(<ratelimit/redis.hpp>)
#include <ratelimit/redis.hpp>
#define RATELIMIT_GATEWAY_REDIS 1
#endif

#ifndef RATELIMIT_GATEWAY_DEFAULT_RULES
#define RATELIMIT_GATEWAY_DEFAULT_RULES "rules.yaml"
#endif
#ifndef RATELIMIT_GATEWAY_DEFAULT_KEYS
#define RATELIMIT_GATEWAY_DEFAULT_KEYS "keys.txt"
#endif

namespace {

struct Options {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string rules = RATELIMIT_GATEWAY_DEFAULT_RULES;
  std::string keys = RATELIMIT_GATEWAY_DEFAULT_KEYS;
  std::string redis;                    // HOST:PORT, empty = in-process storage
  std::string key_prefix = "gateway:";  // Redis keys; instances sharing limits use the same
  int threads = 16;
  bool limit = true;
  int shed_capacity = 0;                     // 0: no shedding stage
  std::optional<ratelimit::Rate> shed_rate;  // its refill
  ratelimit::Reserves shed_reserves{0.1, 0.4};
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "http_gateway: " << why << "\n"
            << "usage: http_gateway [--port N] [--host ADDR] [--rules FILE] [--keys FILE]"
               " [--redis HOST:PORT] [--key-prefix P] [--threads N] [--no-limit]"
               " [--shed-capacity N --shed-rate RATE [--shed-reserves NORMAL,SHEDDABLE]]\n";
  std::exit(2);
}

int to_int(const std::string& s, const char* what, int lo, int hi) {
  try {
    std::size_t used = 0;
    const int v = std::stoi(s, &used);
    if (used == s.size() && v >= lo && v <= hi) return v;
  } catch (const std::exception&) {
  }
  usage(std::string(what) + " must be a number in [" + std::to_string(lo) + ", " +
        std::to_string(hi) + "], got \"" + s + "\"");
}

/// "NORMAL,SHEDDABLE", two fractions of the shedding bucket (checked by set_reserves).
ratelimit::Reserves parse_reserves(const std::string& s) {
  const auto comma = s.find(',');
  try {
    if (comma != std::string::npos) {
      std::size_t used1 = 0, used2 = 0;
      const double normal = std::stod(s.substr(0, comma), &used1);
      const double sheddable = std::stod(s.substr(comma + 1), &used2);
      if (used1 == comma && used2 == s.size() - comma - 1) return {normal, sheddable};
    }
  } catch (const std::exception&) {
  }
  usage("--shed-reserves takes NORMAL,SHEDDABLE (fractions in [0, 1]), got \"" + s + "\"");
}

/// A rate such as "20/s" or "1000 per hour" (ratelimit::parse_rate).
ratelimit::Rate parse_shed_rate(const std::string& s) {
  try {
    return ratelimit::parse_rate(s);
  } catch (const std::invalid_argument& e) {
    usage(std::string("--shed-rate: ") + e.what());
  }
}

/// The X-Priority header's value as a priority (absent: normal), or nullopt if unknown.
std::optional<ratelimit::Priority> priority_of(const httplib::Request& req) {
  const auto h = req.headers.find("X-Priority");
  if (h == req.headers.end() || h->second == "normal") return ratelimit::Priority::normal;
  if (h->second == "critical") return ratelimit::Priority::critical;
  if (h->second == "sheddable") return ratelimit::Priority::sheddable;
  return std::nullopt;
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--port")
      o.port = to_int(next(), "--port", 0, 65535);
    else if (a == "--host")
      o.host = next();
    else if (a == "--rules")
      o.rules = next();
    else if (a == "--keys")
      o.keys = next();
    else if (a == "--redis")
      o.redis = next();
    else if (a == "--key-prefix")
      o.key_prefix = next();
    else if (a == "--threads")
      o.threads = to_int(next(), "--threads", 1, 1024);
    else if (a == "--no-limit")
      o.limit = false;
    else if (a == "--shed-capacity")
      o.shed_capacity = to_int(next(), "--shed-capacity", 1, 1'000'000'000);
    else if (a == "--shed-rate")
      o.shed_rate = parse_shed_rate(next());
    else if (a == "--shed-reserves")
      o.shed_reserves = parse_reserves(next());
    else if (a == "--help" || a == "-h")
      usage("help");
    else
      usage("unknown argument " + a);
  }
  if ((o.shed_capacity > 0) != o.shed_rate.has_value())
    usage("--shed-capacity and --shed-rate go together");
  return o;
}

/// Latencies in ns, log-linear buckets (32 per power of two, so within about 3%), lock-free.
class LatencyHistogram {
 public:
  void record(std::chrono::nanoseconds d) {
    const auto v = static_cast<std::uint64_t>(std::max<std::int64_t>(d.count(), 0));
    buckets_[index(v)].fetch_add(1, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
  }
  std::uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  /// The q-quantile in ns (the upper edge of its bucket: never under-reports), 0 if empty.
  std::uint64_t quantile(double q) const {
    std::uint64_t total = 0;
    std::array<std::uint64_t, size> snap{};
    for (std::size_t i = 0; i < size; ++i) total += snap[i] = buckets_[i].load();
    if (total == 0) return 0;
    const auto rank = static_cast<std::uint64_t>(q * static_cast<double>(total - 1)) + 1;
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < size; ++i)
      if ((seen += snap[i]) >= rank) return upper(i);
    return upper(size - 1);
  }

 private:
  static constexpr std::size_t size = 64 + 58 * 32;
  static std::size_t index(std::uint64_t v) {
    if (v < 64) return v;
    const int e = std::bit_width(v) - 1;  // 6..63
    const int shift = e - 5;
    return 64 + static_cast<std::size_t>(e - 6) * 32 + ((v >> shift) - 32);
  }
  static std::uint64_t upper(std::size_t i) {
    if (i < 64) return i;
    const std::size_t e = (i - 64) / 32 + 6, sub = (i - 64) % 32;
    return ((sub + 33) << (e - 5)) - 1;
  }
  std::array<std::atomic<std::uint64_t>, size> buckets_{};
  std::atomic<std::uint64_t> count_{0};
};

/// The gateway's own counters: HTTP outcomes the limiter does not see. Per-rule decisions are
/// the exporter's (a listener on the rule set).
struct Metrics {
  std::atomic<std::uint64_t> allowed{0}, limited{0}, unmatched{0};
  std::atomic<std::uint64_t> unauthorized{0}, bad_request{0};
  std::array<std::atomic<std::uint64_t>, 3> shed_admitted{}, shed_denied{};  // by Priority
  LatencyHistogram latency;
};

/// The shedding stage: one decision of the gateway-wide bucket at a priority.
using Shed = std::function<ratelimit::Decision(ratelimit::Priority)>;

using Decide =
    std::function<ratelimit::RuleSetDecision(std::span<const ratelimit::DescriptorEntry>)>;

std::string json_escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

/// The issued API keys and their plans, from a file of lines "KEY PLAN" (blank lines and lines
/// starting with '#' skipped). Keys and plans are printable ASCII without spaces. Throws
/// `std::invalid_argument` "FILE:LINE: problem".
using KeyFile = std::unordered_map<std::string, std::string>;

KeyFile load_keys(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw std::invalid_argument("key file " + file + ": cannot open");
  KeyFile keys;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const auto fail = [&](const std::string& what) {
      throw std::invalid_argument(file + ":" + std::to_string(n) + ": " + what);
    };
    std::istringstream words(line);
    std::string key, plan, extra;
    if (!(words >> key) || key[0] == '#') continue;
    if (!(words >> plan)) fail("expected \"KEY PLAN\"");
    if (words >> extra) fail("expected \"KEY PLAN\", got more");
    for (const char c : key + plan)
      if (c < 0x21 || c > 0x7e) fail("keys and plans must be printable ASCII");
    if (!keys.emplace(key, plan).second) fail("key given twice");
  }
  return keys;
}

/// True if a header name or value holds a control character (NUL, CR, LF, ...; tab is allowed
/// in values): cpp-httplib would hand the handlers a value cut at the first NUL, so two
/// different keys could share a counter.
bool has_control_character(const httplib::Headers& headers) {
  const auto bad = [](const std::string& s, bool value) {
    return std::any_of(s.begin(), s.end(), [value](char ch) {
      const auto c = static_cast<unsigned char>(ch);
      return (c < 0x20 && !(value && c == '\t')) || c == 0x7f;
    });
  };
  return std::any_of(headers.begin(), headers.end(),
                     [&](const auto& h) { return bad(h.first, false) || bad(h.second, true); });
}

std::string render_metrics(const ratelimit::PrometheusExporter& exporter, const Metrics& m,
                           bool limit, const std::string& storage) {
  std::ostringstream o;
  o << "# gateway: storage=" << storage << " limiter=" << (limit ? "on" : "off") << "\n";
  o << exporter.render();
  o << "# TYPE gateway_requests_total counter\n"
    << "gateway_requests_total{outcome=\"allowed\"} " << m.allowed.load() << "\n"
    << "gateway_requests_total{outcome=\"limited\"} " << m.limited.load() << "\n"
    << "gateway_requests_total{outcome=\"no_rule\"} " << m.unmatched.load() << "\n"
    << "gateway_requests_total{outcome=\"unauthorized\"} " << m.unauthorized.load() << "\n"
    << "gateway_requests_total{outcome=\"bad_request\"} " << m.bad_request.load() << "\n";
  o << "# TYPE gateway_shed_requests_total counter\n";
  constexpr const char* priorities[] = {"critical", "normal", "sheddable"};  // index = Priority
  for (std::size_t i = 0; i < 3; ++i) {
    const char* p = priorities[i];
    o << "gateway_shed_requests_total{priority=\"" << p << "\",outcome=\"allowed\"} "
      << m.shed_admitted[i].load() << "\n";
    o << "gateway_shed_requests_total{priority=\"" << p << "\",outcome=\"shed\"} "
      << m.shed_denied[i].load() << "\n";
  }
  char buf[64];
  o << "# TYPE gateway_limiter_latency_seconds summary\n";
  for (const double q : {0.5, 0.99}) {
    std::snprintf(buf, sizeof buf, "%.9f", static_cast<double>(m.latency.quantile(q)) / 1e9);
    o << "gateway_limiter_latency_seconds{quantile=\"" << q << "\"} " << buf << "\n";
  }
  o << "gateway_limiter_latency_seconds_count " << m.latency.count() << "\n";
  return o.str();
}

/// Blocks SIGINT and SIGTERM in every thread (call before starting any), and returns a thread
/// that waits for one of them and calls `on_signal`. sigwait keeps the work out of a signal
/// handler, where almost nothing is safe.
std::thread signal_thread(std::function<void(int)> on_signal) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return std::thread([set, on_signal = std::move(on_signal)] {
    int sig = 0;
    sigwait(&set, &sig);
    on_signal(sig);
  });
}

int serve(const Options& opt, const ratelimit::Rules& rules, const KeyFile& keys, Decide decide,
          Shed shed, const std::string& storage_name,
          const ratelimit::PrometheusExporter& exporter) {
  Metrics metrics;
  httplib::Server server;
  // Without it, a keep-alive client waits ~40 ms per response (Nagle's algorithm holding the
  // body back until the headers' delayed ACK): that would hide everything else in a load run.
  server.set_tcp_nodelay(true);
  server.new_task_queue = [n = opt.threads] {
    return new httplib::ThreadPool(static_cast<std::size_t>(n));
  };

  const auto problem = [](httplib::Response& res, int status, const std::string& title,
                          const std::string& detail) {
    res.status = status;
    res.set_content("{\"title\": \"" + title + "\", \"status\": " + std::to_string(status) +
                        ", \"detail\": \"" + detail + "\"}\n",
                    "application/problem+json");
  };

  // In front of every API endpoint: returns false (and fills the 400, 401 or 429) if refused.
  const auto admit = [&](const httplib::Request& req, httplib::Response& res) {
    if (has_control_character(req.headers)) {
      metrics.bad_request.fetch_add(1, std::memory_order_relaxed);
      problem(res, 400, "Bad Request", "A header holds a control character.");
      return false;
    }
    // The key as sent (the headers map keeps every byte; get_header_value would stop at NUL).
    const auto sent = req.headers.find("X-API-Key");
    const auto issued = sent == req.headers.end() ? keys.end() : keys.find(sent->second);
    const bool authenticated = issued != keys.end();
    if (shed) {
      const auto priority = priority_of(req);
      if (!priority) {
        metrics.bad_request.fetch_add(1, std::memory_order_relaxed);
        problem(res, 400, "Bad Request", "X-Priority must be critical, normal or sheddable.");
        return false;
      }
      const auto i = static_cast<std::size_t>(*priority);
      const ratelimit::Decision d = shed(*priority);
      if (!d.allowed) {
        metrics.shed_denied[i].fetch_add(1, std::memory_order_relaxed);
        res.set_header("Retry-After",
                       std::to_string(ratelimit::detail::ceil_seconds(d.retry_after)));
        problem(res, 429, "Too Many Requests", "Shed under load: retry later.");
        return false;
      }
      metrics.shed_admitted[i].fetch_add(1, std::memory_order_relaxed);
    }
    if (!opt.limit) {
      if (sent == req.headers.end() || authenticated) return true;
      metrics.unauthorized.fetch_add(1, std::memory_order_relaxed);
      problem(res, 401, "Unauthorized", "Unknown API key.");
      return false;
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<ratelimit::DescriptorEntry> entries;
    entries.reserve(4);
    entries.push_back({"remote_address", req.remote_addr});
    if (authenticated) {
      entries.push_back({"api_key", issued->first});
      entries.push_back({"plan", issued->second});
    } else {
      entries.push_back({"auth", "anonymous"});
    }
    entries.push_back({"path", req.path});
    const ratelimit::RuleSetDecision d = decide(entries);
    for (auto& [name, value] : d.headers()) res.set_header(name, value);
    std::string violated;
    for (const auto& o : d.outcomes)
      if (!o.decision.allowed)
        violated += (violated.empty() ? "\"" : ", \"") + json_escape(o.rule->name) + "\"";
    // Admitted as anonymous with a key nobody issued: refused below (401), not counted allowed.
    const bool unknown_key = d.allowed && sent != req.headers.end() && !authenticated;
    if (d.outcomes.empty()) metrics.unmatched.fetch_add(1, std::memory_order_relaxed);
    if (!unknown_key)
      (d.allowed ? metrics.allowed : metrics.limited).fetch_add(1, std::memory_order_relaxed);
    if (!d.allowed) {
      const auto dec = d.decision();
      std::string detail =
          dec.retry_after == ratelimit::Decision::never
              ? "This request can never be admitted under the current policy."
              : "Retry after " + std::to_string(ratelimit::detail::ceil_seconds(dec.retry_after)) +
                    " s.";
      res.status = 429;
      res.set_content(
          "{\"type\": \"https://iana.org/assignments/http-problem-types#quota-exceeded\", "
          "\"title\": \"Too Many Requests\", \"detail\": \"" +
              detail + "\", \"violated-policies\": [" + violated + "]}\n",
          "application/problem+json");
    }
    metrics.latency.record(std::chrono::steady_clock::now() - start);
    if (unknown_key) {
      // Limited as anonymous (by IP), then refused: guessing keys costs the IP's budget.
      metrics.unauthorized.fetch_add(1, std::memory_order_relaxed);
      problem(res, 401, "Unauthorized", "Unknown API key.");
      return false;
    }
    return d.allowed;
  };

  const auto json = [](httplib::Response& res, const std::string& body) {
    res.set_content(body + "\n", "application/json");
  };
  server.Get("/api/hello", [&](const httplib::Request& req, httplib::Response& res) {
    if (admit(req, res)) json(res, "{\"hello\": \"world\"}");
  });
  server.Get("/api/items", [&](const httplib::Request& req, httplib::Response& res) {
    if (admit(req, res)) json(res, "{\"items\": [1, 2, 3]}");
  });
  server.Post("/login", [&](const httplib::Request& req, httplib::Response& res) {
    if (admit(req, res)) json(res, "{\"ok\": true}");
  });
  server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(render_metrics(exporter, metrics, opt.limit, storage_name),
                    "text/plain; version=0.0.4");
  });
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });

  std::atomic<bool> signalled{false};
  std::thread signals = signal_thread([&](int) {
    signalled = true;
    server.stop();
  });
  // Ends the signal thread when the server stops for another reason (its sigwait takes this).
  const auto release_signals = [&] {
    if (!signalled) pthread_kill(signals.native_handle(), SIGTERM);
    signals.join();
  };
  const int port = opt.port == 0 ? server.bind_to_any_port(opt.host)
                                 : (server.bind_to_port(opt.host, opt.port) ? opt.port : -1);
  if (port < 0) {
    std::cerr << "http_gateway: cannot listen on " << opt.host << ":" << opt.port << "\n";
    release_signals();
    return 1;
  }
  std::cout << "listening on http://" << opt.host << ":" << port << " (storage " << storage_name
            << ", " << rules.rules().size() << " rules from " << opt.rules << ", limiter "
            << (opt.limit ? "on" : "off") << ")" << std::endl;
  const bool ok = server.listen_after_bind();
  release_signals();
  std::cout << "stopped: " << metrics.allowed.load() << " allowed, " << metrics.limited.load()
            << " limited" << std::endl;
  return ok ? 0 : 1;
}

/// The shedding stage of `opt` on `storage` (key "gateway" of the limiter "shed"), or an empty
/// function when shedding is off. Throws `std::invalid_argument` for bad reserves.
template <class Storage>
Shed make_shed(const Options& opt, Storage storage) {
  if (opt.shed_capacity == 0) return {};
  // SystemClock, as the rule set's: on Redis every instance shares its epoch.
  auto bucket = std::make_shared<ratelimit::TokenBucket<ratelimit::SystemClock, Storage>>(
      ratelimit::TokenBucketConfig{opt.shed_capacity, *opt.shed_rate}, std::move(storage),
      ratelimit::SystemClock{}, "shed");
  bucket->set_reserves(opt.shed_reserves);
  return [bucket](ratelimit::Priority p) { return bucket->try_acquire("gateway", 1, p); };
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse_args(argc, argv);
  try {
    const ratelimit::Rules rules = ratelimit::Rules::from_file(opt.rules);
    const KeyFile keys = load_keys(opt.keys);
    // Every rule's decisions, with the client ("api_key=K", "remote_address=IP") for the top
    // list of limited clients, and (on Redis) the storage's errors, round trips and breaker.
    auto exporter = std::make_shared<ratelimit::PrometheusExporter>();
    if (opt.redis.empty()) {
      auto set = std::make_shared<ratelimit::RuleSet<>>(rules);
      set->attach_listener(exporter, {.with_keys = true});
      return serve(
          opt, set->rules(), keys,
          [set](std::span<const ratelimit::DescriptorEntry> e) { return set->decide(e); },
          make_shed(opt, ratelimit::InMemoryStorage{}), "in-process", *exporter);
    }
#ifdef RATELIMIT_GATEWAY_REDIS
    ratelimit::RedisOptions ro;
    const auto colon = opt.redis.rfind(':');
    if (colon == std::string::npos) usage("--redis takes HOST:PORT, got \"" + opt.redis + "\"");
    ro.host = opt.redis.substr(0, colon);
    ro.port = to_int(opt.redis.substr(colon + 1), "--redis port", 1, 65535);
    ro.key_prefix = opt.key_prefix;
    // The default two connections: every server thread's decisions share them, pipelined.
    ratelimit::RedisStorage storage(ro);
    auto set = std::make_shared<ratelimit::RuleSet<ratelimit::RedisStorage>>(rules, storage);
    set->attach_listener(exporter, {.with_keys = true});
    set->storage().attach_listener(exporter);
    return serve(
        opt, set->rules(), keys,
        [set](std::span<const ratelimit::DescriptorEntry> e) { return set->decide(e); },
        make_shed(opt, storage), "redis " + opt.redis, *exporter);
#else
    usage("--redis: this build has no Redis support (needs libhiredis-dev and ratelimit::redis)");
#endif
  } catch (const std::invalid_argument& e) {
    std::cerr << "http_gateway: " << e.what() << "\n";
    return 2;
  }
}
