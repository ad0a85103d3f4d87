#pragma once
/// @file rate.hpp
/// Forwarding header kept for existing code: includes ratelimit/core/rate.hpp.

#include "core/rate.hpp"
