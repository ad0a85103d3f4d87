#pragma once
/// @file version.hpp
/// The library's version, defined once here (CMake reads it).

#define RATELIMIT_VERSION_MAJOR 0
#define RATELIMIT_VERSION_MINOR 1
#define RATELIMIT_VERSION_PATCH 0
