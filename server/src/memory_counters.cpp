#include <ratelimit/memory/in_memory_storage.hpp>

#include "any_binding.hpp"
#include "counters.hpp"

namespace ratelimit::server {
namespace {

class MemoryCounters final : public Counters {
 public:
  std::vector<Decision> count(std::span<const Hit> hits, std::chrono::nanoseconds now) override {
    std::vector<Decision> out;
    out.reserve(hits.size());
    for (const Hit& h : hits) {
      const auto binding = detail::AnyBinding<InMemoryStorage>::make(storage_, h);
      out.push_back(binding.apply(h.key, now, detail::operation_of(h)));
    }
    return out;
  }

  std::vector<Decision> count_all(std::span<const Hit> hits,
                                  std::chrono::nanoseconds now) override {
    std::vector<detail::AnyBinding<InMemoryStorage>> bindings;
    std::vector<InMemoryStorage::Part> parts;
    bindings.reserve(hits.size());
    for (const Hit& h : hits)
      bindings.push_back(detail::AnyBinding<InMemoryStorage>::make(storage_, h));
    for (std::size_t i = 0; i < hits.size(); ++i)
      parts.push_back(bindings[i].part(hits[i].key, detail::operation_of(hits[i])));
    std::vector<Decision> out(hits.size());
    storage_.decide_all(parts, now, out);
    return out;
  }

 private:
  InMemoryStorage storage_;
};

}  // namespace

std::shared_ptr<Counters> make_memory_counters() { return std::make_shared<MemoryCounters>(); }

}  // namespace ratelimit::server
