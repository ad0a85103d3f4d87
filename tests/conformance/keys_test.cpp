// Conformance, keys (README, "Semantics shared by all"): reset puts a key back to fresh; keys are
// arbitrary bytes (empty, NUL, 10 KB) and never collide; limiters of different algorithms or
// different names never see each other's keys on a shared storage. Written once, run for every
// Case<Algo, Backend> (conformance.hpp), or for every backend with every algorithm of
// rltest::Algorithms on one storage.
//
// The key and name checks use a limit of one unit per minute: a key's first request is admitted
// iff no other key or limiter has spent the same state before it.
#include <chrono>
#include <cstddef>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

#include "conformance.hpp"
#include "support/keys.hpp"

using namespace std::chrono_literals;
using ratelimit::ManualClock;
using rltest::fresh;
using rltest::conformance::Cases;
using rltest::conformance::Row;

namespace {

const rltest::Shape one_per_minute{1, ratelimit::per_minute(1)};

}  // namespace

TEMPLATE_LIST_TEST_CASE("reset puts a key back to fresh and touches no other key",
                        "[conformance][any_storage]", Cases) {
  constexpr auto row = TestType::Row::reset;
  INFO(TestType::label());
  ManualClock clock;
  auto limiter = TestType::make(clock);
  const auto limit = TestType::limit;
  clock.set(row.at);
  CHECK(limiter.try_acquire("k", row.k_cost) == row.k_spent);
  CHECK(limiter.try_acquire("j", row.j_cost) == row.j_spent);
  clock.set(row.reset_at);
  CHECK(limiter.peek("k") == row.k_before);
  limiter.reset("k");
  CHECK(limiter.peek("k") == fresh(limit));
  CHECK(limiter.try_acquire("k", row.k_cost) == row.k_again);
  CHECK(limiter.peek("j") == row.j_after);
  // A key never seen is already fresh; resetting it keeps it so.
  limiter.reset("never seen");
  CHECK(limiter.peek("never seen") == fresh(limit));
}

TEMPLATE_LIST_TEST_CASE("Keys are arbitrary bytes and never collide",
                        "[conformance][any_storage][keys]", Cases) {
  using Algo = typename TestType::Algo;
  INFO(TestType::label());
  const auto keys = rltest::awkward_keys();
  ManualClock clock;
  auto limiter = Algo::make(one_per_minute, TestType::Backend::make(), clock);
  // Each key's first request finds its unit unspent by any key before it...
  for (std::size_t i = 0; i < keys.size(); ++i) {
    INFO("key #" << i << " (" << keys[i].size() << " bytes)");
    CHECK(limiter.peek(keys[i]).remaining == 1);
    CHECK(limiter.try_acquire(keys[i]).allowed);
  }
  // ... and each key kept its own state.
  for (std::size_t i = 0; i < keys.size(); ++i) {
    INFO("key #" << i << " (" << keys[i].size() << " bytes)");
    CHECK_FALSE(limiter.try_acquire(keys[i]).allowed);
  }
  // Resetting one key touches no other: "a" against "a\0b" and "a\0".
  limiter.reset("a");
  for (std::size_t i = 0; i < keys.size(); ++i) {
    INFO("key #" << i << " (" << keys[i].size() << " bytes)");
    CHECK(limiter.peek(keys[i]).remaining == (keys[i] == "a" ? 1 : 0));
  }
}

TEMPLATE_LIST_TEST_CASE("The default key is the empty key", "[conformance][any_storage][keys]",
                        Cases) {
  using Algo = typename TestType::Algo;
  INFO(TestType::label());
  ManualClock clock;
  auto limiter = Algo::make(one_per_minute, TestType::Backend::make(), clock);
  CHECK(limiter.try_acquire().allowed);
  CHECK(limiter.peek("").remaining == 0);
  CHECK_FALSE(limiter.try_acquire("").allowed);
  CHECK(limiter.peek(std::string(1, '\0')).remaining == 1);  // "\0" is not ""
  limiter.reset();
  CHECK(limiter.peek().remaining == 1);
}

TEMPLATE_LIST_TEST_CASE(
    "Limiters of one algorithm share keys on a storage only under the same name",
    "[conformance][any_storage][isolation]", Cases) {
  using Algo = typename TestType::Algo;
  using namespace std::string_literals;
  INFO(TestType::label());
  ManualClock clock;
  auto storage = TestType::Backend::make();
  // Pairs (name, key) that a careless "name:key" encoding would merge.
  const std::vector<std::pair<std::string, std::string>> slots = {
      {""s, "k"s},    {"a"s, "k"s},    {"b"s, "k"s},   {"a"s, "b:c"s}, {"a:b"s, "c"s},
      {"a:"s, "b"s},  {"a"s, ":b"s},   {""s, "x"s},    {"x"s, ""s},    {"a\0b"s, "c"s},
      {"a"s, "\0b"s}, {"a"s, "b\0c"s}, {"{a}"s, "b"s}, {"a"s, "}b"s},
  };
  for (const auto& [name, key] : slots) {
    INFO("name " << name.size() << " bytes, key " << key.size() << " bytes");
    auto limiter = Algo::make(one_per_minute, storage, clock, name);
    CHECK(limiter.try_acquire(key).allowed);
  }
  // A second limiter of the same algorithm and name is the same policy: it sees the spent unit.
  for (const auto& [name, key] : slots) {
    INFO("name " << name.size() << " bytes, key " << key.size() << " bytes");
    auto again = Algo::make(one_per_minute, storage, clock, name);
    CHECK_FALSE(again.try_acquire(key).allowed);
    CHECK(again.peek(key).remaining == 0);
  }
}

TEMPLATE_LIST_TEST_CASE(
    "Limiters of different algorithms on one storage never see each other's keys",
    "[conformance][any_storage][isolation]", Backends) {
  INFO("storage: " << TestType::name);
  ManualClock clock;
  auto storage = TestType::make();
  clock.set(7s);
  // Each algorithm in turn spends its whole limit of "k" as on a fresh key: nothing the
  // algorithms before it spent is visible to it.
  rltest::for_each_algorithm([&]<class Algo>() {
    INFO("algorithm: " << Algo::name);
    auto limiter = Algo::make(Row<Algo>::shape, storage, clock);
    CHECK(limiter.try_acquire("k", Row<Algo>::shape.limit) == Row<Algo>::whole_at_7s);
  });
  rltest::for_each_algorithm([&]<class Algo>() {
    INFO("algorithm: " << Algo::name);
    auto limiter = Algo::make(Row<Algo>::shape, storage, clock);
    CHECK_FALSE(limiter.try_acquire("k").allowed);
    CHECK(limiter.peek("k").remaining == 0);
  });
  // Resetting one algorithm's "k" leaves the others' alone: reset in turn, each is fresh and
  // every one not reset yet is still spent.
  const std::size_t count = std::tuple_size_v<rltest::Algorithms>;
  for (std::size_t round = 0; round < count; ++round) {
    std::size_t index = 0;
    rltest::for_each_algorithm([&]<class Algo>() {
      INFO("round " << round << ", algorithm: " << Algo::name);
      auto limiter = Algo::make(Row<Algo>::shape, storage, clock);
      if (index == round) limiter.reset("k");
      if (index++ <= round) {
        CHECK(limiter.peek("k") == fresh(Row<Algo>::shape.limit));
      } else {
        CHECK_FALSE(limiter.peek("k").allowed);
      }
    });
  }
}
