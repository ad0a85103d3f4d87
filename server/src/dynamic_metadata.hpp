#pragma once
/// @file dynamic_metadata.hpp
/// RESPONSE_DYNAMIC_METADATA: the google.protobuf.Struct the reference service puts in a
/// response's `dynamic_metadata` (src/service/ratelimit.go, ratelimitToMetadata,
/// descriptorToStruct and mergeMetadata), and the rules' `metadata` read as that Struct
/// (src/config/config_impl.go, parseMetadata).

#include <optional>
#include <string_view>

#include <google/protobuf/struct.pb.h>

#include "rls.pb.h"

namespace ratelimit::server {

/// The request's part: "domain" (string); "descriptors" (a list with one struct per
/// descriptor: "entries", a list of "key=value" strings; "limit", the override as Go's text
/// format "requests_per_unit:N unit:NAME", when it has one; "hitsAddend", a number, when the
/// descriptor sets one); "hitsAddend" (a number) when the request's is not 0.
google::protobuf::Struct request_metadata(
    const envoy::service::ratelimit::v3::RateLimitRequest& request);

/// Merges `src` into `dest` as mergeMetadata does: a key not in `dest` is added; a key in both
/// whose values are both structs is merged recursively; any other key in both keeps `dest`'s.
void merge_metadata(google::protobuf::Struct& dest, const google::protobuf::Struct& src);

/// A rule's `metadata` (YAML flow text, as the rules loader keeps it) as the Struct the reference
/// builds of it with yaml.v2: plain scalars resolved as YAML 1.1 (null, booleans such as
/// true/yes/on, integers and floats as numbers), quoted ones as strings, mappings as structs,
/// sequences as lists. nullopt for "" or an empty mapping (the reference's nil). Throws
/// `std::invalid_argument` naming `metadata` for text that is not a YAML mapping.
std::optional<google::protobuf::Struct> metadata_struct(std::string_view yaml);

}  // namespace ratelimit::server
