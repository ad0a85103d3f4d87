#include "dynamic_metadata.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include <yaml-cpp/yaml.h>

namespace ratelimit::server {
namespace {

namespace pb = envoy::service::ratelimit::v3;
using google::protobuf::Struct;
using google::protobuf::Value;

/// The name of a RateLimitUnit as Go's text format prints an enum (its number when unknown).
std::string unit_name(int unit) {
  switch (unit) {
    case 1:
      return "SECOND";
    case 2:
      return "MINUTE";
    case 3:
      return "HOUR";
    case 4:
      return "DAY";
    case 5:
      return "MONTH";
    case 6:
      return "YEAR";
    case 7:
      return "WEEK";
    default:
      return std::to_string(unit);
  }
}

/// `descriptor.Limit.String()` in Go: the text format of the RateLimitOverride, fields set
/// (non-zero in proto3) in field order, separated by one space. (Go's text format may add a
/// second space in some builds, on purpose, so no client should parse it.)
std::string override_text(
    const envoy::extensions::common::ratelimit::v3::RateLimitDescriptor::RateLimitOverride& o) {
  std::string out;
  if (o.requests_per_unit() != 0)
    out += "requests_per_unit:" + std::to_string(o.requests_per_unit());
  if (o.unit() != 0) {
    if (!out.empty()) out += ' ';
    out += "unit:" + unit_name(o.unit());
  }
  return out;
}

bool one_of(std::string_view s, std::initializer_list<std::string_view> words) {
  for (const std::string_view w : words)
    if (s == w) return true;
  return false;
}

/// A plain scalar as yaml.v2 resolves it (YAML 1.1): null, bool, int, float, else a string.
Value scalar_value(const YAML::Node& node) {
  Value v;
  const std::string& s = node.Scalar();
  if (node.Tag() == "!") {  // quoted: always a string
    v.set_string_value(s);
    return v;
  }
  if (one_of(s, {"", "~", "null", "Null", "NULL"})) {
    v.set_null_value(google::protobuf::NULL_VALUE);
    return v;
  }
  if (one_of(s, {"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"})) {
    v.set_bool_value(true);
    return v;
  }
  if (one_of(s, {"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"})) {
    v.set_bool_value(false);
    return v;
  }
  if (one_of(s, {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"})) {
    v.set_number_value(std::numeric_limits<double>::infinity());
    return v;
  }
  if (one_of(s, {"-.inf", "-.Inf", "-.INF"})) {
    v.set_number_value(-std::numeric_limits<double>::infinity());
    return v;
  }
  // Numbers: an integer (decimal, 0x hex, 0b binary, leading-0 octal) or a float, whole text.
  std::string t;
  for (const char c : s)
    if (c != '_') t += c;
  if (!t.empty()) {
    std::size_t start = (t[0] == '-' || t[0] == '+') ? 1 : 0;
    const std::string digits = t.substr(start);
    int base = 10;
    std::string body = digits;
    if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
      base = 16;
      body = digits.substr(2);
    } else if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'b' || digits[1] == 'B')) {
      base = 2;
      body = digits.substr(2);
    } else if (digits.size() > 1 && digits[0] == '0' &&
               digits.find_first_not_of("01234567") == std::string::npos) {
      base = 8;
      body = digits.substr(1);
    }
    if (!body.empty()) {
      std::size_t used = 0;
      try {
        const long long n = std::stoll(body, &used, base);
        if (used == body.size()) {
          v.set_number_value(static_cast<double>(t[0] == '-' ? -n : n));
          return v;
        }
      } catch (const std::exception&) {  // not an integer: maybe a float
      }
    }
    if (t.find_first_of("0123456789") != std::string::npos &&
        t.find_first_not_of("+-0123456789.eE") == std::string::npos) {
      try {
        std::size_t used = 0;
        const double d = std::stod(t, &used);
        if (used == t.size()) {
          v.set_number_value(d);
          return v;
        }
      } catch (const std::exception&) {  // a string after all
      }
    }
  }
  v.set_string_value(s);
  return v;
}

Value value_of(const YAML::Node& node);

Struct struct_of(const YAML::Node& map) {
  Struct out;
  for (const auto& kv : map) {
    // Go formats a nested key with %v; a scalar key's text is that.
    (*out.mutable_fields())[kv.first.Scalar()] = value_of(kv.second);
  }
  return out;
}

Value value_of(const YAML::Node& node) {
  Value v;
  switch (node.Type()) {
    case YAML::NodeType::Map:
      *v.mutable_struct_value() = struct_of(node);
      break;
    case YAML::NodeType::Sequence:
      for (const auto& item : node) *v.mutable_list_value()->add_values() = value_of(item);
      break;
    case YAML::NodeType::Scalar:
      return scalar_value(node);
    default:
      v.set_null_value(google::protobuf::NULL_VALUE);
      break;
  }
  return v;
}

}  // namespace

Struct request_metadata(const pb::RateLimitRequest& request) {
  Struct out;
  auto& fields = *out.mutable_fields();
  fields["domain"].set_string_value(request.domain());
  auto* list = fields["descriptors"].mutable_list_value();
  for (const auto& d : request.descriptors()) {
    Struct s;
    auto& f = *s.mutable_fields();
    auto* entries = f["entries"].mutable_list_value();
    for (const auto& e : d.entries())
      entries->add_values()->set_string_value(e.key() + "=" + e.value());
    if (d.has_limit()) f["limit"].set_string_value(override_text(d.limit()));
    if (d.has_hits_addend())
      f["hitsAddend"].set_number_value(static_cast<double>(d.hits_addend().value()));
    *list->add_values()->mutable_struct_value() = std::move(s);
  }
  if (request.hits_addend() != 0)
    fields["hitsAddend"].set_number_value(static_cast<double>(request.hits_addend()));
  return out;
}

void merge_metadata(Struct& dest, const Struct& src) {
  for (const auto& [k, v] : src.fields()) {
    auto it = dest.mutable_fields()->find(k);
    if (it == dest.mutable_fields()->end()) {
      (*dest.mutable_fields())[k] = v;
    } else if (it->second.has_struct_value() && v.has_struct_value()) {
      merge_metadata(*it->second.mutable_struct_value(), v.struct_value());
    }
  }
}

std::optional<Struct> metadata_struct(std::string_view yaml) {
  if (yaml.empty()) return std::nullopt;
  YAML::Node node;
  try {
    node = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument("metadata = " + std::string(yaml) + ": " + e.what());
  }
  if (!node.IsMap())
    throw std::invalid_argument("metadata = " + std::string(yaml) + ": not a mapping");
  if (node.size() == 0) return std::nullopt;
  return struct_of(node);
}

}  // namespace ratelimit::server
