#pragma once
// Fixture for the layer check's own test (see ../core/bad.hpp).
