// ASCII case for names the protocols define as case-insensitive (HTTP header names, settings'
// enumerated values, gRPC metadata keys): never locale-dependent, never beyond ASCII.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

namespace ratelimit::server {

/// `c` in lower case when it is an ASCII capital letter, else unchanged.
constexpr char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }

/// `s` with its ASCII capital letters in lower case.
inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ascii_lower(c);
  return out;
}

/// Whether `a` and `b` are equal ignoring ASCII case.
inline bool ascii_iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return ascii_lower(x) == ascii_lower(y);
         });
}

}  // namespace ratelimit::server
