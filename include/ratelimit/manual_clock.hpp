#pragma once
/// @file manual_clock.hpp
/// Forwarding header kept for existing code: includes ratelimit/testing/manual_clock.hpp.

#include "testing/manual_clock.hpp"
