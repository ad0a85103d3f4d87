#include "forward_auth.hpp"

#include <arpa/inet.h>

#include <cctype>
#include <charconv>
#include <optional>
#include <span>
#include <stdexcept>

#include <ratelimit/http/headers.hpp>

namespace ratelimit::server::check {

namespace pb = envoy::service::ratelimit::v3;

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

/// Whether `name` equals `lower` (lower case) ignoring case.
bool equals_lower(std::string_view name, std::string_view lower) {
  if (name.size() != lower.size()) return false;
  for (std::size_t i = 0; i < name.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(name[i])) != lower[i]) return false;
  return true;
}

bool to_bytes(std::string_view address, unsigned char (&bytes)[16], bool& v4) {
  const std::string a(address);
  if (inet_pton(AF_INET, a.c_str(), bytes) == 1) {
    v4 = true;
    return true;
  }
  if (inet_pton(AF_INET6, a.c_str(), bytes) == 1) {
    v4 = false;
    return true;
  }
  return false;
}

std::chrono::nanoseconds unit_length(pb::RateLimitResponse::RateLimit::Unit unit) {
  using namespace std::chrono;
  using R = pb::RateLimitResponse::RateLimit;
  switch (unit) {
    case R::SECOND:
      return seconds{1};
    case R::MINUTE:
      return minutes{1};
    case R::HOUR:
      return hours{1};
    case R::DAY:
      return hours{24};
    case R::WEEK:
      return hours{24 * 7};
    case R::MONTH:
      return hours{24 * 30};
    case R::YEAR:
      return hours{24 * 365};
    default:
      return seconds{0};
  }
}

}  // namespace

Network Network::parse(std::string_view text) {
  const std::string_view t = trim(text);
  const std::size_t slash = t.find('/');
  Network n;
  if (!to_bytes(t.substr(0, slash), n.bytes, n.v4))
    throw std::invalid_argument("'" + std::string(t) + "' is not an IP address or network");
  n.prefix = n.v4 ? 32 : 128;
  if (slash != std::string_view::npos) {
    const std::string_view p = t.substr(slash + 1);
    unsigned v = 0;
    const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
    if (p.empty() || ec != std::errc{} || end != p.data() + p.size() || v > n.prefix)
      throw std::invalid_argument("'" + std::string(t) + "': the prefix length must be 0 to " +
                                  std::to_string(n.prefix));
    n.prefix = v;
  }
  return n;
}

bool Network::contains(std::string_view address) const {
  unsigned char b[16] = {};
  bool is_v4 = false;
  if (!to_bytes(trim(address), b, is_v4) || is_v4 != v4) return false;
  for (unsigned i = 0; i < prefix; ++i) {
    const unsigned mask = 0x80u >> (i % 8);
    if ((b[i / 8] & mask) != (bytes[i / 8] & mask)) return false;
  }
  return true;
}

std::vector<Network> parse_networks(std::string_view list) {
  std::vector<Network> out;
  while (!trim(list).empty()) {
    const std::size_t comma = list.find(',');
    out.push_back(Network::parse(list.substr(0, comma)));
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
  }
  return out;
}

std::string client_address(const std::vector<Network>& trusted, const std::string& peer,
                           const std::vector<std::string_view>& forwarded_for) {
  const auto is_trusted = [&](std::string_view a) {
    for (const Network& n : trusted)
      if (n.contains(a)) return true;
    return false;
  };
  if (trusted.empty() || !is_trusted(peer)) return peer;
  std::vector<std::string_view> chain;
  for (std::string_view v : forwarded_for) {
    while (true) {
      const std::size_t comma = v.find(',');
      const std::string_view e = trim(v.substr(0, comma));
      if (!e.empty()) chain.push_back(e);
      if (comma == std::string_view::npos) break;
      v.remove_prefix(comma + 1);
    }
  }
  for (auto it = chain.rbegin(); it != chain.rend(); ++it)
    if (!is_trusted(*it)) return std::string(*it);
  return chain.empty() ? peer : std::string(chain.front());
}

std::shared_ptr<const ActionsConfig> ActionsHolder::get() const {
  std::lock_guard lock(mutex_);
  return config_;
}

void ActionsHolder::set(std::shared_ptr<const ActionsConfig> config) {
  std::lock_guard lock(mutex_);
  config_ = std::move(config);
}

std::vector<std::pair<std::string, std::string>> response_headers(
    const pb::RateLimitRequest& request, const pb::RateLimitResponse& response) {
  std::vector<PolicyDecision> all;
  for (int i = 0; i < response.statuses_size(); ++i) {
    const auto& s = response.statuses(i);
    if (!s.has_current_limit()) continue;
    QuotaPolicy policy;
    policy.name = s.current_limit().name();
    if (policy.name.empty() && i < request.descriptors_size()) {
      policy.name = request.domain();
      for (const auto& e : request.descriptors(i).entries())
        policy.name += "." + e.key() + "_" + e.value();
    }
    policy.quota = s.current_limit().requests_per_unit();
    policy.window = unit_length(s.current_limit().unit());
    const auto until_reset = std::chrono::seconds{s.duration_until_reset().seconds()} +
                             std::chrono::nanoseconds{s.duration_until_reset().nanos()};
    Decision d{};
    d.allowed = s.code() != pb::RateLimitResponse::OVER_LIMIT;
    d.limit = s.current_limit().requests_per_unit();
    d.remaining = s.limit_remaining();
    d.reset_after = until_reset;
    d.retry_after = d.allowed ? std::chrono::nanoseconds{0} : until_reset;
    all.push_back({std::move(policy), d});
  }
  return rate_limit_headers(std::span<const PolicyDecision>(all));
}

namespace {

/// The original request and the domain's descriptors, or an error answer.
struct Prepared {
  pb::RateLimitRequest request;
  std::optional<HttpResponse> answer;
};

Prepared prepare(const HttpRequest& req, const ActionsConfig& actions,
                 const std::vector<Network>& trusted) {
  Prepared p;
  const std::string domain = req.path.substr(std::string_view("/check/").size());
  const DomainActions* domain_actions = actions.domain(domain);
  if (domain.empty() || domain_actions == nullptr) {
    p.answer = HttpResponse{404, "text/plain", "no actions for domain '" + domain + "'\n", {}};
    return p;
  }
  const auto first = [&](std::string_view a, std::string_view b) -> const std::string* {
    const std::string* v = req.header(a);
    return v != nullptr ? v : req.header(b);
  };
  OriginalRequest original;
  const std::string* method = first("X-Forwarded-Method", "X-Original-Method");
  const std::string* uri = first("X-Forwarded-Uri", "X-Original-URI");
  if (method == nullptr || uri == nullptr) {
    p.answer = HttpResponse{400,
                            "text/plain",
                            "the check needs the original method (X-Forwarded-Method or "
                            "X-Original-Method) and URI (X-Forwarded-Uri or X-Original-URI)\n",
                            {}};
    return p;
  }
  original.method = *method;
  original.path = *uri;
  const std::string* host = first("X-Forwarded-Host", "Host");
  original.authority = host != nullptr ? *host : std::string{};
  const std::string* proto = req.header("X-Forwarded-Proto");
  original.scheme = proto != nullptr ? *proto : "http";
  std::vector<std::string_view> xff;
  for (const auto& [k, v] : req.headers)
    if (equals_lower(k, "x-forwarded-for")) xff.emplace_back(v);
  original.client_address = client_address(trusted, req.peer, xff);
  original.headers = req.headers;
  p.request.set_domain(domain);
  for (auto& d : domain_actions->descriptors(original)) {
    auto* out = p.request.add_descriptors();
    for (auto& [k, v] : d) {
      auto* e = out->add_entries();
      e->set_key(std::move(k));
      e->set_value(std::move(v));
    }
  }
  if (p.request.descriptors_size() == 0) p.answer = HttpResponse{200, "text/plain", "OK\n", {}};
  return p;
}

}  // namespace

void add_check_routes(HttpRoutes& routes, std::shared_ptr<Service> service,
                      std::shared_ptr<const ActionsHolder> actions, std::vector<Network> trusted) {
  routes.prefix_async(
      "*", "/check/",
      [service = std::move(service), actions = std::move(actions), trusted = std::move(trusted)](
          const HttpRequest& req, std::function<void(HttpResponse)> reply) {
        auto prepared = std::make_shared<Prepared>(prepare(req, *actions->get(), trusted));
        if (prepared->answer) return reply(std::move(*prepared->answer));
        int deny = 429;
        if (const std::string* s = req.header("X-RateLimit-Deny-Status");
            s != nullptr && *s == "403")
          deny = 403;
        auto response = std::make_shared<pb::RateLimitResponse>();
        service->should_rate_limit_async(
            prepared->request, *response,
            [prepared, response, deny, reply = std::move(reply)](grpc::Status st) {
              if (!st.ok()) {
                const int status = st.error_code() == grpc::StatusCode::UNAVAILABLE ? 503 : 500;
                return reply({status, "text/plain", st.error_message() + "\n", {}});
              }
              HttpResponse r;
              const bool over = response->overall_code() == pb::RateLimitResponse::OVER_LIMIT;
              r.status = over ? deny : 200;
              r.body = over ? "Too Many Requests\n" : "OK\n";
              r.headers = response_headers(prepared->request, *response);
              reply(std::move(r));
            });
      });
}

}  // namespace ratelimit::server::check
