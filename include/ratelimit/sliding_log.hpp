#pragma once
/// @file sliding_log.hpp
/// Forwarding header kept for existing code: includes ratelimit/algorithms/sliding_log.hpp,
/// ratelimit/memory/in_memory_storage.hpp.

#include "algorithms/sliding_log.hpp"
#include "memory/in_memory_storage.hpp"
