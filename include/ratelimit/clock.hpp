#pragma once
/// @file clock.hpp
/// Forwarding header kept for existing code: includes ratelimit/core/clock.hpp.

#include "core/clock.hpp"
