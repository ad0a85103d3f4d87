#pragma once
/// @file redis/detail/client.hpp
/// The Redis client whole: the class with its cold start (client_core.hpp) and the definitions
/// of its per-node step (client_send.hpp), which need the class complete. What the storages
/// include; the parts include only what is below them, so every arrow in this folder runs down.

#include "client_core.hpp"  // IWYU pragma: export
#include "client_send.hpp"  // IWYU pragma: export
