#pragma once
/// @file redis/regional/options.hpp
/// What a regional storage (redis/regional/storage.hpp) is configured with, and what it counts.

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "../../core/detail/validate.hpp"
#include "../options.hpp"

namespace ratelimit {

/// Another region: its name and how this region reaches that region's Redis (the exchange
/// pushes this region's admissions there). Thread safety: a plain value.
struct RemoteRegion {
  /// 1 to 64 bytes of [A-Za-z0-9_.-], unique among the regions (it names hash fields).
  std::string name;
  /// Its Redis, seen from this region (host, port, TLS, timeouts; key_prefix is ignored: every
  /// region uses the local options' prefix, so the hashes have one name everywhere).
  RedisOptions redis;
  /// Empty (the default): that region's Redis is the one `redis` names. Otherwise a Redis
  /// Cluster learned from these nodes ("host:port"): `redis` applies per node (host and port
  /// unused, db 0), and each push goes to the primary of its hash's slot.
  std::vector<std::string> cluster_seeds{};
};

/// The regional storage's configuration (docs/far.md). Thread safety: a plain value.
struct RegionalOptions {
  /// This region's name (as RemoteRegion::name).
  std::string region;
  /// This region's Redis: every decision is one round trip to it. `failure_policy` decides
  /// when it cannot: here local_fallback by default (each instance decides on its share, the
  /// limit divided by `fallback_divisor`, in process), not RedisStorage's fail_open, which
  /// would void the bounds while this Redis does not answer; fail_open and fail_closed as
  /// asked. Assigning a whole RedisOptions brings its own policy (fail_open unless set): set
  /// `local.failure_policy` after. `time_source` must be TimeSource::client: the window a
  /// request falls in is computed by the client, and every region must agree on it.
  RedisOptions local = [] {
    RedisOptions o;
    o.failure_policy = FailurePolicy::local_fallback;
    return o;
  }();
  /// Empty (the default): this region's Redis is the one `local` names. Otherwise a Redis
  /// Cluster learned from these nodes ("host:port"; docs/cluster.md): `local` applies per node
  /// (host and port unused, db 0), each decision goes to the primary of its key's slot, and the
  /// exchange keeps one dirty set per slot beside the hashes of that slot (docs/far.md, "On a
  /// Redis Cluster").
  std::vector<std::string> local_cluster_seeds{};
  /// The other regions (0 to 15). With none, the storage decides alone, with no bound on
  /// unseen units.
  std::vector<RemoteRegion> remotes;
  /// S: the exchange interval of the background exchanger (RegionalExchanger), 1 ms to 1 h.
  /// Also the `retry_after` of a request denied because its unseen units are used up. With
  /// the default U, a window binding is refused (std::invalid_argument naming what fits) when
  /// the regions could admit more than twice its limit: (R - 1) ceil(N (S + 2d) / W) > N. The
  /// default, 100 ms, fits per-second limits over up to 4 regions at d = 50 ms.
  std::chrono::milliseconds exchange_interval{100};
  /// d: the expected one-way delay to the other regions, 0 to 1 h. Only used to derive a
  /// binding's default unseen bound U = ceil(N (S + 2d) / W), with which a client staying in
  /// one region reaches its full limit (docs/far.md).
  std::chrono::milliseconds one_way_delay{50};
  /// Hashes one exchange round pushes at most per limiter (1 to 10^6): bounds the memory and
  /// the size of a round; the rest wait for the next round.
  std::int64_t exchange_batch = 10000;
  /// How long an exclusion granted by a region's Redis lasts unless renewed, 10 ms to 24 h. A
  /// region that fails to reach another in two rounds in a row asks every Redis it reaches
  /// (its own included) to let it exclude that region; granted by a strict majority of the
  /// regions, it leaves that region out of its unseen bound until it reaches it again
  /// (renewing the grants at each round meanwhile), so a cut-off region no longer throttles
  /// the regions that still talk to each other (docs/far.md, redis/regional/exchange.hpp).
  /// If this region cannot renew at a majority for this long, it stops excluding. Longer
  /// holds the exclusion through a loss of the majority; an excluder that dies keeps the
  /// excluded region fenced at the grantors this long.
  std::chrono::milliseconds exclusion_lease{30000};
};

/// What a regional storage counts, since construction (shared by every copy).
/// Thread safety: a plain value.
struct RegionalStats {
  std::uint64_t decisions = 0;       ///< decisions this region's Redis made
  std::uint64_t unseen_denials = 0;  ///< of those, denied because U units were unseen
  std::uint64_t degraded = 0;        ///< decisions the failure policy made (local Redis down)
  std::uint64_t exchanges = 0;       ///< exchange rounds finished
  std::uint64_t units_pushed = 0;    ///< units acknowledged by other regions
  std::uint64_t push_failures = 0;   ///< pushes that failed (their units are pushed again)
  std::uint64_t partitioned = 0;     ///< other regions whose last exchange failed, now
  std::uint64_t excluded = 0;        ///< other regions left out of the unseen bound, now
};

namespace detail {

/// Throws std::invalid_argument naming the field unless `name` is a valid region name.
inline void check_region_name(std::string_view field, const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 64 &&
                  name.find_first_not_of(
                      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                      "0123456789_.-") == std::string::npos;
  if (!ok)
    throw std::invalid_argument(std::string(field) + " = \"" + name +
                                "\": must be 1 to 64 bytes of [A-Za-z0-9_.-]");
}

/// Throws std::invalid_argument naming the first bad field of `o`.
inline void check_regional_options(const RegionalOptions& o) {
  using std::chrono::milliseconds;
  check_region_name("region", o.region);
  if (o.local.time_source != TimeSource::client)
    throw std::invalid_argument(
        "local.time_source = redis: a regional storage needs TimeSource::client (the client "
        "computes each request's window, and every region must agree on it)");
  if (o.remotes.size() > 15)
    invalid("remotes (count)", static_cast<std::int64_t>(o.remotes.size()), "must be in [0, 15]");
  for (std::size_t i = 0; i < o.remotes.size(); ++i) {
    const std::string field = "remotes[" + std::to_string(i) + "].name";
    check_region_name(field, o.remotes[i].name);
    if (o.remotes[i].name == o.region)
      throw std::invalid_argument(field + " = \"" + o.region + "\": the local region's own name");
    for (std::size_t j = 0; j < i; ++j)
      if (o.remotes[j].name == o.remotes[i].name)
        throw std::invalid_argument(field + " = \"" + o.remotes[i].name +
                                    "\": named twice (also remotes[" + std::to_string(j) + "])");
  }
  if (o.exchange_interval < milliseconds{1} || o.exchange_interval > std::chrono::hours{1})
    invalid("exchange_interval (ms)", o.exchange_interval.count(), "must be in [1 ms, 1 h]");
  if (o.one_way_delay < milliseconds{0} || o.one_way_delay > std::chrono::hours{1})
    invalid("one_way_delay (ms)", o.one_way_delay.count(), "must be in [0, 1 h]");
  if (o.exchange_batch < 1 || o.exchange_batch > 1'000'000)
    invalid("exchange_batch", o.exchange_batch, "must be in [1, 1000000]");
  if (o.exclusion_lease < milliseconds{10} || o.exclusion_lease > std::chrono::hours{24})
    invalid("exclusion_lease (ms)", o.exclusion_lease.count(), "must be in [10 ms, 24 h]");
}

}  // namespace detail
}  // namespace ratelimit
