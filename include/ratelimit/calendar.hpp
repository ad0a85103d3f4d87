#pragma once
/// @file calendar.hpp
/// Entry header for calendar quotas: `Calendar` periods (day, week, month, year of an IANA time
/// zone), `CalendarQuota`, the in-memory storage and `try_acquire_all`. Target
/// `ratelimit::calendar` (Debian libhowardhinnant-date-dev, which reads the system's tzdata).

#include "calendar/calendar.hpp"
#include "calendar/quota.hpp"
#include "core/all_of.hpp"
#include "memory/in_memory_storage.hpp"
