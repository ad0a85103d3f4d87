// Issue 2: "Two limiters of different algorithms or different names never see each other's state
// on a shared storage" and "Keys are arbitrary bytes (empty, very long, with NUL or any other
// byte) and never collide", run against every storage backend. Every limiter here admits one
// unit per minute, so a key's first request is admitted iff no other key or limiter has spent
// the same state before it.
#include <chrono>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/manual_clock.hpp>

#include "../support/algorithms.hpp"
#include "../support/backends.hpp"
#include "../support/expect.hpp"

using namespace std::chrono_literals;
using ratelimit::ManualClock;
using rltest::admitted;
using rltest::denied;

namespace {

const rltest::Shape one_per_minute{1, ratelimit::per_minute(1)};

std::vector<std::string> awkward_keys() {
  using namespace std::string_literals;
  // clang-format off
  std::vector<std::string> keys = {
      ""s,      "a"s,         "a\0b"s,     "a\0"s,      "\0"s,     "\0\0"s,         "b"s,
      "{"s,     "}"s,         "{a}"s,      "{a}b"s,     "a{b}"s,   "{}"s,           ":"s,
      "a:b"s,   "a:"s,        ":a"s,       "a::b"s,     "a b"s,    " a"s,           "\r\n"s,
      "\xff"s,  "\xff\xfe"s,  "\x80"s,     "\xc3\xa9"s, "e\xcc\x81"s, "*1\r\n$4\r\nPING\r\n"s,
      "token_bucket"s, "token_bucket:a"s, "sliding_log:"s, "%s%n"s, "\\"s, "'\""s,
  };
  // clang-format on
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte.push_back(static_cast<char>(b));
  keys.push_back(every_byte);
  keys.push_back(every_byte.substr(1));
  const std::string long_key(10 * 1024, 'x');
  keys.push_back(long_key);
  keys.push_back(long_key + "y");
  keys.push_back(long_key.substr(1) + "y");
  keys.push_back(std::string(10 * 1024, '\0'));
  return keys;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE(
    "Limiters of the five algorithms on one storage never see each other's "
    "keys",
    "[token_bucket][leaky_bucket][fixed_window][sliding_log][sliding_counter]"
    "[isolation][any_storage]",
    Backends) {
  INFO("storage: " << TestType::name);
  using S = typename TestType::Storage;
  ManualClock clock;
  S storage = TestType::make();
  auto tb = rltest::TokenBucketAlgo::make(one_per_minute, storage, clock);
  auto lb = rltest::LeakyBucketAlgo::make(one_per_minute, storage, clock);
  auto fw = rltest::FixedWindowAlgo::make(one_per_minute, storage, clock);
  auto sl = rltest::SlidingLogAlgo::make(one_per_minute, storage, clock);
  auto sc = rltest::SlidingCounterAlgo::make(one_per_minute, storage, clock);
  clock.set(30s);
  // Each spends its one unit of "k": buckets refill in 60 s, the fixed window (minute 0) ends in
  // 30 s, the log's entry leaves in 60 s, the counter is fresh at (0 + 2) min - 30 s = 90 s.
  CHECK(tb.try_acquire("k") == admitted(1, 0, 60s));
  CHECK(lb.try_acquire("k") == admitted(1, 0, 60s, 0ms));
  CHECK(fw.try_acquire("k") == admitted(1, 0, 30s));
  CHECK(sl.try_acquire("k") == admitted(1, 0, 60s));
  CHECK(sc.try_acquire("k") == admitted(1, 0, 90s));
  CHECK_FALSE(tb.try_acquire("k"));
  CHECK_FALSE(lb.try_acquire("k"));
  CHECK_FALSE(fw.try_acquire("k"));
  CHECK_FALSE(sl.try_acquire("k"));
  CHECK_FALSE(sc.try_acquire("k"));
  // Resetting one limiter's key leaves the others' alone.
  tb.reset("k");
  CHECK(tb.peek("k") == admitted(1, 1, 0ms));
  CHECK_FALSE(lb.peek("k"));
  CHECK_FALSE(fw.peek("k"));
  CHECK_FALSE(sl.peek("k"));
  CHECK_FALSE(sc.peek("k"));
}

TEMPLATE_LIST_TEST_CASE(
    "Limiters of one algorithm share keys on a storage only under the same "
    "name",
    "[token_bucket][leaky_bucket][fixed_window][sliding_log][sliding_counter]"
    "[isolation][any_storage]",
    Backends) {
  INFO("storage: " << TestType::name);
  using S = typename TestType::Storage;
  using namespace std::string_literals;
  rltest::for_each_algorithm([]<class Algo>() {
    INFO("algorithm: " << Algo::name);
    ManualClock clock;
    S storage = TestType::make();
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
      auto again = Algo::make(one_per_minute, storage, clock, name);
      CHECK_FALSE(again.try_acquire(key).allowed);
      CHECK(again.peek(key).remaining == 0);
    }
  });
}

TEMPLATE_LIST_TEST_CASE("Keys are arbitrary bytes and never collide",
                        "[token_bucket][leaky_bucket][fixed_window][sliding_log][sliding_counter]"
                        "[isolation][keys][any_storage]",
                        Backends) {
  INFO("storage: " << TestType::name);
  const auto keys = awkward_keys();
  rltest::for_each_algorithm([&]<class Algo>() {
    INFO("algorithm: " << Algo::name);
    ManualClock clock;
    auto limiter = Algo::make(one_per_minute, TestType::make(), clock);
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
  });
}

TEMPLATE_LIST_TEST_CASE("The default key is the empty key",
                        "[token_bucket][leaky_bucket][fixed_window][sliding_log][sliding_counter]"
                        "[isolation][keys][any_storage]",
                        Backends) {
  INFO("storage: " << TestType::name);
  rltest::for_each_algorithm([]<class Algo>() {
    INFO("algorithm: " << Algo::name);
    ManualClock clock;
    auto limiter = Algo::make(one_per_minute, TestType::make(), clock);
    CHECK(limiter.try_acquire().allowed);
    CHECK(limiter.peek("").remaining == 0);
    CHECK_FALSE(limiter.try_acquire("").allowed);
    CHECK(limiter.peek(std::string(1, '\0')).remaining == 1);  // "\0" is not ""
    limiter.reset();
    CHECK(limiter.peek().remaining == 1);
  });
}
