// Builds and links against ratelimit::redis (hiredis); does not connect anywhere.
#include <ratelimit/redis.hpp>

int main() {
  ratelimit::RedisOptions options;
  options.host = "127.0.0.1";
  return options.host.empty() ? 1 : 0;
}
