#pragma once
/// @file backends.hpp
/// The storage parameterization of the storage suite (RATELIMIT_SUITE_SOURCES, listed in
/// tests/CMakeLists.txt): every `TEMPLATE_LIST_TEST_CASE(..., Backends)` runs once per backend
/// listed here, and every conformance case once per algorithm and backend (the product
/// `rltest::conformance::Cases`, tests/conformance/conformance.hpp). A backend is a fixed
/// contract (global namespace):
///
///   name        a short label for messages ("in-memory", "redis")
///   Storage     the storage type the limiters are instantiated with
///   make()      a fresh storage, isolated from every other test case's
///   resolution  the time granularity the backend decides at; the parameterized suite uses whole
///               milliseconds and rates whose durations are whole milliseconds, so that a
///               ms-resolution backend passes it unchanged
///
/// The core executable builds the suite with the in-memory backend only; the Redis executable
/// builds the same sources with RATELIMIT_TEST_WITH_REDIS, which runs it on `RedisBackend` alone
/// (redis_backend.hpp, the same members); the cluster executable with
/// RATELIMIT_TEST_WITH_CLUSTER, on `ClusterBackend` alone (cluster_backend.hpp). One backend per
/// executable: the in-memory instantiations are compiled once, not once per executable.

#include <chrono>
#include <tuple>

#include <ratelimit/ratelimit.hpp>

/// The embedded default storage.
struct InMemoryBackend {
  static constexpr const char* name = "in-memory";
  using Storage = ratelimit::InMemoryStorage;
  /// A new storage shares nothing with any other, so each test case starts from fresh keys.
  static Storage make() { return Storage{}; }
  static constexpr std::chrono::nanoseconds resolution{1};
};

#if defined(RATELIMIT_TEST_WITH_CLUSTER)
#include "cluster_backend.hpp"  // the cluster helper's ClusterBackend (tests/cluster/)
using Backends = std::tuple<ClusterBackend>;
#elif defined(RATELIMIT_TEST_WITH_REDIS)
#include "redis_backend.hpp"  // the Redis helper's RedisBackend, with the same members
using Backends = std::tuple<RedisBackend>;
#else
using Backends = std::tuple<InMemoryBackend>;
#endif
