#pragma once
/// @file sliding_counter.hpp
/// Forwarding header kept for existing code: includes ratelimit/algorithms/sliding_counter.hpp,
/// ratelimit/memory/in_memory_storage.hpp.

#include "algorithms/sliding_counter.hpp"
#include "memory/in_memory_storage.hpp"
