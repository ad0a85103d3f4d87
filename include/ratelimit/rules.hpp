#pragma once
/// @file rules.hpp
/// Forwarding header kept for existing code: includes ratelimit/rules/rules.hpp, and the
/// several-files configuration and the service that serves it (rules/config.hpp,
/// rules/service.hpp).

#include "rules/config.hpp"
#include "rules/rules.hpp"
#include "rules/service.hpp"
