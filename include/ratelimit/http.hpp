#pragma once
/// @file http.hpp
/// Forwarding header kept for existing code: includes ratelimit/http/headers.hpp.

#include "http/headers.hpp"
