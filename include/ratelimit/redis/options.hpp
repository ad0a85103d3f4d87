#pragma once
/// @file redis/options.hpp
/// How a `RedisStorage` reaches Redis, and what it does when Redis fails.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ratelimit {

/// What a decision does when Redis cannot make it (down, slow past the command timeout, or an
/// error reply). Every such decision has `degraded = true`.
enum class FailurePolicy {
  /// Admit (the default: the limiter must never take the API down). limit = the configured
  /// limit, remaining = limit, every duration 0.
  fail_open,
  /// Deny. remaining = 0; retry_after = the time until Redis is tried again (at least 1 ms).
  fail_closed,
  /// Decide on a per-instance in-memory limit: the shared limit (and rate) divided by
  /// `RedisOptions::fallback_divisor`, typically the expected number of instances.
  local_fallback,
};

/// Where a decision's time comes from.
enum class TimeSource {
  /// The limiter's clock (`now` passed to the binding; the default). Hosts must agree on time:
  /// use `SystemClock` (NTP-synchronized) across hosts, never `SteadyClock`, whose epoch is
  /// per host. Required for tests with `ManualClock`.
  client,
  /// Redis's own clock (`TIME` inside the script; Unix epoch, whole microseconds). One time line
  /// for every host whatever their clocks say; the limiter's clock is then used only by the
  /// local fallback and by `acquire`'s waiting.
  redis,
};

/// Why Redis could not decide.
enum class RedisFailureKind {
  connect,         ///< no connection within connect_timeout (refused, unreachable, AUTH failed)
  timeout,         ///< no reply within command_timeout
  io,              ///< the connection broke (reset, closed, protocol error)
  reply,           ///< Redis answered an error (e.g. WRONGTYPE: the key holds another type)
  protocol,        ///< the script's reply had an unexpected shape (a bug or a foreign script)
  pool_exhausted,  ///< not used since decisions share pipelined connections (kept for code that
                   ///< names it)
  circuit_open,    ///< not tried: Redis failed recently and the back-off has not elapsed
  overloaded,      ///< not tried: `max_in_flight` decisions were already waiting on Redis
  /// Not a failure: a warning about how Redis is run (an eviction policy that can evict the
  /// library's keys, which silently resets limits). Reported once per storage.
  warning,
};

/// One failure, as passed to `RedisOptions::on_failure`.
/// Thread safety: a plain value.
struct RedisFailure {
  RedisFailureKind kind;
  std::string message;  ///< human-readable: the node, the Redis or socket error
};

/// Counters since the storage was created, shared by every copy.
/// Thread safety: a plain value (a snapshot of atomic counters).
struct RedisStats {
  std::uint64_t decisions = 0;           ///< decisions Redis made
  std::uint64_t degraded_decisions = 0;  ///< decisions the failure policy made
  std::uint64_t failures = 0;            ///< failed attempts to reach Redis (not short circuits)
  std::uint64_t short_circuits = 0;      ///< decisions degraded without trying (circuit open)
  std::uint64_t script_loads = 0;        ///< scripts sent in full after NOSCRIPT
  std::uint64_t overloaded = 0;          ///< decisions degraded at once by `max_in_flight`
  std::uint64_t in_flight = 0;           ///< decisions waiting on Redis right now
  bool circuit_open = false;             ///< Redis is currently being avoided
  std::uint64_t cache_hits = 0;     ///< denials answered by the over-limit cache (Redis not asked)
  std::uint64_t cache_entries = 0;  ///< keys the over-limit cache holds now
  std::uint64_t pre_limited = 0;    ///< decisions denied by the local pre-limit (Redis not asked)
};

/// The over-limit cache (docs/redis.md, "Hot keys"): once Redis denies a key, this instance
/// remembers the key's state as Redis reported it and answers that key's next requests itself,
/// with the model's decision on that state, for as long as it denies them; a request it would
/// admit goes to Redis (one at a time per key: the others wait for its answer). Exact for one
/// instance: it denies exactly what Redis would deny had nothing else happened to the key, and
/// never admits. Other instances' spending only makes Redis deny more; their `reset` of a key
/// reaches this instance when its cached denial ends (its retry_after) or on
/// `RedisStorage::clear_over_limit_cache`. Single-key decisions only (`try_acquire`, `peek`,
/// `acquire`, their non-blocking forms; batches teach it but do not ask it; `decide_all` and rule
/// sets neither). With TimeSource::redis the cached state's time is Redis's: it is advanced by
/// this host's steady clock from when the request was sent, plus 1 ms and 0.1 % of the entry's
/// age for the two clocks' drift, so the cache ends its denials early, never late.
/// Thread safety: a plain value.
struct RedisOverLimitCacheOptions {
  /// Off by default: a reset made through another instance would wait for the entry's end.
  bool enabled = false;
  /// Keys held at most, 1..10^8, (client key, limiter) pairs; each costs about 300 bytes plus
  /// its key. When full, the entry that ends first makes room. Keys over 256 bytes are not held.
  std::size_t capacity = 65'536;
};

/// TLS to Redis (OpenSSL). Off unless `enabled`; then the server's certificate is verified
/// against `ca_file`/`ca_dir` (or the system's default store when both are empty) and its host
/// name (or IP address) against `server_name`. Files are read each time a connection opens, so
/// a certificate replaced on disk is used by the next connection without a restart.
/// Thread safety: a plain value.
struct RedisTlsOptions {
  bool enabled = false;
  std::string ca_file;    ///< PEM bundle of the CAs to trust
  std::string ca_dir;     ///< directory of hashed CA certificates (openssl rehash)
  std::string cert_file;  ///< client certificate (PEM) for mutual TLS; empty: none
  std::string key_file;   ///< its private key (PEM); required with cert_file
  /// The name the certificate must carry, also sent as SNI (not for an IP address); empty: the
  /// host connected to (for Sentinel and Cluster, each node's announced address).
  std::string server_name;
  /// false turns every check of the server's certificate off: for tests only, never production.
  bool verify_peer = true;
};

/// Redis made highly available by Sentinel: the primary of `master_name` is asked from the
/// sentinels (in order; the first that answers wins) when the storage first connects and again
/// after the primary fails (a connection lost, a timeout, a -READONLY reply: a demoted primary).
/// Used when `sentinels` is not empty; `RedisOptions::host`, `port` and `unix_socket` are then
/// ignored. The sentinels get their own credentials and the storage's `tls` settings.
/// Thread safety: a plain value.
struct RedisSentinelOptions {
  // Every member has an initializer, so `{{"host:port", ...}, "name"}` leaves the credentials
  // out without -Wmissing-field-initializers.
  std::vector<std::string> sentinels{};  ///< "host:port" of each sentinel
  std::string master_name{};             ///< the name the sentinels monitor the primary under
  std::string username{};                ///< sentinels' ACL user (empty: the default user)
  std::string password{};                ///< sentinels' AUTH password when not empty
};

/// Configuration of a `RedisStorage`. Every field has a usable default.
/// Thread safety: a plain value; `on_failure` is called from the deciding threads.
struct RedisOptions {
  std::string host = "127.0.0.1";  ///< host name or address
  int port = 6379;                 ///< TCP port, 1..65535
  /// A Unix domain socket path (Redis `unixsocket`); when not empty, host and port are ignored.
  std::string unix_socket;
  /// ACL user name (Redis 6+): `AUTH username password` on connect; empty: the default user.
  std::string username;
  std::string password;           ///< AUTH on connect when not empty
  RedisTlsOptions tls;            ///< TLS (off by default)
  RedisSentinelOptions sentinel;  ///< find the primary through Sentinel (off by default)
  int db = 0;                     ///< SELECT on connect when not 0; 0..(databases - 1)
  /// Prepended to every Redis key. Must not contain '{' or '}' (the client key's hash tag
  /// follows it). Give each deployment, or each test, its own.
  std::string key_prefix = "ratelimit:";
  /// Per connection attempt, >= 1 ms; a decision that must open a connection gets at most what
  /// is left of its command_timeout for it.
  std::chrono::milliseconds connect_timeout{200};
  /// The most one decision waits on Redis, >= 1 ms: pool, connect, replies and a script reload
  /// together (plus under 1 ms of rounding). A degraded decision takes no longer.
  std::chrono::milliseconds command_timeout{100};
  /// Connections per node, 1..64. Decisions from every thread share them: the storage's I/O
  /// thread writes whatever is queued as one pipeline, so one or two carry any load; more only
  /// keep a slow reply (a huge batch) from delaying the decisions queued behind it.
  std::size_t pool_size = 2;
  /// Cold start: when true, the storage's constructor calls `warm_up()` (connect, TLS, AUTH,
  /// SCRIPT LOAD of every algorithm's script, on every primary of a cluster), waiting at most
  /// connect_timeout + command_timeout, so that the first decision is one round trip. It never
  /// throws for a Redis that is down or slow: the constructor returns and `failure_policy`
  /// decides as usual. Off by default: construction then does not touch the network (and the
  /// first decision still costs one round trip: it sends the script's body with EVAL).
  bool warm_up = false;
  /// Backpressure: the most decisions (a batch, a rule set's request: one each) waiting on
  /// Redis at once, 1..10^7. Beyond it a decision is decided at once by `failure_policy`
  /// (`RedisFailureKind::overloaded`), so a stalled Redis never queues work without bound.
  std::size_t max_in_flight = 10'000;
  /// Backpressure in bytes: what decisions in flight may hold together (their Redis keys and
  /// arguments, about three times over; a client key over 256 bytes is sent as its digest, and
  /// kept in flight only for the local fallback, then counted once), >= 1 MiB. Past it a
  /// decision is decided at once by `failure_policy` (`overloaded`), so a flood of huge keys
  /// while Redis stalls stays bounded.
  std::size_t max_in_flight_bytes = std::size_t{256} << 20;
  FailurePolicy failure_policy = FailurePolicy::fail_open;
  /// The per-instance limit (of local_fallback and of `pre_limit`) is the shared one divided by
  /// this, at least 1 (limits, capacities and rates; counts round down to at least 1), unless a
  /// binding is given its own (`RedisStorage::bind(name, params, local)`). 1..10^6.
  std::int64_t fallback_divisor = 1;
  /// The local pre-limit (docs/redis.md, "Hot keys"): every decision is first dry-run on the
  /// per-instance limit; a request it denies gets that denial (its limit and times are the
  /// per-instance limit's) without asking Redis; a request Redis admits also spends the
  /// per-instance limit, one Redis denies does not. Requests in flight together may pass it by
  /// their number (it is checked before Redis answers); the shared limit stays exact. For
  /// single-key decisions and `decide_all` (rule sets), not for batches. Off by default.
  bool pre_limit = false;
  /// See `RedisOverLimitCacheOptions`.
  RedisOverLimitCacheOptions over_limit_cache;
  TimeSource time_source = TimeSource::client;
  /// Added to every key's TTL beyond the time its state stops mattering, so a host whose clock
  /// lags (or a fake clock in tests) never sees state vanish early. 0..366 days.
  std::chrono::milliseconds ttl_margin{1000};
  /// After a failure, Redis is avoided for this long (decisions degrade at once), then one
  /// decision probes it; each failed probe doubles the back-off up to `breaker_max_backoff`.
  std::chrono::milliseconds breaker_backoff{100};
  std::chrono::milliseconds breaker_max_backoff{2000};  ///< >= breaker_backoff
  /// Called on every failure to reach Redis (not on short circuits), from the deciding thread
  /// or the storage's I/O thread. Must be thread-safe and quick (it delays every decision on
  /// the I/O thread); exceptions it throws are swallowed.
  std::function<void(const RedisFailure&)> on_failure;
};

}  // namespace ratelimit
