#pragma once
/// @file xds/xds_rules.hpp
/// The rate limit configuration resources of xDS (ratelimit.config.ratelimit.v3.RateLimitConfig)
/// as the server's rules: as the reference (src/config/config_xds.go), each resource becomes
/// the rules file it stands for, and the set is loaded as a directory of files is.

#include <string>
#include <string_view>
#include <vector>

#include <google/protobuf/any.pb.h>
#include <google/protobuf/repeated_ptr_field.h>

#include <ratelimit/rules.hpp>

#include "rls_conf.pb.h"

namespace ratelimit::server {

/// The type URL of the resource the xDS client subscribes to.
inline constexpr std::string_view rate_limit_config_type =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// The rules file (YAML) that `config` stands for, named by its `name` ("resource N" when it
/// has none; `index` is its position in the response): domain, descriptors with key, value,
/// rate_limit (unit by its enum name, requests_per_unit, unlimited, name, replaces),
/// shadow_mode, detailed_metric, quota_mode and metadata. A limit that is unlimited has no
/// unit unless one was given (which the rules then refuse, as the reference does). Throws
/// nothing.
RulesSource rules_source(const ratelimit::config::ratelimit::v3::RateLimitConfig& config,
                         std::size_t index);

/// The resources of a State-of-the-World response as rules files (`rules_source`). Throws
/// `std::invalid_argument` naming the resource for one that is not a RateLimitConfig or does
/// not decode.
std::vector<RulesSource> decode_resources(
    const google::protobuf::RepeatedPtrField<google::protobuf::Any>& resources);

/// The files of `decode_resources` loaded as one directory of rules files is
/// (`RulesConfig::from_strings` with the server's algorithms). Throws `std::invalid_argument`
/// as `from_strings` does for rules it refuses (e.g. two resources with one domain unless
/// `merge`, an unknown unit).
RulesConfig rules_config(const std::vector<RulesSource>& sources, DomainMerge merge);

}  // namespace ratelimit::server
