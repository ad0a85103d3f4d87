#pragma once
/// @file in_memory_storage.hpp
/// Forwarding header kept for existing code: includes ratelimit/memory/in_memory_storage.hpp.

#include "memory/in_memory_storage.hpp"
