#pragma once
/// @file rules.hpp
/// Forwarding header kept for existing code: includes ratelimit/rules/rules.hpp.

#include "rules/rules.hpp"
