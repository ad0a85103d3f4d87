#pragma once
// Fixture for the layer check's own test: a core header that includes the Redis layer, an
// upward include that the check must refuse.
#include "../redis/thing.hpp"
