// The storage suite runs on the cluster "with keys spread over all three
// primaries". Self-contained, so it holds whatever order the cases run in: it decides every
// client key the suite uses, with every algorithm, through the suite's own backend
// (ClusterBackend: a fresh key prefix), and finds that storage's keys on every primary. Which
// primary owns a key depends only on the key's hash tag, so the suite's cases, deciding the
// same keys, spread the same way.
#include <chrono>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

#include "cluster_admin.hpp"
#include "support/algorithms.hpp"
#include "support/keys.hpp"

TEST_CASE("The storage suite's keys land on every primary of the cluster", "[cluster][spread]") {
  auto storage = ClusterBackend::make();
  ratelimit::ManualClock clock;
  // The conformance suite's awkward keys, plus the plain ones of the other suite sources
  // (conformance scenarios, worked examples, differential replay, concurrency).
  std::vector<std::string> keys = rltest::awkward_keys();
  for (const char* k : {"k", "j", "other", "never seen", "yet another", "user", "alice", "bob",
                        "hot", "key-0", "key-7"})
    keys.emplace_back(k);
  keys.emplace_back(std::string("c\0d", 3));
  // One unit per minute: each key's first request is admitted, and decided by the cluster.
  rltest::for_each_algorithm([&]<class Algo>() {
    INFO("algorithm: " << Algo::name);
    auto limiter = Algo::make(rltest::Shape{1, ratelimit::per_minute(1)}, storage, clock);
    for (const auto& key : keys) {
      INFO("key of " << key.size() << " bytes");
      const auto d = limiter.try_acquire(key);
      CHECK_FALSE(d.degraded);
      CHECK(d.allowed);
    }
  });
  const auto primaries = rltest::live_primaries();
  REQUIRE(primaries.size() >= 3);
  for (const auto& p : primaries) {
    INFO("primary " << p.address.address());
    CHECK(rltest::count_keys(p.address, storage.options().key_prefix) > 0);
  }
}
