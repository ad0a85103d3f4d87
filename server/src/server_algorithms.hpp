#pragma once
/// @file server_algorithms.hpp
/// The algorithms a rules file served by this server may name: the library's, and the
/// reference service's window (go_window.hpp), which is what a limit naming none runs.

#include <ratelimit/algorithms/registry.hpp>
#include <ratelimit/rules/algorithm.hpp>

#include "go_window.hpp"

namespace ratelimit::server {

/// The registry the server loads rules files with (`RulesConfig::from_files<ServerAlgorithms>`):
/// a limit without `algorithm` runs `GoWindowModel` and may use every unit of the reference
/// (second to year, with its dividers); a limit naming one of the library's algorithms runs
/// it, with the library's units (second to day, and year: 365 days).
/// Thread safety: compile-time only.
struct ServerAlgorithms : Algorithms::with<GoWindowModel> {
  /// What a limit naming no algorithm runs (read by the rules loader).
  static constexpr Algorithm default_algorithm{GoWindowModel::name};
};

}  // namespace ratelimit::server
