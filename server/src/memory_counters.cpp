#include <ratelimit/memory/in_memory_storage.hpp>

#include "any_binding.hpp"
#include "counters.hpp"
#include "go_keys.hpp"

namespace ratelimit::server {
namespace {

class MemoryCounters final : public Counters {
 public:
  explicit MemoryCounters(GoKeyOptions go) : go_(std::move(go)) {}

  std::vector<HitResult> count(std::span<const Hit> hits, std::chrono::nanoseconds now) override {
    std::vector<HitResult> out;
    out.reserve(hits.size());
    for (const Hit& h : hits) {
      if (detail::uses_go_key(h)) {
        out.push_back(count_go(h, now));
        continue;
      }
      const auto binding = detail::AnyBinding<InMemoryStorage>::make(storage_, h);
      out.push_back({binding.apply(h.key, now, detail::operation_of(h)), std::nullopt});
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
  /// Every Go key in one table (a limit override and its rule, and two units whose windows
  /// start at the same second, share a key as in the reference); the state's window is its
  /// start, so a key is fresh again once its window ends.
  ///
  /// As on Redis (INCRBY, then the decision on its reply), the storage counts and reports the
  /// count, and the decision is made on it here: the table's binding has a limit no count
  /// reaches (`counting_limit`), so its `remaining` is counting_limit - count after, exactly, in
  /// the same one atomic step that counts. Every hit is counted whatever its limit (the
  /// reference's INCRBY), so the binding's limit changes nothing stored.
  HitResult count_go(const Hit& h, std::chrono::nanoseconds now) {
    const auto binding = storage_.bind<GoWindowModel>(
        go_table, GoWindowModel::Params{counting_limit, h.window_s, h.hits <= 0, true});
    const Decision counted = binding.apply(
        detail::go_counter_key(go_, h, detail::unix_seconds(now)), now, detail::operation_of(h));
    const std::int64_t after = counting_limit - counted.remaining;
    return detail::go_result(h, after - (h.hits > 0 ? h.hits : 0), now);
  }

  /// Above any count: counts saturate at 2^62 (the model's sum stays below INT64_MAX for hits
  /// below 2^62, and the wire's hits_addend is a uint32).
  static constexpr std::int64_t counting_limit = std::int64_t{1} << 62;

  static constexpr std::string_view go_table = "go";
  GoKeyOptions go_;
  InMemoryStorage storage_;
};

}  // namespace

std::shared_ptr<Counters> make_memory_counters(GoKeyOptions go) {
  return std::make_shared<MemoryCounters>(std::move(go));
}

}  // namespace ratelimit::server
