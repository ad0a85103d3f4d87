#pragma once
/// @file keys.hpp
/// Client keys that a careless encoding would merge, truncate or route oddly: empty, NUL bytes
/// (leading, embedded, trailing, 10 KB of them), hash-tag braces, separators, line ends, invalid
/// UTF-8, RESP syntax, every byte value, 10 KB keys differing in their last or first byte. The
/// conformance suite decides every one of them on every storage (tests/conformance/keys_test.cpp)
/// and the cluster's spread check routes them (tests/cluster/spread_check.cpp).

#include <string>
#include <vector>

namespace rltest {

inline std::vector<std::string> awkward_keys() {
  using namespace std::string_literals;
  // clang-format off
  std::vector<std::string> keys = {
      ""s,      "a"s,         "a\0b"s,     "a\0"s,      "\0"s,     "\0\0"s,         "b"s,
      "{"s,     "}"s,         "{a}"s,      "{a}b"s,     "a{b}"s,   "{}"s,           ":"s,
      "a:b"s,   "a:"s,        ":a"s,       "a::b"s,     "a b"s,    " a"s,           "\r\n"s,
      "\xff"s,  "\xff\xfe"s,  "\x80"s,     "\xc3\xa9"s, "e\xcc\x81"s, "*1\r\n$4\r\nPING\r\n"s,
      "token_bucket"s, "token_bucket:a"s, "sliding_log:"s, "%s%n"s, "\\"s, "'\""s,
  };
  // clang-format on
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte.push_back(static_cast<char>(b));
  keys.push_back(every_byte);
  keys.push_back(every_byte.substr(1));
  const std::string long_key(10 * 1024, 'x');
  keys.push_back(long_key);
  keys.push_back(long_key + "y");
  keys.push_back(long_key.substr(1) + "y");
  keys.push_back(std::string(10 * 1024, '\0'));
  return keys;
}

}  // namespace rltest
