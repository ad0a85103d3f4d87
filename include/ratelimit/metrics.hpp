#pragma once
/// @file metrics.hpp
/// Entry header for monitoring: `PrometheusExporter`, a listener that counts decisions per limiter
/// and rule and writes the Prometheus text format. Dependency-free.

#include "metrics/prometheus.hpp"
