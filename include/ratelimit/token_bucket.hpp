#pragma once
/// @file token_bucket.hpp
/// Forwarding header kept for existing code: includes ratelimit/algorithms/token_bucket.hpp,
/// ratelimit/memory/in_memory_storage.hpp.

#include "algorithms/token_bucket.hpp"
#include "memory/in_memory_storage.hpp"
