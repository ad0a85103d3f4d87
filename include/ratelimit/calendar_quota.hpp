#pragma once
/// @file calendar_quota.hpp
/// The calendar quota (per day, week or month of an IANA time zone) with the in-memory storage
/// and `try_acquire_all`: includes ratelimit/calendar/quota.hpp, ratelimit/core/all_of.hpp and
/// ratelimit/memory/in_memory_storage.hpp. Target `ratelimit::calendar` (Debian
/// libhowardhinnant-date-dev).

#include "calendar/calendar.hpp"
#include "calendar/quota.hpp"
#include "core/all_of.hpp"
#include "memory/in_memory_storage.hpp"
