#pragma once
/// @file stats/debug.hpp
/// The reference service's debug listener (DEBUG_HOST:DEBUG_PORT, src/server/server_impl.go
/// and src/service_cmd/runner/runner.go) as plain handlers.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ratelimit/rules.hpp>

#include "http_server.hpp"
#include "stats/store.hpp"

namespace ratelimit::server::stats {

/// The rules as the reference's /rlconfig prints them (src/config/config_impl.go, Dump and
/// rateLimitDescriptor.dump): one line per limit, "<domain>.<key>_<value>.<key>: unit=<UNIT>
/// requests_per_unit=<n>, shadow_mode: <bool>, quota_mode: <bool>", domains in file order and
/// each domain's limits in file order (the reference prints in Go's map order, which varies).
/// `unlimited: true` descriptors are not printed.
std::string dump_config(const RulesConfig& config);

/// The debug listener's routes: "/" lists the endpoints ("<path>: <help>" per line, sorted),
/// "/rlconfig" (`dump_config` of `config()`, empty before the first load), "/stats" (every
/// counter of `store`, "name: value" per line, then what its sink dropped), and "/debug/pprof/"
/// answered 404 (Go's profiler has no counterpart here).
std::vector<HttpRoute> debug_routes(std::function<std::shared_ptr<const RulesConfig>()> config,
                                    std::shared_ptr<Store> store);

}  // namespace ratelimit::server::stats
