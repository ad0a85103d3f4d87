#pragma once
/// @file storage.hpp
/// Forwarding header kept for existing code: includes ratelimit/core/storage.hpp.

#include "core/storage.hpp"
