// Compiled, never run: a user's TU that instantiates the public API on every storage, built
// with the warnings strict users turn on (-Wshadow -Wconversion -Wsign-conversion, as errors).
// A consumer that finds the library through pkg-config gets it with -I, not -isystem, so a
// warning inside a header's template is the user's build failure, not ours to ignore.
#include <ratelimit/calendar.hpp>
#include <ratelimit/http.hpp>
#include <ratelimit/metrics.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis.hpp>
#include <ratelimit/redis/lease/storage.hpp>
#include <ratelimit/redis/regional/exchanger.hpp>
#include <ratelimit/rules.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace strict_user {

using namespace ratelimit;

template <class Limiter>
void use(Limiter& limiter) {
  Decision d = limiter.try_acquire("k", 2);
  d = limiter.peek("k");
  limiter.reset("k");
  limiter.try_acquire_async("k", 1, [](Decision) {});
  (void)rate_limit_headers(d, QuotaPolicy{});
}

template <class Storage, class C>
void every_algorithm(Storage storage, C clock) {
  TokenBucket<C, Storage> token({10, per_second(5)}, storage, clock, "token");
  LeakyBucket<C, Storage> leaky({10, per_second(5)}, storage, clock, "leaky");
  FixedWindow<C, Storage> fixed(per_second(5), storage, clock, "fixed");
  SlidingLog<C, Storage> log(per_second(5), storage, clock, "log");
  SlidingCounter<C, Storage> counter(per_second(5), storage, clock, "counter");
  use(token);
  use(leaky);
  use(fixed);
  use(log);
  use(counter);
  (void)try_acquire_all("k", 1, token, fixed);
  (void)token.refund("k", 1, clock.now());
  (void)counter.penalty("k", 2);
  Lockout login(SlidingLog<C, Storage>(per_second(5), storage, clock, "login"),
                std::chrono::hours(1));
  (void)login.try_acquire("k");
  (void)login.refund("k", 1, clock.now());
  (void)login.peek("k");
  ConcurrencyLimiter<C, Storage> inflight({3, std::chrono::seconds(30)}, storage, clock, "c");
  auto slot = inflight.try_acquire("k");
  (void)slot;
  CalendarQuota<C, Storage> quota({.limit = 100, .unit = CalendarUnit::month}, storage, clock,
                                  "quota");
  use(quota);
  auto metrics = std::make_shared<PrometheusExporter>();
  token.attach_listener(metrics, {.with_keys = true});
  (void)metrics->render();
}

template <class Storage>
void rules(Storage storage) {
  const std::vector<RulesSource> sources;
  RateLimitService<Storage> service(RulesConfig::from_strings(sources), storage);
  const RateLimitRequest request{"api", {{{{"path", "/login"}}}}};
  (void)service.should_rate_limit(request);
  service.should_rate_limit_async(request, [](RateLimitResponse) {});
}

// The far storages hold fewer models (docs/far.md): the windows and the buckets they state a
// bound for.
template <class Storage, class C>
void far_models(Storage storage, C clock) {
  TokenBucket<C, Storage> token({10, per_second(5)}, storage, clock, "token");
  FixedWindow<C, Storage> fixed(per_second(5), storage, clock, "fixed");
  SlidingCounter<C, Storage> counter(per_second(5), storage, clock, "counter");
  (void)token.try_acquire("k", 2);
  (void)fixed.try_acquire("k", 2);
  (void)counter.try_acquire("k", 2);
  token.try_acquire_async("k", 1, [](Decision) {});
}

void instantiate() {
  RegionalStorage regional(RegionalOptions{});
  RegionalExchanger exchanger(regional);
  far_models(regional, SystemClock{});
  LeakyBucket<SystemClock, RegionalStorage> leaky({10, per_second(5)}, regional);
  (void)leaky.try_acquire("k");
  far_models(LeasedStorage(LeaseOptions{}), ManualClock{});

  every_algorithm(InMemoryStorage{}, ManualClock{});
  every_algorithm(RedisStorage(RedisOptions{}), SystemClock{});
  every_algorithm(RedisClusterStorage(RedisClusterOptions{}), SystemClock{});
  rules(InMemoryStorage{});
  rules(RedisStorage(RedisOptions{}));
}

}  // namespace strict_user
