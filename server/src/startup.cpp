#include "startup.hpp"

#include <cmath>
#include <cstdio>
#include <exception>
#include <stdexcept>

namespace ratelimit::server {

std::chrono::nanoseconds backoff_wait(const StartupSettings& s, int attempt, double unit) {
  using std::chrono::nanoseconds;
  // jpillora/backoff ForAttempt: Min defaults to 100ms and Max to 10s when not positive.
  const nanoseconds min =
      s.initial_interval.count() > 0 ? s.initial_interval : nanoseconds{100'000'000};
  const nanoseconds max = s.max_interval.count() > 0 ? s.max_interval : nanoseconds{10'000'000'000};
  if (min >= max) return max;
  const double minf = static_cast<double>(min.count());
  double d = minf * std::pow(2.0, attempt);
  d = unit * (d - minf) + minf;  // the jitter: uniform in [min, min * 2^attempt)
  if (!(d < static_cast<double>(max.count()))) return max;
  const nanoseconds out{static_cast<std::int64_t>(d)};
  return out < min ? min : out;
}

std::string go_duration_text(std::chrono::nanoseconds d) {
  // time.Duration(ms rounded).String(): "0s"; under a second "Nms"; else [Nh][Nm]S.fffs with
  // trailing zeros of the fraction dropped.
  const std::int64_t ms = (d.count() + 500'000) / 1'000'000;
  if (ms == 0) return "0s";
  if (ms < 1000) return std::to_string(ms) + "ms";
  std::string out;
  const std::int64_t h = ms / 3'600'000, m = ms / 60'000 % 60, s = ms / 1000 % 60, frac = ms % 1000;
  if (h > 0) out += std::to_string(h) + "h";
  if (h > 0 || m > 0) out += std::to_string(m) + "m";
  out += std::to_string(s);
  if (frac != 0) {
    char buf[8];
    std::snprintf(buf, sizeof buf, ".%03lld", static_cast<long long>(frac));
    std::string f = buf;
    while (f.back() == '0') f.pop_back();
    out += f;
  }
  return out + "s";
}

void wait_for_storage(const std::string& target, const StartupSettings& settings,
                      const StartupHooks& hooks) {
  const auto start = hooks.now();
  for (int attempt = 0;; ++attempt) {
    std::string error;
    try {
      hooks.probe();
      return;
    } catch (const std::exception& e) {
      error = e.what();
    }
    const auto elapsed = hooks.now() - start;
    if (settings.max_elapsed.count() > 0 && elapsed >= settings.max_elapsed)
      throw std::runtime_error("timed out waiting for Redis connection to " + target + " after " +
                               go_duration_text(elapsed) + ": " + error);
    const auto wait = backoff_wait(settings, attempt, hooks.random());
    if (hooks.log)
      hooks.log("Retrying Redis connection to " + target + " in " + go_duration_text(wait) +
                " (elapsed: " + go_duration_text(elapsed) + "): " + error);
    if (!hooks.sleep(wait))
      throw std::runtime_error("context cancelled while waiting for Redis connection to " + target +
                               ": context canceled");
  }
}

}  // namespace ratelimit::server
