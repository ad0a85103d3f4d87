#pragma once
/// @file stats/service_hook.hpp
/// The service's per-descriptor hook (`ServiceSettings::observer`, descriptor_result.hpp) turned
/// into the reports of the reference's stats (`StatsObserver::on_descriptor`).

#include <memory>
#include <string>

#include "descriptor_result.hpp"
#include "stats/observer.hpp"

namespace ratelimit::server::stats {

/// The reference's stat key of a decided descriptor (not sanitized): for a rules limit its
/// FullKey, "<domain>.<key>_<value>.<key>..." as the rule's path is written, with the request's
/// values in every part for `detailed_metric` and in the parts that take any value or a
/// wildcard for `value_to_metric` (config_impl.go GetLimit); for a limit override the request's
/// entries (config_impl.go descriptorKey).
std::string stat_key(const DescriptorResult& r);

/// The report of `r`: its key, hits and counts. A library algorithm's denial, or a hit answered
/// from the over-limit cache, has no count: it is reported as past the limit by its hits.
DescriptorReport report_of(const DescriptorResult& r, const std::string& key);

/// A `DescriptorObserver` that reports every counted descriptor to `stats` (an all-or-nothing
/// dry run only when it denied).
DescriptorObserver descriptor_observer(std::shared_ptr<StatsObserver> stats);

}  // namespace ratelimit::server::stats
