#pragma once
/// @file decision.hpp
/// Forwarding header kept for existing code: includes ratelimit/core/decision.hpp.

#include "core/decision.hpp"
