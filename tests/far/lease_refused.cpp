// Compiled only by the tests far_lease_refuses_* (tests/far/CMakeLists.txt), which pass when
// the compiler FAILS with LeasedStorage's message: binding a model it does not lease must not
// compile. RATELIMIT_REFUSED_MODEL names the model.

#include <ratelimit/ratelimit.hpp>
#include <ratelimit/redis/lease/storage.hpp>

void bind_refused_model(ratelimit::LeasedStorage& s,
                        const ratelimit::RATELIMIT_REFUSED_MODEL::Params& p) {
  (void)s.bind<ratelimit::RATELIMIT_REFUSED_MODEL>("api", p);
}
