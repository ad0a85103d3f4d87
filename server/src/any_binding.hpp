#pragma once
/// @file any_binding.hpp
/// One limit bound to a storage whatever its algorithm (`AnyBinding`): the counters hold the
/// Go window and the library's algorithms side by side, chosen per hit by name.

#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include <ratelimit/core/decision.hpp>
#include <ratelimit/core/rate.hpp>
#include <ratelimit/core/storage.hpp>

#include "counters.hpp"
#include "go_window.hpp"
#include "server_algorithms.hpp"

namespace ratelimit::server::detail {

/// The parameters of `hit` for model `M`: the Go window's own (a read for 0 hits), or the
/// library model's of the
/// rate "limit per window_s seconds" (`M::from_rate`, which throws `std::invalid_argument`
/// naming the field out of range).
template <class M>
typename M::Params params_of(const Hit& hit) {
  if constexpr (std::is_same_v<M, GoWindowModel>)
    return GoWindowModel::Params{hit.limit, hit.window_s, hit.hits <= 0, hit.count_denied};
  else
    return M::from_rate(Rate{hit.limit, std::chrono::seconds{hit.window_s}});
}

/// The operation of `hit`: its hits as the cost; a read (0 hits) is a peek of cost 1 (the
/// storages refuse a cost below 1).
inline Operation operation_of(const Hit& hit) {
  return Operation{hit.hits > 0 ? hit.hits : 1, hit.hits <= 0};
}

/// A binding of `Storage` for any model of `ServerAlgorithms`, behind one type. Copies share the
/// binding (a part of `decide_all` points at it, so it lives on the heap).
/// Thread safety: as the storage's bindings (every member safe from many threads).
template <class Storage>
class AnyBinding {
 public:
  using Part = typename Storage::Part;
  using Done = std::function<void(Decision)>;

  /// Binds `hit`'s limit: its algorithm (`Hit::algorithm`, empty for the Go window) under its
  /// limit id. Throws `std::invalid_argument` for an unknown algorithm or bad parameters.
  static AnyBinding make(Storage& storage, const Hit& hit) {
    const std::string_view name = hit.algorithm.empty() ? GoWindowModel::name : hit.algorithm;
    AnyBinding out;
    const bool found = ServerAlgorithms::visit(name, [&]<class M>() {
      using B = decltype(storage.template bind<M>(hit.limit_id, params_of<M>(hit)));
      out.binding_ = std::make_shared<B>(storage.template bind<M>(hit.limit_id, params_of<M>(hit)));
      out.ops_ = &ops<B>;
    });
    if (!found) throw std::invalid_argument("algorithm = \"" + std::string(name) + "\": unknown");
    return out;
  }

  Decision apply(std::string_view key, std::chrono::nanoseconds now, const Operation& op) const {
    return ops_->apply(binding_.get(), key, now, op);
  }
  /// Without blocking where the storage can (Redis); else `apply` here, then `done`.
  void apply_async(std::string_view key, std::chrono::nanoseconds now, const Operation& op,
                   Done done) const {
    ops_->apply_async(binding_.get(), key, now, op, std::move(done));
  }
  /// A part of `Storage::decide_all`; `key` and this binding must outlive the call.
  Part part(std::string_view key, const Operation& op) const {
    return ops_->part(binding_.get(), key, op);
  }

 private:
  struct Ops {
    Decision (*apply)(const void*, std::string_view, std::chrono::nanoseconds, const Operation&);
    void (*apply_async)(const void*, std::string_view, std::chrono::nanoseconds, const Operation&,
                        Done);
    Part (*part)(const void*, std::string_view, const Operation&);
  };
  template <class B>
  static constexpr Ops ops{
      [](const void* b, std::string_view k, std::chrono::nanoseconds now, const Operation& op) {
        return static_cast<const B*>(b)->apply(k, now, op);
      },
      [](const void* b, std::string_view k, std::chrono::nanoseconds now, const Operation& op,
         Done done) {
        const B& binding = *static_cast<const B*>(b);
        if constexpr (requires { binding.apply_async(k, now, op, std::move(done)); })
          binding.apply_async(k, now, op, std::move(done));
        else
          done(binding.apply(k, now, op));
      },
      [](const void* b, std::string_view k, const Operation& op) {
        return static_cast<const B*>(b)->part(k, op);
      }};

  std::shared_ptr<const void> binding_;
  const Ops* ops_ = nullptr;
};

}  // namespace ratelimit::server::detail
