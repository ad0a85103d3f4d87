#pragma once
/// @file leaky_bucket.hpp
/// Forwarding header kept for existing code: includes ratelimit/algorithms/leaky_bucket.hpp,
/// ratelimit/memory/in_memory_storage.hpp.

#include "algorithms/leaky_bucket.hpp"
#include "memory/in_memory_storage.hpp"
