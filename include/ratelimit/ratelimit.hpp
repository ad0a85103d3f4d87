#pragma once
/// @file ratelimit.hpp
/// Everything in process: the five algorithms, the concurrency limit and priorities, the clocks,
/// the in-memory storage and, for tests, ManualClock, and `try_acquire_all` (several limiters on
/// one key, all or nothing), and the HTTP response headers (`rate_limit_headers`). The Redis
/// storage is separate (`ratelimit/redis.hpp`, target `ratelimit::redis`), and so is the
/// calendar quota (`ratelimit/calendar.hpp`, target `ratelimit::calendar`).

#include "algorithms/concurrency.hpp"
#include "algorithms/fixed_window.hpp"
#include "algorithms/leaky_bucket.hpp"
#include "algorithms/lockout.hpp"
#include "algorithms/sliding_counter.hpp"
#include "algorithms/sliding_log.hpp"
#include "algorithms/token_bucket.hpp"
#include "core/all_of.hpp"
#include "core/clock.hpp"
#include "core/decision.hpp"
#include "core/priority.hpp"
#include "core/rate.hpp"
#include "core/reservation.hpp"
#include "core/storage.hpp"
#include "http/headers.hpp"
#include "memory/in_memory_storage.hpp"
#include "testing/manual_clock.hpp"
#include "version.hpp"
