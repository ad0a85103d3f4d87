#pragma once
/// @file calendar/quota.hpp
/// The calendar quota: at most N requests per day, week, month or year of a named IANA time zone,
/// as a model of the registry (so it runs on every storage, in rule sets, and all or nothing
/// beside the rates in one `decide_all`).
///
/// Needs the date library's time-zone database: link `ratelimit::calendar` (see
/// calendar/calendar.hpp).

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../algorithms/detail/window.hpp"
#include "../algorithms/registry.hpp"
#include "../core/clock.hpp"
#include "../core/decision.hpp"
#include "../core/detail/validate.hpp"
#include "../core/limiter.hpp"
#include "../core/rate.hpp"
#include "../core/storage.hpp"
#include "../core/wire.hpp"
#include "../lua/quota.hpp"
#include "calendar.hpp"

namespace ratelimit {

/// The calendar quota as a pure transition (see `ratelimit::Model`).
///
/// At most N units per calendar period (`Calendar`: day, week, month or year of an IANA zone),
/// resetting at local midnight (of the first day of the week, of the first of the month, of
/// January 1).
/// Admit n iff c + n <= N, c the count of the period holding t = max(now, the key's latest
/// time). Decision fields: limit = N; remaining = max(0, N - c); retry_after of a denial and
/// reset_after = the period's end - t, so a spent quota's retry_after lands exactly on the
/// next reset. Source: the fixed window (`FixedWindowModel`) with calendar windows.
///
/// The state remembers the end of the period it counts (24 bytes), so the zone is consulted
/// only when a key's period has ended or the key is fresh; a request stamped before the key's
/// latest time is decided in that time's period. Changing a key's calendar (`with_params`)
/// takes effect when its current period ends.
struct CalendarQuotaModel {
  static constexpr std::string_view name = "calendar_quota";

  /// N units per period of `calendar`.
  struct Params {
    std::int64_t limit;  ///< N, 1..10^9
    Calendar calendar;   ///< the periods

    friend bool operator==(const Params&, const Params&) = default;
  };
  struct State {
    std::int64_t last = 0;   ///< ns: latest time seen
    std::int64_t end = 0;    ///< ns: end of last's period
    std::int64_t count = 0;  ///< units admitted in last's period
  };

  /// This algorithm's id inside a composed Redis script (see core/wire.hpp).
  static constexpr int wire_id = 7;

  /// The parameters of `limit` per period of `calendar`; throws `std::invalid_argument`
  /// ("limit = 0: must be in [1, 1000000000]").
  static Params make_params(std::int64_t limit, const Calendar& calendar) {
    detail::check_count("limit", limit);
    return {limit, calendar};
  }

  /// A rules-file limit given as a bare rate: `count` per UTC day (a period of 24 h) or UTC
  /// week from Monday (7 days). Anything else throws `std::invalid_argument`; rules files use
  /// `from_limit`, which takes months and time zones.
  static Params from_rate(const Rate& r) {
    if (r.period == std::chrono::hours{24})
      return make_params(r.count, Calendar(CalendarUnit::day, "UTC"));
    if (r.period == std::chrono::hours{24 * 7})
      return make_params(r.count, Calendar(CalendarUnit::week, "UTC"));
    detail::invalid("rate.period (ns)", r.period.count(),
                    "a calendar quota's period is a day or a week (or, in a rules file, a "
                    "month): 86400000000000 or 604800000000000 ns");
  }

  /// A rules-file limit (the `calendar_quota` extension): `unit` day, week, month or year,
  /// `time_zone` (default "UTC"), `first_day` for weeks (default monday). Throws
  /// `std::invalid_argument` naming the field and value.
  static Params from_limit(const LimitSpec& spec) {
    CalendarUnit unit{};
    if (spec.unit == "day")
      unit = CalendarUnit::day;
    else if (spec.unit == "week")
      unit = CalendarUnit::week;
    else if (spec.unit == "month")
      unit = CalendarUnit::month;
    else if (spec.unit == "year")
      unit = CalendarUnit::year;
    else
      throw std::invalid_argument("rate_limit.unit = \"" + std::string(spec.unit) +
                                  "\": a calendar_quota's unit is day, week, month or year");
    std::chrono::weekday first = std::chrono::Monday;
    if (!spec.first_day.empty()) {
      if (unit != CalendarUnit::week)
        throw std::invalid_argument("rate_limit.first_day = \"" + std::string(spec.first_day) +
                                    "\": only a week has a first day");
      const auto day = parse_weekday(spec.first_day);
      if (!day)
        throw std::invalid_argument("rate_limit.first_day = \"" + std::string(spec.first_day) +
                                    "\": not a day of the week (monday .. sunday)");
      first = *day;
    }
    const std::string_view zone = spec.time_zone.empty() ? "UTC" : spec.time_zone;
    try {
      return make_params(spec.rate.count, Calendar(unit, zone, first));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("rate_limit." + std::string(e.what()));
    }
  }

  /// "monday" .. "sunday" (any case) as a weekday; nullopt otherwise. Thread safety: pure.
  static std::optional<std::chrono::weekday> parse_weekday(std::string_view s) {
    static constexpr std::string_view days[] = {"sunday",   "monday", "tuesday", "wednesday",
                                                "thursday", "friday", "saturday"};
    std::string lower(s);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    for (unsigned i = 0; i < 7; ++i)
      if (days[i] == lower) return std::chrono::weekday{i};
    return std::nullopt;
  }

  /// Decides `op` at `now` (ns since the Unix epoch) on `s` (see the struct comment); updates
  /// `s` only when it admits a non-peek operation. Thread safety: pure.
  static Decision apply(const Params& p, State& s, std::chrono::nanoseconds now,
                        const Operation& op) noexcept {
    const std::int64_t t = now.count() > s.last ? now.count() : s.last;
    std::int64_t c = s.count;
    std::int64_t end = s.end;
    if (c == 0 || t >= end) {  // fresh, or the counted period has ended: t's period, empty
      c = 0;
      end = p.calendar.period_of(std::chrono::nanoseconds{t}).end.count();
    }
    const std::chrono::nanoseconds to_end{end - t};
    return detail::count_decision(p.limit, c, op.cost, to_end, op.peek, [&](std::int64_t count) {
      s = State{t, end, count};
    });
  }

  /// The end of the counted period if it counted anything, else last. Thread safety: pure.
  static std::chrono::nanoseconds fresh_at(const Params&, const State& s) noexcept {
    return std::chrono::nanoseconds{s.count == 0 ? s.last : std::max(s.last, s.end)};
  }

  /// Its Redis twin, lua/quota.lua: the client computes the period's end (Redis has no
  /// time-zone data), the script counts. One Redis string {last, end, count} per client key.
  struct Wire {
    static constexpr std::string_view lua = lua::quota;
    static constexpr std::string_view key_tag = "cq";
    /// The script needs the client's time to find the period: a storage whose time would be
    /// its own (`TimeSource::redis`) refuses this model at `bind`.
    static constexpr bool needs_client_time = true;

    /// What every call repeats: N as text.
    struct BoundArgs {
      std::string limit;
    };
    /// Checks N (1..10^9; throws `std::invalid_argument` naming `params.limit`).
    static BoundArgs bound_args(const Params& p) {
      detail::check_count("params.limit", p.limit);
      return {std::to_string(p.limit)};
    }
    /// One call's ARGV (lua/quota.lua): now_us, the end of now's period (us), n, N, peek,
    /// the TTL margin.
    static void args(const BoundArgs& b, const Params& p, std::string now_us, const Operation& op,
                     const std::string& margin_ms, std::vector<std::string>& out) {
      // now_us is the client's whole-us time (never empty: see needs_client_time). Period
      // boundaries are whole seconds, so the period of now_us is that of the exact time.
      std::int64_t us = 0;
      (void)std::from_chars(now_us.data(), now_us.data() + now_us.size(), us);
      const auto end = p.calendar.period_of(std::chrono::microseconds{us}).end;
      out.push_back(std::move(now_us));
      out.push_back(std::to_string(end.count() / 1000));
      // Any cost above N is denied alike; N + 1 keeps the script's numbers small.
      out.push_back(std::to_string(std::min(op.cost, p.limit + 1)));
      out.push_back(b.limit);
      out.push_back(op.peek ? "1" : "0");
      out.push_back(margin_ms);
    }

    /// Reply: {admitted, t_us, c, end_us}; the model is evaluated on the state that gives
    /// count c in the period ending at end_us (c = 0: t's own period, found again here).
    static std::optional<Decision> decode(const Params& p, std::span<const detail::i128> r,
                                          const Operation& op) {
      const auto admitted = detail::wire_reply_admitted(r, 0);
      const auto t = detail::wire_reply_time_ns(r, 1);
      // A period ends after the decision time, at most 367 days (a leap year and a DST hour)
      // later, which can be past the clock range's end (2^62 ns).
      constexpr detail::i128 max_end_us = detail::max_wire_time_ns / 1000 + 367LL * 86'400'000'000;
      // c may exceed this N (spent under a higher one), never the largest N.
      if (!admitted || !t || r.size() < 4 || r[2] < 0 || r[2] > detail::max_count ||
          r[3] <= *t / 1000 || r[3] > max_end_us)
        return std::nullopt;
      State s{*t, static_cast<std::int64_t>(r[3] * 1000), static_cast<std::int64_t>(r[2])};
      const Decision d = apply(p, s, std::chrono::nanoseconds{*t}, op);
      if (d.allowed != *admitted) return std::nullopt;
      return d;
    }

    /// limit / divisor (at least 1) per period.
    static Params fallback(const Params& p, std::int64_t divisor) noexcept {
      return {std::max<std::int64_t>(1, p.limit / divisor), p.calendar};
    }
  };
};

/// What a calendar quota is built from.
/// Thread safety: a plain value.
struct CalendarQuotaOptions {
  std::int64_t limit = 0;                                ///< N per period, 1..10^9
  CalendarUnit unit = CalendarUnit::day;                 ///< day, week, month or year
  std::string time_zone = "UTC";                         ///< an IANA name, e.g. "Europe/Madrid"
  std::chrono::weekday first_day = std::chrono::Monday;  ///< weeks only (ISO 8601: Monday)
};

/// A calendar quota per key: at most `limit` requests per day, week, month or year of a time
/// zone, resetting at local midnight. Decision fields: limit = N; remaining = max(0, N - c);
/// retry_after and reset_after = the time to the period's end (the next local midnight, first
/// day of the week, first of the month or January 1), exact to the ns.
///
/// The clock must read Unix time (default `SystemClock`; `ManualClock` set to Unix times in
/// tests). On Redis the period is computed by this client: `TimeSource::redis` is refused
/// (`bind` throws `std::invalid_argument`). With rates on one storage, decide all or nothing
/// with `try_acquire_all(key, cost, quota, rate...)` (core/all_of.hpp) or in a rule set.
///
/// Errors: the constructor throws `std::invalid_argument` naming the field (limit, time_zone,
/// first_day); the calls throw it for cost < 1. Thread safety: every member is safe from many
/// threads.
template <Clock C = SystemClock, class Storage = InMemoryStorage>
class CalendarQuota : public detail::Limiter<CalendarQuotaModel, C, Storage> {
 public:
  /// `options.limit` per period; see `CalendarQuotaOptions` for the ranges.
  explicit CalendarQuota(const CalendarQuotaOptions& options, Storage storage = {}, C clock = {},
                         std::string name = {})
      : detail::Limiter<CalendarQuotaModel, C, Storage>(
            CalendarQuotaModel::make_params(
                options.limit, Calendar(options.unit, options.time_zone, options.first_day)),
            std::move(storage), std::move(clock), std::move(name)) {}
};

/// The library's algorithms plus the calendar quota: the registry for rules files and rule
/// sets that use `algorithm: calendar_quota` (`Rules::from_string<QuotaAlgorithms>`,
/// `RuleSet<Storage, Clock, QuotaAlgorithms>`).
using QuotaAlgorithms = Algorithms::with<CalendarQuotaModel>;

}  // namespace ratelimit
