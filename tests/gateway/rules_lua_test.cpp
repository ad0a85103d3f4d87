// The rule-set script's driver embedded in include/ratelimit/rules_redis.hpp must be lua/rules.lua
// byte for byte (the .lua file is the source of truth; regenerate the header's raw string from it
// when it changes). No Redis needed.

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include <ratelimit/rules_redis.hpp>

TEST_CASE("The embedded rule-set driver is lua/rules.lua", "[rules][redis_scripts]") {
  std::ifstream in(RATELIMIT_RULES_LUA, std::ios::binary);
  REQUIRE(in);
  std::ostringstream text;
  text << in.rdbuf();
  CHECK(text.str() == ratelimit::detail::rules_lua_driver);
}

TEST_CASE("The rule-set script's SHA-1 is computed as Redis does (FIPS 180-4 test vectors)",
          "[rules][redis_scripts]") {
  CHECK(ratelimit::detail::sha1_hex("abc") == "a9993e364706816aba3e25717850c26c9cd0d89d");
  CHECK(ratelimit::detail::sha1_hex("") == "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  CHECK(ratelimit::detail::sha1_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
}
