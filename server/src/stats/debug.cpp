#include "stats/debug.hpp"

#include <algorithm>
#include <cctype>

namespace ratelimit::server::stats {

std::string dump_config(const RulesConfig& config) {
  std::string out;
  for (const Rules& rules : config.domains())
    for (const Rule& r : rules.rules()) {
      // The rule's FullKey: its path as written (config_impl.go loadDescriptors).
      const auto none = [](std::string_view) -> const std::string* { return nullptr; };
      Rule plain = r;
      plain.detailed_metric = plain.value_to_metric = false;
      std::string unit = r.unit;
      for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      out += RuleSet<>::metric_name(rules, plain, none);
      out += ": unit=" + unit + " requests_per_unit=" + std::to_string(r.rate.count) +
             ", shadow_mode: " + (r.shadow_mode ? "true" : "false") +
             ", quota_mode: " + (r.quota_mode ? "true" : "false") + "\n";
    }
  return out;
}

std::vector<HttpRoute> debug_routes(std::function<std::shared_ptr<const RulesConfig>()> config,
                                    std::shared_ptr<Store> store) {
  std::vector<std::pair<std::string, std::string>> endpoints{
      {"/debug/pprof/", "not served by this server (Go's profiler; use perf or gdb)"},
      {"/rlconfig", "print out the currently loaded configuration for debugging"},
      {"/stats", "print out stats"}};
  std::sort(endpoints.begin(), endpoints.end());
  std::vector<HttpRoute> routes;
  routes.push_back({"/", false, [endpoints](const std::string&) {
                      HttpReply r;
                      for (const auto& [path, help] : endpoints)
                        r.body += path + ": " + help + "\n";
                      return r;
                    }});
  routes.push_back({"/rlconfig", false, [config](const std::string&) {
                      HttpReply r;
                      if (const auto c = config()) r.body = dump_config(*c);
                      return r;
                    }});
  routes.push_back({"/stats", false, [store](const std::string&) {
                      HttpReply r;
                      auto lines = store->totals();
                      if (store->sink())
                        for (auto& kv : store->sink()->own_stats()) lines.push_back(std::move(kv));
                      lines.emplace_back("stats.counters_refused", store->counters_refused());
                      std::sort(lines.begin(), lines.end());
                      for (const auto& [name, value] : lines)
                        r.body += name + ": " + std::to_string(value) + "\n";
                      return r;
                    }});
  routes.push_back({"/debug/pprof", true, [](const std::string& path) {
                      return HttpReply{404, "text/plain; charset=utf-8",
                                       path +
                                           ": Go's pprof profiles are not served by this "
                                           "server (it is C++: profile it with perf)\n"};
                    }});
  return routes;
}

}  // namespace ratelimit::server::stats
