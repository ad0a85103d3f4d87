// A limiter with a single state (no key, or one configured key) decides without hashing
// anything, which saves a third of a decision on a short key. `limiter.bind_key(key)` fixes one
// key: its decisions are the limiter's for that key (one state, listeners, explicit time), on every
// storage. A token bucket of 3 refilled at 1 per second: one token every 1000 ms.
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>

#include "../support/backends.hpp"
#include "../support/counting_listener.hpp"

using namespace std::chrono_literals;

namespace bound_key_test {

template <class Backend>
auto three_per_second(typename Backend::Storage storage, ratelimit::ManualClock clock) {
  return ratelimit::TokenBucket<ratelimit::ManualClock, typename Backend::Storage>(
      {3, ratelimit::per_second(1)}, std::move(storage), clock, "bound");
}

}  // namespace bound_key_test

TEMPLATE_LIST_TEST_CASE("A bound key decides the same state as the key it was bound to",
                        "[bound_key][token_bucket][any_storage]", Backends) {
  INFO("storage: " << TestType::name);
  ratelimit::ManualClock clock;
  clock.set(10s);
  auto limiter = bound_key_test::three_per_second<TestType>(TestType::make(), clock);
  auto counts = std::make_shared<rltest::CountingListener>();
  limiter.attach_listener(counts);
  // Bound to "tenant-7" and to the empty key (a limiter used without a key).
  const std::string key = GENERATE(as<std::string>{}, "tenant-7", "");
  INFO("key: '" << key << "'");
  auto bound = limiter.bind_key(key);
  CHECK(bound.key() == key);

  CHECK(bound.try_acquire().remaining == 2);       // 3 - 1
  CHECK(limiter.try_acquire(key).remaining == 1);  // the same bucket: 2 - 1
  const auto denied = bound.try_acquire(2);        // 1 token for a cost of 2
  CHECK_FALSE(denied.allowed);
  CHECK(denied.retry_after == 1000ms);  // 1 more token at 1 per 1000 ms
  CHECK(bound.peek().remaining == 1);   // the denial spent nothing
  // At an explicit 11 s (the clock still reads 10 s): 1 + 1 = 2 tokens, a cost of 2 fits.
  CHECK(bound.try_acquire(2, clock.now() + 1000ms).allowed);
  // Peeked at the clock's 10 s, decided at the key's latest time, 11 s: 2 - 2 = 0 left.
  CHECK(limiter.peek(key).remaining == 0);
  CHECK_THROWS_AS(bound.try_acquire(0), std::invalid_argument);

  // The listener heard the bound key's decisions too: 3 through the handle, 1 through the key
  // (peeks are not decisions); 3 admitted, 1 limited.
  CHECK(counts->count("bound", ratelimit::Outcome::allowed) == 3);
  CHECK(counts->count("bound", ratelimit::Outcome::limited) == 1);
}
