// Builds, links and runs against ratelimit::calendar (date-tz): a quota beside a rate.
#include <ratelimit/calendar.hpp>
#include <ratelimit/ratelimit.hpp>

int main() {
  ratelimit::CalendarQuota<> quota(
      {.limit = 2, .unit = ratelimit::CalendarUnit::month, .time_zone = "Europe/Madrid"});
  ratelimit::TokenBucket<ratelimit::SystemClock> rate({2, ratelimit::per_second(2)});
  return ratelimit::try_acquire_all("k", 1, quota, rate) ? 0 : 1;
}
