#pragma once
/// @file fixed_window.hpp
/// Forwarding header kept for existing code: includes ratelimit/algorithms/fixed_window.hpp,
/// ratelimit/memory/in_memory_storage.hpp.

#include "algorithms/fixed_window.hpp"
#include "memory/in_memory_storage.hpp"
