#pragma once
/// @file ratelimit.hpp
/// Everything in process: the five algorithms, the clocks and the in-memory storage.
/// The Redis storage is separate (`ratelimit/redis.hpp`, target `ratelimit::redis`).

#include "clock.hpp"
#include "decision.hpp"
#include "fixed_window.hpp"
#include "in_memory_storage.hpp"
#include "leaky_bucket.hpp"
#include "manual_clock.hpp"
#include "rate.hpp"
#include "sliding_counter.hpp"
#include "sliding_log.hpp"
#include "storage.hpp"
#include "token_bucket.hpp"
#include "version.hpp"
