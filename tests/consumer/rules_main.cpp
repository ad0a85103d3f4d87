// Builds and links against ratelimit::rules (yaml-cpp); only built, not run.
#include <ratelimit/rules.hpp>
#include <stdexcept>

int main() {
  try {
    (void)ratelimit::Rules::from_string("domain: consumer\n");
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
