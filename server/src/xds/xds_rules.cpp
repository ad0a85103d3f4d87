#include "xds/xds_rules.hpp"

#include <stdexcept>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "server_algorithms.hpp"

namespace ratelimit::server {
namespace {

namespace conf = ratelimit::config::ratelimit::v3;

void emit_value(YAML::Emitter& out, const google::protobuf::Value& v);

void emit_struct(YAML::Emitter& out, const google::protobuf::Struct& s) {
  out << YAML::BeginMap;
  for (const auto& [key, value] : s.fields()) {
    out << YAML::Key << YAML::DoubleQuoted << key << YAML::Value;
    emit_value(out, value);
  }
  out << YAML::EndMap;
}

void emit_value(YAML::Emitter& out, const google::protobuf::Value& v) {
  switch (v.kind_case()) {
    case google::protobuf::Value::kNumberValue:
      out << v.number_value();
      break;
    case google::protobuf::Value::kStringValue:
      out << YAML::DoubleQuoted << v.string_value();
      break;
    case google::protobuf::Value::kBoolValue:
      out << v.bool_value();
      break;
    case google::protobuf::Value::kStructValue:
      emit_struct(out, v.struct_value());
      break;
    case google::protobuf::Value::kListValue:
      out << YAML::BeginSeq;
      for (const auto& item : v.list_value().values()) emit_value(out, item);
      out << YAML::EndSeq;
      break;
    default:  // null, or no kind at all
      out << YAML::Null;
  }
}

std::string unit_name(conf::RateLimitUnit unit) {
  // As Go's enum String(): the name, or the number for a value the enum does not declare.
  const std::string& name = conf::RateLimitUnit_Name(unit);
  return name.empty() ? std::to_string(static_cast<int>(unit)) : name;
}

void emit_descriptors(YAML::Emitter& out,
                      const google::protobuf::RepeatedPtrField<conf::RateLimitDescriptor>& ds) {
  out << YAML::BeginSeq;
  for (const conf::RateLimitDescriptor& d : ds) {
    out << YAML::BeginMap;
    out << YAML::Key << "key" << YAML::Value << YAML::DoubleQuoted << d.key();
    // The reference's YAML leaves an empty value out; "" and absent are one in proto3.
    if (!d.value().empty())
      out << YAML::Key << "value" << YAML::Value << YAML::DoubleQuoted << d.value();
    if (d.has_rate_limit()) {
      const conf::RateLimitPolicy& p = d.rate_limit();
      out << YAML::Key << "rate_limit" << YAML::Value << YAML::BeginMap;
      // An unlimited limit reads with no unit (UNKNOWN); any other unit is kept so that the
      // rules refuse it, as the reference refuses "a unit when unlimited".
      if (!p.unlimited() || p.unit() != conf::UNKNOWN)
        out << YAML::Key << "unit" << YAML::Value << unit_name(p.unit());
      if (!p.unlimited())
        out << YAML::Key << "requests_per_unit" << YAML::Value << p.requests_per_unit();
      if (p.unlimited()) out << YAML::Key << "unlimited" << YAML::Value << true;
      if (!p.name().empty())
        out << YAML::Key << "name" << YAML::Value << YAML::DoubleQuoted << p.name();
      if (p.replaces_size() > 0) {
        out << YAML::Key << "replaces" << YAML::Value << YAML::BeginSeq;
        for (const conf::RateLimitReplace& r : p.replaces())
          out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << YAML::DoubleQuoted
              << r.name() << YAML::EndMap;
        out << YAML::EndSeq;
      }
      out << YAML::EndMap;
    }
    if (d.descriptors_size() > 0) {
      out << YAML::Key << "descriptors" << YAML::Value;
      emit_descriptors(out, d.descriptors());
    }
    if (d.shadow_mode()) out << YAML::Key << "shadow_mode" << YAML::Value << true;
    if (d.detailed_metric()) out << YAML::Key << "detailed_metric" << YAML::Value << true;
    if (d.quota_mode()) out << YAML::Key << "quota_mode" << YAML::Value << true;
    if (d.has_metadata()) {
      out << YAML::Key << "metadata" << YAML::Value;
      emit_struct(out, d.metadata());
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

}  // namespace

RulesSource rules_source(const conf::RateLimitConfig& config, std::size_t index) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "domain" << YAML::Value << YAML::DoubleQuoted << config.domain();
  out << YAML::Key << "descriptors" << YAML::Value;
  emit_descriptors(out, config.descriptors());
  out << YAML::EndMap;
  std::string name = config.name().empty() ? "resource " + std::to_string(index)
                                           : "resource \"" + config.name() + "\"";
  return {std::move(name), out.c_str()};
}

std::vector<RulesSource> decode_resources(
    const google::protobuf::RepeatedPtrField<google::protobuf::Any>& resources) {
  std::vector<RulesSource> sources;
  sources.reserve(static_cast<std::size_t>(resources.size()));
  for (int i = 0; i < resources.size(); ++i) {
    const google::protobuf::Any& any = resources[i];
    if (any.type_url() != rate_limit_config_type)
      throw std::invalid_argument("resource " + std::to_string(i) + ": type \"" + any.type_url() +
                                  "\", expected " + std::string(rate_limit_config_type));
    conf::RateLimitConfig config;
    if (!config.ParseFromString(any.value()))
      throw std::invalid_argument("resource " + std::to_string(i) +
                                  ": does not decode as a RateLimitConfig");
    sources.push_back(rules_source(config, static_cast<std::size_t>(i)));
  }
  return sources;
}

RulesConfig rules_config(const std::vector<RulesSource>& sources, DomainMerge merge) {
  return RulesConfig::from_strings<ServerAlgorithms>(std::span<const RulesSource>(sources), merge);
}

}  // namespace ratelimit::server
