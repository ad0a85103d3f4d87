#pragma once
/// @file metrics/prometheus.hpp
/// A ready `Listener` that keeps the counters a service alerts on and writes them in
/// Prometheus's text exposition format (version 0.0.4), bounded whatever the traffic.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../core/listener.hpp"

namespace ratelimit {

/// The exporter's bounds and names. Thread safety: a plain value.
struct PrometheusOptions {
  /// Prefix of every metric name: [a-zA-Z_:][a-zA-Z0-9_:]*, at most 64 bytes.
  std::string prefix = "ratelimit";
  /// Distinct decision names (limiters, rules' metric names) counted apart, 1..100,000; the
  /// events of further names are counted under name="__other__". Rules with
  /// `detailed_metric` / `value_to_metric` make names from request values: this bounds them.
  std::size_t max_names = 1000;
  /// Limited clients listed (`_top_limited_requests`), 0..1,000.
  std::size_t top_clients = 10;
  /// Counters of the space-saving sketch behind that list, top_clients..100,000: every client
  /// limited more than (limited events / tracked_clients) times is listed if it ranks.
  std::size_t tracked_clients = 100;
  /// Label values longer than this (bytes, 32..4096) are cut to this length: their first
  /// max_label_bytes - 17 bytes, "~" and a 64-bit hash of the whole value in 16 hex digits.
  std::size_t max_label_bytes = 128;
  /// Distinct Redis nodes and error kinds kept apart, 1..10,000; further ones as "__other__".
  std::size_t max_nodes = 64;
};

namespace detail {

/// A histogram of durations with fixed bounds, lock-free.
class DurationHistogram {
 public:
  /// Upper bounds (ns): 100 ns to 10 s in 1-2.5-5 steps.
  static constexpr std::array<std::int64_t, 25> bounds = {
      100,         250,           500,           1'000,         2'500,
      5'000,       10'000,        25'000,        50'000,        100'000,
      250'000,     500'000,       1'000'000,     2'500'000,     5'000'000,
      10'000'000,  25'000'000,    50'000'000,    100'000'000,   250'000'000,
      500'000'000, 1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000};

  void record(std::chrono::nanoseconds d) noexcept {
    const std::int64_t ns = std::max<std::int64_t>(0, d.count());
    const auto it = std::lower_bound(bounds.begin(), bounds.end(), ns);
    counts_[static_cast<std::size_t>(it - bounds.begin())].fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(static_cast<std::uint64_t>(ns), std::memory_order_relaxed);
  }

  /// Writes `name`_bucket / _sum / _count lines (cumulative, seconds).
  void write(std::string& out, const std::string& name) const {
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i <= bounds.size(); ++i) {
      cumulative += counts_[i].load(std::memory_order_relaxed);
      out += name;
      out += "_bucket{le=\"";
      out += i < bounds.size() ? seconds(bounds[i]) : std::string("+Inf");
      out += "\"} ";
      out += std::to_string(cumulative);
      out += '\n';
    }
    out += name + "_sum " + seconds(static_cast<std::int64_t>(sum_ns_.load())) + '\n';
    out += name + "_count " + std::to_string(cumulative) + '\n';
  }

  /// `ns` as decimal seconds, exactly (no floating point).
  static std::string seconds(std::int64_t ns) {
    std::string frac = std::to_string(ns % 1'000'000'000);
    frac.insert(0, 9 - frac.size(), '0');
    while (frac.size() > 1 && frac.back() == '0') frac.pop_back();
    return std::to_string(ns / 1'000'000'000) + "." + frac;
  }

 private:
  std::array<std::atomic<std::uint64_t>, bounds.size() + 1> counts_{};
  std::atomic<std::uint64_t> sum_ns_{0};
};

/// Counters per label value, at most `cap` values (then "__other__"), lock-free once a value
/// is known (a shared lock and a hash lookup).
template <std::size_t N>
class LabeledCounters {
 public:
  using Values = std::array<std::atomic<std::uint64_t>, N>;

  explicit LabeledCounters(std::size_t cap) : cap_(cap) {}

  /// The counters of `label` (already cut to the label bound), or of "__other__" when full.
  Values& at(std::string_view label) {
    {
      std::shared_lock lock(mutex_);
      if (auto it = map_.find(label); it != map_.end()) return *it->second;
      if (map_.size() >= cap_) return other_;
    }
    std::unique_lock lock(mutex_);
    if (auto it = map_.find(label); it != map_.end()) return *it->second;
    if (map_.size() >= cap_) return other_;
    return *map_.emplace(std::string(label), std::make_unique<Values>()).first->second;
  }

  /// Calls `fn(label, values)` for each label value in order, "__other__" last if used.
  template <class Fn>
  void for_each(Fn&& fn) const {
    std::map<std::string_view, const Values*> sorted;
    std::shared_lock lock(mutex_);
    for (const auto& [label, values] : map_) sorted.emplace(label, values.get());
    for (const auto& [label, values] : sorted) fn(label, *values);
    bool used = false;
    for (const auto& v : other_) used = used || v.load(std::memory_order_relaxed) != 0;
    if (used) fn(std::string_view("__other__"), other_);
  }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  std::size_t cap_;
  mutable std::shared_mutex mutex_;
  std::unordered_map<std::string, std::unique_ptr<Values>, Hash, std::equal_to<>> map_;
  Values other_{};
};

/// The space-saving sketch (Metwally, Agrawal, El Abbadi, "Efficient Computation of Frequent
/// and Top-k Elements in Data Streams", 2005): `capacity` counters; an item not counted takes
/// the smallest counter over (count + 1), so a count is an overestimate by at most that
/// counter's former value, and every item seen more than total / capacity times is counted.
/// Memory: `capacity` items whatever the number of distinct items. Thread safety: not
/// thread-safe (the exporter holds a mutex).
class SpaceSaving {
 public:
  struct Item {
    std::string name, key;
    std::uint64_t count = 0;
  };

  explicit SpaceSaving(std::size_t capacity) : capacity_(capacity) {}

  void add(std::string_view name, std::string_view key) {
    if (capacity_ == 0) return;
    std::string id = std::to_string(name.size());
    id += ':';
    id += name;
    id += key;
    if (auto it = index_.find(id); it != index_.end()) {
      ++items_[it->second].count;
      return;
    }
    if (items_.size() < capacity_) {
      index_.emplace(std::move(id), items_.size());
      items_.push_back({std::string(name), std::string(key), 1});
      return;
    }
    std::size_t min = 0;
    for (std::size_t i = 1; i < items_.size(); ++i)
      if (items_[i].count < items_[min].count) min = i;
    Item& victim = items_[min];
    std::string old = std::to_string(victim.name.size());
    old += ':';
    old += victim.name;
    old += victim.key;
    index_.erase(old);
    victim.name = std::string(name);
    victim.key = std::string(key);
    ++victim.count;
    index_.emplace(std::move(id), min);
  }

  /// The `n` largest counts, largest first.
  std::vector<Item> top(std::size_t n) const {
    std::vector<Item> out = items_;
    std::sort(out.begin(), out.end(), [](const Item& a, const Item& b) {
      return a.count != b.count ? a.count > b.count : a.name + a.key < b.name + b.key;
    });
    if (out.size() > n) out.resize(n);
    return out;
  }

 private:
  std::size_t capacity_;
  std::vector<Item> items_;
  std::unordered_map<std::string, std::size_t> index_;
};

/// FNV-1a, 64 bits: names a cut label value (not a security boundary: equal labels merge).
constexpr std::uint64_t fnv1a(std::string_view s) noexcept {
  std::uint64_t h = 14695981039346656037ull;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace detail

/// A `Listener` that counts what limiters, rule sets and Redis storages report and writes it as
/// Prometheus text (`render`). Attach one exporter to every source (with `with_keys` where the
/// top list of limited clients is wanted) and serve `render()` at /metrics. Metrics (prefix
/// `ratelimit` by default):
///
/// | metric | type | labels |
/// |---|---|---|
/// | `_decisions_total` | counter | name (limiter, or rule metric name), outcome (allowed, limited,
/// shadow_limited, degraded; refunded, penalized, locked_out once a name has had one): one per
/// decision |
/// | `_hits_total` | counter | name, outcome: the units the decisions asked for (their `cost`:
/// a rule's hits_addend, 1 by default), as Envoy's rate limit service counts `total_hits` |
/// | `_decision_latency_seconds` | histogram | (sampled: about 1 in 64 decisions) |
/// | `_call_duration_seconds` | histogram | every call the owner times with `record_call` (e.g.
/// a server's whole call, from arrival to answer) |
/// | `_top_limited_requests` | gauge | name, client: the `top_clients` most limited, counts from
/// the space-saving sketch (overestimates) |
/// | `_redis_errors_total` | counter | kind (connect, timeout, io, reply, protocol, circuit_open,
/// overloaded, warning) |
/// | `_redis_round_trip_seconds` | histogram | (every round trip) |
/// | `_redis_connect_seconds` | histogram | |
/// | `_redis_tls_handshake_seconds` | histogram | |
/// | `_redis_first_decision_seconds` | histogram | |
/// | `_redis_start_to_first_decision_seconds` | histogram | |
/// | `_redis_breaker_open` | gauge | node (1 open, 0 closed) |
/// | `_redis_breaker_changes_total` | counter | node |
/// | `_redis_over_limit_cache_hits_total` | counter | |
///
/// Label values are escaped as the format requires (backslash, quote, newline), and every other
/// byte outside printable ASCII as the text `\xHH` (a literal backslash then shows as two), so
/// any key renders as valid, unambiguous ASCII; values longer than `max_label_bytes` are cut
/// (with a hash). Equal label sets after cutting are merged. Memory and output are bounded by
/// the options (`max_bytes`), whatever the number of distinct keys and names.
///
/// Errors: the constructor throws `std::invalid_argument` naming an option out of range.
/// Thread safety: every member is safe from many threads; events cost a few relaxed atomic
/// increments (a shared lock and a hash lookup per decision name; a mutex for limited events
/// with a key).
class PrometheusExporter final : public Listener {
 public:
  explicit PrometheusExporter(PrometheusOptions options = {})
      : options_(check(std::move(options))),
        decisions_(options_.max_names),
        errors_(options_.max_nodes),
        breakers_(options_.max_nodes),
        sketch_(options_.tracked_clients) {}

  /// Counts the decision and its hits (`cost`, negative taken as 0) under its name and
  /// outcome, its latency if sampled, and a limited client (when the event has a key) in the
  /// top list.
  void on_decision(const DecisionEvent& e) override {
    auto& counts = decisions_.at(cut(e.name, name_buffer()));
    const auto o = static_cast<std::size_t>(e.outcome);
    counts[o].fetch_add(1, std::memory_order_relaxed);
    counts[hits_at + o].fetch_add(static_cast<std::uint64_t>(std::max<std::int64_t>(0, e.cost)),
                                  std::memory_order_relaxed);
    if (e.latency.count() >= 0) latency_.record(e.latency);
    if (!e.key.empty() && options_.top_clients > 0 &&
        (e.outcome == Outcome::limited || e.outcome == Outcome::shadow_limited)) {
      std::string name(cut(e.name, name_buffer()));
      std::string key_buffer;
      const std::string_view key = cut(e.key, key_buffer);
      std::lock_guard<std::mutex> lock(sketch_mutex_);
      sketch_.add(name, key);
    }
  }
  /// Counts the error under its kind.
  void on_storage_error(const StorageErrorEvent& e) override {
    std::string buffer;
    errors_.at(cut(e.kind, buffer))[0].fetch_add(1, std::memory_order_relaxed);
  }
  /// Sets the node's breaker gauge and counts the change.
  void on_breaker_change(const BreakerEvent& e) override {
    std::string buffer;
    auto& b = breakers_.at(cut(e.node, buffer));
    b[0].store(e.open ? 1 : 0, std::memory_order_relaxed);
    b[1].fetch_add(1, std::memory_order_relaxed);
  }
  /// Counts the hit.
  void on_over_limit_cache_hit(const CacheHitEvent&) override {
    cache_hits_.fetch_add(1, std::memory_order_relaxed);
  }
  /// Records one call's duration (`_call_duration_seconds`; negative taken as 0): every call,
  /// not a sample. Costs two relaxed atomic increments. Thread safety: safe from many threads.
  void record_call(std::chrono::nanoseconds elapsed) noexcept { calls_.record(elapsed); }
  /// Records the round trip's latency.
  void on_round_trip(const RoundTripEvent& e) override { round_trip_.record(e.latency); }
  /// Records a new connection's TCP connect and (TLS only) handshake times.
  void on_connect(const ConnectEvent& e) override {
    connect_.record(e.connect);
    if (e.tls_handshake.count() > 0) tls_handshake_.record(e.tls_handshake);
  }
  /// Records a storage's first decision: its own time and the time since the storage started.
  void on_first_decision(const FirstDecisionEvent& e) override {
    first_decision_.record(e.latency);
    start_to_first_decision_.record(e.since_start);
  }

  /// The text exposition (Content-Type `text/plain; version=0.0.4`), at most `max_bytes()`.
  std::string render() const {
    std::string out;
    const std::string& p = options_.prefix;
    head(out, p + "_decisions_total", "counter",
         "Decisions per limiter or rule metric name and outcome.");
    decisions_.for_each([&](std::string_view name, const auto& v) {
      for (const Outcome o :
           {Outcome::allowed, Outcome::limited, Outcome::shadow_limited, Outcome::degraded,
            Outcome::refunded, Outcome::penalized, Outcome::locked_out}) {
        const auto n = v[static_cast<std::size_t>(o)].load();
        // Refunds, penalties and lockouts only where a limiter has had one: the four outcomes
        // of every decision keep their series, and a name without the others gains none.
        if (n == 0 && o >= Outcome::refunded) continue;
        out += p + "_decisions_total{name=\"" + escape(name) + "\",outcome=\"";
        out += to_string(o);
        out += "\"} " + std::to_string(n) + '\n';
      }
    });
    head(out, p + "_hits_total", "counter",
         "Hits (units asked for: a rule's hits_addend, 1 by default) per name and outcome.");
    decisions_.for_each([&](std::string_view name, const auto& v) {
      for (const Outcome o :
           {Outcome::allowed, Outcome::limited, Outcome::shadow_limited, Outcome::degraded}) {
        out += p + "_hits_total{name=\"" + escape(name) + "\",outcome=\"";
        out += to_string(o);
        out += "\"} " + std::to_string(v[hits_at + static_cast<std::size_t>(o)].load()) + '\n';
      }
    });
    histogram(out, p + "_decision_latency_seconds",
              "The limiter's own time per decision, sampled (about 1 in 64).", latency_);
    histogram(out, p + "_call_duration_seconds",
              "Every call's duration, from its arrival to its answer (not sampled).", calls_);
    head(out, p + "_top_limited_requests", "gauge",
         "Limited requests of the most limited clients (space-saving estimate, an upper bound).");
    {
      std::vector<detail::SpaceSaving::Item> top;
      {
        std::lock_guard<std::mutex> lock(sketch_mutex_);
        top = sketch_.top(options_.top_clients);
      }
      std::map<std::string, std::uint64_t> merged;  // equal labels after cutting: one series
      for (const auto& item : top)
        merged["name=\"" + escape(item.name) + "\",client=\"" + escape(item.key) + "\""] +=
            item.count;
      for (const auto& [labels, count] : merged)
        out += p + "_top_limited_requests{" + labels + "} " + std::to_string(count) + '\n';
    }
    head(out, p + "_redis_errors_total", "counter", "Redis failures and warnings by kind.");
    family(out, p + "_redis_errors_total", "kind", errors_, 0);
    histogram(out, p + "_redis_round_trip_seconds", "Pipelined requests to a Redis node and back.",
              round_trip_);
    histogram(out, p + "_redis_connect_seconds",
              "New connections to a Redis node: name resolution and TCP connect.", connect_);
    histogram(out, p + "_redis_tls_handshake_seconds",
              "New TLS connections to a Redis node: the TLS handshake alone.", tls_handshake_);
    histogram(out, p + "_redis_first_decision_seconds",
              "A storage's first decision, from its start to its reply (cold start).",
              first_decision_);
    histogram(out, p + "_redis_start_to_first_decision_seconds",
              "From a storage's construction to its first decision's reply (warm-up included).",
              start_to_first_decision_);
    head(out, p + "_redis_breaker_open", "gauge", "1 while a node's circuit breaker is open.");
    family(out, p + "_redis_breaker_open", "node", breakers_, 0);
    head(out, p + "_redis_breaker_changes_total", "counter",
         "Times a node's circuit breaker opened or closed.");
    family(out, p + "_redis_breaker_changes_total", "node", breakers_, 1);
    head(out, p + "_redis_over_limit_cache_hits_total", "counter",
         "Denials answered by the over-limit cache without asking Redis.");
    out += p + "_redis_over_limit_cache_hits_total " + std::to_string(cache_hits_.load()) + '\n';
    return out;
  }

  /// An upper bound of `render().size()` under these options, whatever the events: each
  /// escaped label value is at most 4 x max_label_bytes + 20 bytes (a byte escapes to at most
  /// 4 bytes), each line at most 2 such values plus 160 bytes of names,
  /// numbers and punctuation (a counter has at most 20 digits), the header lines 2,800 bytes
  /// (14 families, each named twice in them).
  std::size_t max_bytes() const noexcept {
    const std::size_t label = 4 * options_.max_label_bytes + 20;
    const std::size_t line = options_.prefix.size() + 160 + 2 * label;
    // Per name: up to outcome_count decision lines and 4 hits lines.
    const std::size_t lines = (outcome_count + 4) * (options_.max_names + 1) +
                              options_.top_clients + 3 * (options_.max_nodes + 1) +
                              7 * (detail::DurationHistogram::bounds.size() + 3) + 1;
    return 2800 + 14 * 2 * options_.prefix.size() + lines * line;
  }

  /// The options in use.
  const PrometheusOptions& options() const noexcept { return options_; }

  /// Escapes a label value (see the class comment), without cutting it.
  static std::string escape(std::string_view v) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string out;
    out.reserve(v.size());
    for (const char ch : v) {
      const auto c = static_cast<unsigned char>(ch);
      if (c == '\\') {
        out += "\\\\\\\\";  // the value shows two backslashes: one alone starts \xHH
      } else if (c == '"') {
        out += "\\\"";
      } else if (c == '\n') {
        out += "\\n";
      } else if (c < 0x20 || c >= 0x7f) {
        out += "\\\\x";
        out += hex[c >> 4];
        out += hex[c & 15];
      } else {
        out += ch;
      }
    }
    return out;
  }

 private:
  static PrometheusOptions check(PrometheusOptions o) {
    const auto bad = [](const std::string& field, const std::string& value,
                        const std::string& why) {
      throw std::invalid_argument("PrometheusOptions." + field + " = " + value + ": " + why);
    };
    const bool name_ok = !o.prefix.empty() && o.prefix.size() <= 64 &&
                         std::all_of(o.prefix.begin(), o.prefix.end(),
                                     [](char c) {
                                       return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                              (c >= '0' && c <= '9') || c == '_' || c == ':';
                                     }) &&
                         !(o.prefix[0] >= '0' && o.prefix[0] <= '9');
    if (!name_ok)
      bad("prefix", "\"" + o.prefix + "\"",
          "must match [a-zA-Z_:][a-zA-Z0-9_:]* and be at most 64 bytes");
    const auto range = [&](const char* field, std::size_t v, std::size_t lo, std::size_t hi) {
      if (v < lo || v > hi)
        bad(field, std::to_string(v),
            "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    };
    range("max_names", o.max_names, 1, 100'000);
    range("top_clients", o.top_clients, 0, 1'000);
    range("tracked_clients", o.tracked_clients, o.top_clients, 100'000);
    range("max_label_bytes", o.max_label_bytes, 32, 4096);
    range("max_nodes", o.max_nodes, 1, 10'000);
    return o;
  }

  static void head(std::string& out, const std::string& name, const char* type, const char* help) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }

  /// A histogram family: its HELP and TYPE lines, then its buckets, sum and count.
  static void histogram(std::string& out, const std::string& name, const char* help,
                        const detail::DurationHistogram& h) {
    head(out, name, "histogram", help);
    h.write(out, name);
  }

  /// One line per label value of `counters`: `metric{label="value"} counters[index]`.
  template <std::size_t N>
  static void family(std::string& out, const std::string& metric, const char* label,
                     const detail::LabeledCounters<N>& counters, std::size_t index) {
    counters.for_each([&](std::string_view value, const auto& v) {
      out += metric + "{" + label + "=\"" + escape(value) + "\"} " +
             std::to_string(v[index].load()) + '\n';
    });
  }

  static std::string& name_buffer() {
    thread_local std::string buffer;
    return buffer;
  }

  /// `v`, or when longer than max_label_bytes its first bytes, "~" and its hash (in `buffer`).
  std::string_view cut(std::string_view v, std::string& buffer) const {
    if (v.size() <= options_.max_label_bytes) return v;
    static constexpr char hex[] = "0123456789abcdef";
    buffer.assign(v.substr(0, options_.max_label_bytes - 17));
    buffer += '~';
    const std::uint64_t h = detail::fnv1a(v);
    for (int shift = 60; shift >= 0; shift -= 4) buffer += hex[(h >> shift) & 15];
    return buffer;
  }

  /// Per name: decisions per outcome at [0, outcome_count), hits per outcome at
  /// [hits_at, hits_at + outcome_count) (rendered for the four outcomes of a take).
  static constexpr std::size_t hits_at = outcome_count;
  PrometheusOptions options_;
  detail::LabeledCounters<2 * outcome_count> decisions_;
  detail::LabeledCounters<1> errors_;
  detail::LabeledCounters<2> breakers_;
  detail::DurationHistogram latency_;
  detail::DurationHistogram calls_;
  detail::DurationHistogram round_trip_;
  detail::DurationHistogram connect_;
  detail::DurationHistogram tls_handshake_;
  detail::DurationHistogram first_decision_;
  detail::DurationHistogram start_to_first_decision_;
  std::atomic<std::uint64_t> cache_hits_{0};
  mutable std::mutex sketch_mutex_;
  detail::SpaceSaving sketch_;
};

}  // namespace ratelimit
