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
      // A read (0 hits) is a peek: the storages refuse a cost below 1.
      out.push_back(binding.apply(h.key, now, Operation{h.hits > 0 ? h.hits : 1, h.hits <= 0}));
    }
    return out;
  }

 private:
  InMemoryStorage storage_;
};

}  // namespace

std::shared_ptr<Counters> make_memory_counters() { return std::make_shared<MemoryCounters>(); }

}  // namespace ratelimit::server
