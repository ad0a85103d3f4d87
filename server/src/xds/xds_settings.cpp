#include "xds/xds_settings.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

namespace ratelimit::server {
namespace {

using Env = std::function<std::optional<std::string>(const std::string&)>;

bool parse_bool(const std::string& name, const std::string& v) {
  // Go's strconv.ParseBool, which the reference's envconfig uses.
  if (v == "1" || v == "t" || v == "T" || v == "true" || v == "TRUE" || v == "True") return true;
  if (v == "0" || v == "f" || v == "F" || v == "false" || v == "FALSE" || v == "False")
    return false;
  throw std::invalid_argument(name + " = \"" + v + "\": not a boolean (true or false)");
}

double parse_float(const std::string& name, const std::string& v) {
  std::size_t used = 0;
  double d = std::numeric_limits<double>::quiet_NaN();
  try {
    d = std::stod(v, &used);
  } catch (const std::exception&) {
  }
  if (used != v.size() || v.empty() || !std::isfinite(d))
    throw std::invalid_argument(name + " = \"" + v + "\": not a number");
  return d;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string::size_type start = 0;
  while (true) {
    const auto at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

/// The variables, in the reference's order; each stores its value into the settings.
using Apply = void (*)(XdsSettings&, const std::string& name, const std::string& value);
struct Row {
  std::string_view name;
  Apply apply;
};

const Row rows[] = {
    {"CONFIG_TYPE",
     [](XdsSettings& s, const std::string& n, const std::string& v) {
       if (v == "FILE")
         s.use_xds = false;
       else if (v == "GRPC_XDS_SOTW")
         s.use_xds = true;
       else
         throw std::invalid_argument(n + " = \"" + v + "\": expected FILE or GRPC_XDS_SOTW");
     }},
    {"FORCE_START_WITHOUT_INITIAL_CONFIG",
     [](XdsSettings& s, const std::string& n, const std::string& v) {
       s.force_start = parse_bool(n, v);
     }},
    {"CONFIG_GRPC_XDS_NODE_ID",
     [](XdsSettings& s, const std::string&, const std::string& v) { s.node_id = v; }},
    {"CONFIG_GRPC_XDS_NODE_METADATA",
     [](XdsSettings& s, const std::string&, const std::string& v) {
       // As the reference's getClientNode: "k=v" entries split on ','; others are skipped.
       s.node_metadata.clear();
       for (const std::string& entry : split(v, ',')) {
         const auto eq = entry.find('=');
         if (eq != std::string::npos) s.node_metadata[entry.substr(0, eq)] = entry.substr(eq + 1);
       }
     }},
    {"CONFIG_GRPC_XDS_SERVER_URL",
     [](XdsSettings& s, const std::string& n, const std::string& v) {
       if (v.empty()) throw std::invalid_argument(n + " = \"\": expected host:port");
       s.server_url = v;
     }},
    {"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
     [](XdsSettings& s, const std::string& n, const std::string& v) {
       s.connect_retry_interval = parse_go_duration(n, v);
     }},
    {"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
     [](XdsSettings& s, const std::string& n, const std::string& v) {
       // envconfig's map[string]string: "k:v,k:v"; an item that is not one ':' pair fails.
       s.additional_headers.clear();
       if (std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isspace(c); })) return;
       for (const std::string& pair : split(v, ',')) {
         const auto kv = split(pair, ':');
         if (kv.size() != 2)
           throw std::invalid_argument(n + " = \"" + v + "\": invalid map item \"" + pair +
                                       "\" (expected name:value)");
         std::string key = kv[0];
         for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
         if (key.empty())
           throw std::invalid_argument(n + " = \"" + v + "\": a header without a name");
         s.additional_headers[key] = kv[1];
       }
     }},
    {"CONFIG_GRPC_XDS_SERVER_USE_TLS", [](XdsSettings& s, const std::string& n,
                                          const std::string& v) { s.use_tls = parse_bool(n, v); }},
    {"CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
     [](XdsSettings& s, const std::string&, const std::string& v) { s.client_cert = v; }},
    {"CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
     [](XdsSettings& s, const std::string&, const std::string& v) { s.client_key = v; }},
    {"CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
     [](XdsSettings& s, const std::string&, const std::string& v) { s.server_ca = v; }},
    {"CONFIG_GRPC_XDS_SERVER_TLS_SAN",
     [](XdsSettings& s, const std::string&, const std::string& v) { s.server_san = v; }},
    {"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
     [](XdsSettings& s, const std::string& n, const std::string& v) {
       s.backoff_initial = parse_go_duration(n, v);
     }},
    {"XDS_CLIENT_BACKOFF_MAX_INTERVAL",
     [](XdsSettings& s, const std::string& n, const std::string& v) {
       s.backoff_max = parse_go_duration(n, v);
     }},
    {"XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
     [](XdsSettings& s, const std::string& n, const std::string& v) {
       s.backoff_factor = parse_float(n, v);
     }},
    {"XDS_CLIENT_BACKOFF_JITTER",
     [](XdsSettings& s, const std::string& n, const std::string& v) {
       s.backoff_jitter = parse_bool(n, v);
     }},
    {"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
     [](XdsSettings& s, const std::string& n, const std::string& v) {
       // envconfig's default "" is no value: 0, gRPC's default.
       if (v.empty()) {
         s.max_message_bytes = 0;
         return;
       }
       std::size_t used = 0;
       long long bytes = -1;
       try {
         bytes = std::stoll(v, &used);
       } catch (const std::exception&) {
       }
       if (used != v.size() || bytes < 0 || bytes > std::numeric_limits<std::int32_t>::max())
         throw std::invalid_argument(n + " = \"" + v +
                                     "\": not a size in bytes (0, gRPC's default of 4 MiB, "
                                     "to 2147483647)");
       s.max_message_bytes = static_cast<std::size_t>(bytes);
     }},
};

const Row* find_row(std::string_view name) {
  for (const Row& r : rows)
    if (r.name == name) return &r;
  return nullptr;
}

}  // namespace

bool is_xds_setting(std::string_view name) { return find_row(name) != nullptr; }

XdsSettings read_xds_settings(const Env& env, const std::vector<std::string>& args) {
  XdsSettings s;
  for (const Row& r : rows)
    if (const auto v = env(std::string(r.name))) r.apply(s, std::string(r.name), *v);
  for (const std::string& arg : args) {
    const auto eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) continue;
    std::string name = arg.substr(2, eq - 2);
    for (char& c : name) c = c == '-' ? '_' : static_cast<char>(std::toupper(c));
    if (const Row* r = find_row(name)) r->apply(s, arg.substr(0, eq), arg.substr(eq + 1));
  }
  return s;
}

std::chrono::nanoseconds parse_go_duration(const std::string& name, const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument(name + " = \"" + text + "\": " + why +
                                 " (a Go duration such as 10s, 250ms or 1m30s)");
  };
  std::string_view s = text;
  bool negative = false;
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  if (s == "0") return std::chrono::nanoseconds{0};
  if (s.empty()) throw bad("not a duration");
  // Whole nanoseconds and the fractional rest, summed over the "<number><unit>" parts.
  long double total = 0;
  while (!s.empty()) {
    std::size_t i = 0;
    long double whole = 0;
    bool digits = false;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      whole = whole * 10 + (s[i] - '0');
      digits = true;
      ++i;
    }
    long double fraction = 0;
    if (i < s.size() && s[i] == '.') {
      ++i;
      long double scale = 0.1L;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
        fraction += (s[i] - '0') * scale;
        scale /= 10;
        digits = true;
        ++i;
      }
    }
    if (!digits) throw bad("not a duration");
    std::size_t u = i;
    while (u < s.size() && !std::isdigit(static_cast<unsigned char>(s[u])) && s[u] != '.') ++u;
    const std::string_view unit = s.substr(i, u - i);
    long double ns = 0;
    if (unit == "ns")
      ns = 1;
    else if (unit == "us" || unit == "\xC2\xB5s" || unit == "\xCE\xBCs")
      ns = 1e3L;
    else if (unit == "ms")
      ns = 1e6L;
    else if (unit == "s")
      ns = 1e9L;
    else if (unit == "m")
      ns = 60e9L;
    else if (unit == "h")
      ns = 3600e9L;
    else if (unit.empty())
      throw bad("missing unit");
    else
      throw bad("unknown unit \"" + std::string(unit) + "\"");
    total += (whole + fraction) * ns;
    if (total > static_cast<long double>(std::numeric_limits<std::int64_t>::max()))
      throw bad("out of range");
    s.remove_prefix(u);
  }
  const auto ns = static_cast<std::int64_t>(total);
  return std::chrono::nanoseconds{negative ? -ns : ns};
}

}  // namespace ratelimit::server
