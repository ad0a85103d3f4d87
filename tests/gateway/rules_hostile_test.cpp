// Rules files written to hurt the loader. The first version recursed forever
// on a self-referencing alias (SIGSEGV), ran past 60 s and 3.8 GB on a 2.3 KB alias bomb, took
// 47 s for the 131,071 rules of a 1.6 KB one (a quadratic duplicate check), read
// `requests_per_unit: -0` as 0 and ignored a second YAML document. Each is an error now, naming
// the file and line, and a big honest file loads in linear time.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <ratelimit/ratelimit.hpp>
#include <ratelimit/rules.hpp>

#include "support/sanitized.hpp"

using ratelimit::Rules;

namespace {

std::string error_of(const std::string& yaml) {
  try {
    (void)Rules::from_string(yaml, "rules.yaml");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

/// An alias bomb: level i is a list of two descriptors, x and y, whose nested descriptors are
/// both level i - 1 (x defines it with an anchor, y refers to it), so `levels` levels of text
/// describe 2^(levels + 1) - 2 descriptors.
std::string alias_bomb(int levels) {
  std::string list =
      "[{key: x, rate_limit: {unit: second, requests_per_unit: 1}}, "
      "{key: y, rate_limit: {unit: second, requests_per_unit: 1}}]";
  for (int i = 1; i <= levels; ++i) {
    const std::string anchor = "l" + std::to_string(i - 1);
    list = "[{key: x, descriptors: &" + anchor + " " + list + "}, {key: y, descriptors: *" +
           anchor + "}]";
  }
  return "domain: d\ndescriptors: " + list + "\n";
}

/// A rules file of `n` top-level descriptors k0 .. k<n-1>, 10 per minute each, one a line from
/// line 3.
std::string numbered_descriptors(int n) {
  std::string yaml = "domain: d\ndescriptors:\n";
  for (int i = 0; i < n; ++i)
    yaml += "  - {key: k" + std::to_string(i) +
            ", rate_limit: {unit: minute, requests_per_unit: 10}}\n";
  return yaml;
}

}  // namespace

TEST_CASE("A descriptor list that contains itself through an alias is an error naming its line",
          "[rules][errors][hostile]") {
  // The first version recursed until the stack overflowed (SIGSEGV).
  const std::string list_self = "domain: d\ndescriptors: &top\n  - key: a\n    descriptors: *top\n";
  const std::string e1 = error_of(list_self);
  INFO(e1);
  // The list is the node anchored on line 2 (`&top`), reached again through `*top` on line 4.
  CHECK(starts_with(e1, "rules.yaml:2: an alias refers to a node that contains it (line 2)"));
  // A descriptor whose own nested list holds it.
  const std::string descriptor_self =
      "domain: d\ndescriptors:\n  - &d {key: a, descriptors: [*d]}\n";
  const std::string e2 = error_of(descriptor_self);
  INFO(e2);
  CHECK(starts_with(e2, "rules.yaml:3: an alias refers to a node that contains it"));
}

TEST_CASE("Alias bombs are refused after a number of descriptors bounded by the file's size",
          "[rules][errors][hostile]") {
  // 17 levels: the first version's 131,071 rules (2^17 - 1 per branch). 30 levels: 2^31
  // descriptors, which no time bound would let it read. Both are refused once the descriptors
  // read pass one per 8 bytes of text.
  for (const int levels : {16, 30}) {
    const std::string yaml = alias_bomb(levels);
    INFO(levels << " levels, " << yaml.size() << " bytes");
    const auto start = std::chrono::steady_clock::now();
    const std::string e = error_of(yaml);
    const auto took = std::chrono::steady_clock::now() - start;
    INFO(e << " (after " << std::chrono::duration_cast<std::chrono::microseconds>(took).count()
           << " us)");
    CHECK(starts_with(e, "rules.yaml:2: more descriptors than the file's size allows"));
  }
}

TEST_CASE("An alias that expands within the budget is read as written", "[rules][hostile]") {
  // Aliases are YAML: sharing one rate_limit mapping is fine.
  const Rules r = Rules::from_string(
      "domain: d\ndescriptors:\n"
      "  - key: a\n    rate_limit: &rl {unit: minute, requests_per_unit: 5}\n"
      "  - key: b\n    rate_limit: *rl\n",
      "rules.yaml");
  REQUIRE(r.rules().size() == 2);
  CHECK(r.rules()[1].rate.count == 5);
}

TEST_CASE("requests_per_unit: -0 is refused instead of blocking everything",
          "[rules][errors][hostile][regression]") {
  CHECK(error_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n"
                 "      requests_per_unit: -0\n") ==
        "rules.yaml:6: rate_limit.requests_per_unit = -0: must not be negative");
}

TEST_CASE("A second YAML document is an error naming its line", "[rules][errors][hostile]") {
  CHECK(error_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
                 "requests_per_unit: 1}\n---\ndomain: e\n") ==
        "rules.yaml:6: a second YAML document (after `---`): a rules file holds exactly one");
}

TEST_CASE("Descriptors nested more than 32 deep are an error", "[rules][errors][hostile]") {
  std::string yaml = "domain: d\ndescriptors:\n";
  std::string indent = "  ";
  for (int i = 0; i < 33; ++i) {
    yaml += indent + "- key: k" + std::to_string(i) + "\n" + indent + "  descriptors:\n";
    indent += "    ";
  }
  yaml +=
      indent + "- key: leaf\n" + indent + "  rate_limit: {unit: second, requests_per_unit: 1}\n";
  // The list holding k<i> starts on line 3 + 2 i (two lines per level): k32's is the 33rd.
  CHECK(error_of(yaml) == "rules.yaml:67: descriptors nested more than 32 levels deep");
}

TEST_CASE("A file over 64 MiB is refused before it is parsed", "[rules][errors][hostile]") {
  const std::string yaml = "domain: d\n#" + std::string(std::size_t{64} << 20, 'x') + "\n";
  // 10 + 1 + 2^26 + 1 bytes.
  CHECK(starts_with(error_of(yaml), "rules.yaml:0: the file has 67108876 bytes, more than the"));
}

TEST_CASE("A rules file over 64 MiB is refused before it is read", "[rules][errors][hostile]") {
  // A sparse file of 65 MiB: from_file looks at its size first, so it is never read.
  const std::string path = "rules_hostile_huge.yaml";
  { std::ofstream create(path); }
  std::filesystem::resize_file(path, std::uintmax_t{65} << 20);
  CHECK_THROWS_WITH(Rules::from_file(path),
                    "rules_hostile_huge.yaml:0: the file has 68157440 bytes, more than the "
                    "67108864 a rules file may have");
  std::filesystem::remove(path);
}

TEST_CASE("100,000 generated descriptors load, and a duplicate among them is found",
          "[rules][hostile]") {
  // Linear time: one hash-set insertion per descriptor and per rule name (the first version
  // compared every pair: 5 * 10^9 comparisons here). No time is asserted; the INFO shows it.
  // A tenth in a sanitizer build (support/sanitized.hpp): yaml-cpp took 18 s there for 100,000.
  constexpr std::size_t n = rltest::sanitized ? 10'000 : 100'000;
  const std::string yaml = numbered_descriptors(n);
  const auto start = std::chrono::steady_clock::now();
  const Rules r = Rules::from_string(yaml, "rules.yaml");
  const auto took = std::chrono::steady_clock::now() - start;
  const auto took_ms = std::chrono::duration_cast<std::chrono::milliseconds>(took).count();
  INFO(n << " descriptors (" << yaml.size() << " bytes) loaded in " << took_ms << " ms");
  CHECK(r.rules().size() == n);
  WARN(n << " descriptors loaded in " << took_ms << " ms");
  // A duplicate is found in one pass too (here among 10,000, to keep the run short): the same
  // key again as the 10,001st descriptor, on line 10,003; the first is on line 3.
  std::string small = numbered_descriptors(10'000);
  small += "  - {key: k0, rate_limit: {unit: minute, requests_per_unit: 10}}\n";
  CHECK(error_of(small) == "rules.yaml:10003: duplicate descriptor key \"k0\" (first at line 3)");
}

TEST_CASE("A descriptor-list request of 100,000 descriptors is grouped and checked in linear time",
          "[rules][envoy][hostile][regression]") {
  // Fault: each descriptor looked for its counter's group by scanning every group so far, the
  // replaced names by scanning every name, and the in-process storage compared every pair of
  // parts for a repeated key: 16,000 descriptors took 2 s, 100,000 about 80 s (O(n^2)). Now
  // hash lookups and a sort: about 0.3 s here. No time is asserted; the ctest timeout bounds it
  // (for the unsanitized build: a sanitizer build decides a tenth, support/sanitized.hpp).
  using Set = ratelimit::RuleSet<ratelimit::InMemoryStorage, ratelimit::ManualClock>;
  Set set(Rules::from_string(R"(domain: many
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: r
    rate_limit: {unit: minute, requests_per_unit: 5, name: replacer, replaces: [{name: victim}]}
  - key: v
    rate_limit: {unit: minute, requests_per_unit: 1, name: victim}
)",
                             "rules.yaml"),
          {}, ratelimit::ManualClock{});
  constexpr std::size_t n = rltest::sanitized ? 10'000 : 100'000;
  ratelimit::RateLimitRequest req{"many", {}, 0};
  req.descriptors.reserve(n + 3);
  for (std::size_t i = 0; i < n; ++i) req.descriptors.push_back({{{"k", "c" + std::to_string(i)}}});
  req.descriptors.push_back({{{"k", "c0"}}});  // descriptor n: c0's counter again
  req.descriptors.push_back({{{"r", "x"}}});   // n + 1: replaces "victim"
  req.descriptors.push_back({{{"v", "y"}}});   // n + 2: replaced, never decided
  const auto start = std::chrono::steady_clock::now();
  auto r = set.decide(req);
  const auto took = std::chrono::steady_clock::now() - start;
  WARN(n + 3 << " descriptors decided in "
             << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
  REQUIRE(r.statuses.size() == n + 3);
  CHECK(r.allowed);
  // c0: two descriptors, hits 1 + 1 summed on one counter: 2 - 2 = 0 left, both report it.
  CHECK(r.statuses[0].decision.remaining == 0);
  CHECK(r.statuses[n].decision.remaining == 0);
  // Every other c<i>: 2 - 1 = 1 left.
  CHECK(r.statuses[1].decision.remaining == 1);
  CHECK(r.statuses[n - 1].decision.remaining == 1);
  // "victim" is replaced by "replacer" (5 - 1 = 4 left) and not decided.
  CHECK(r.statuses[n + 1].decision.remaining == 4);
  CHECK(r.statuses[n + 2].replaced);
  CHECK_FALSE(r.statuses[n + 2].evaluated);
  // Again: c0 needs 2 more with 0 left, so the whole request is denied and spends nothing (c1
  // still has 1, the dry run's view).
  r = set.decide(req);
  CHECK_FALSE(r.allowed);
  CHECK(r.statuses[0].code == ratelimit::DescriptorStatus::Code::over_limit);
  CHECK(r.statuses[1].decision.remaining == 1);
  CHECK(r.statuses[n + 1].decision.remaining == 4);
}

TEST_CASE("Bytes that are not YAML text are refused with their line and offset",
          "[rules][errors][hostile][regression]") {
  // Fault: yaml-cpp read a raw NUL, other control characters and invalid UTF-8 straight into
  // keys, values and the domain, which the reference service's YAML reader refuses; a file
  // damaged in transit loaded silently. A YAML stream is printable UTF-8 (YAML 1.2, 5.1).
  const std::string head = "domain: d\ndescriptors:\n  - key: a";  // line 3, "a" at byte 10
  const std::string tail = "\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
  // Offsets: "domain: d\n" is 10 bytes, "descriptors:\n" 13, so line 3 starts at 23; the bad
  // byte follows "  - key: a" (10 bytes): byte 11 of the line, offset 33.
  const std::string where = "rules.yaml:3: byte 11 of the line (offset 33): ";
  CHECK(error_of(head + std::string(1, '\0') + "b" + tail) ==
        where +
            "control character 0x00, which YAML does not allow in a file (escape it inside a "
            "double-quoted string, e.g. \"\\x00\")");
  CHECK(error_of(head + "\x1b" + tail) ==
        where +
            "control character 0x1B, which YAML does not allow in a file (escape it inside a "
            "double-quoted string, e.g. \"\\x1B\")");
  // Not UTF-8: a lone continuation byte, a truncated sequence, an overlong '/' (C0 AF), a
  // UTF-16 surrogate (ED A0 80), a code point past U+10FFFF (F4 90 80 80), a byte never used.
  for (const std::string bad :
       {"\x80", "\xc3(", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff"}) {
    const std::string e = error_of(head + bad + tail);
    INFO(e);
    CHECK(starts_with(e, where + "byte 0x"));
    CHECK(e.find("does not begin valid UTF-8 (a rules file is UTF-8 text)") != std::string::npos);
  }
  // A C1 control character (U+0085 is YAML's next line, allowed) and a non-character.
  CHECK(error_of(head + "\xc2\x9b" + tail) ==
        where +
            "character U+9B, which YAML does not allow in a file (a control character or "
            "non-character)");
  CHECK(starts_with(error_of(head + "\xef\xbf\xbf" + tail), where + "character U+FFFF"));
  // What YAML allows loads as written: tabs and CRLF, any printable UTF-8 (2, 3 and 4 bytes),
  // and a NUL written escaped in a double-quoted string (a key of 3 bytes).
  const Rules ok = Rules::from_string(
      "domain: d\r\ndescriptors:\r\n  - key: \"a\\0b\"\t\r\n    value: "
      "\"\xc3\xa9\xe2\x82\xac\xf0\x9f"
      "\x98\x80\xc2\x85\"\r\n    rate_limit: {unit: second, requests_per_unit: 1}\r\n",
      "rules.yaml");
  REQUIRE(ok.rules().size() == 1);
  CHECK(ok.rules()[0].path[0].key == std::string("a\0b", 3));
  CHECK(ok.rules()[0].path[0].value == "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xc2\x85");
}

TEST_CASE("YAML nested past the reader's limit is refused as too deep, not as a bad file",
          "[rules][errors][hostile]") {
  // yaml-cpp stops at 500 levels of lists and mappings and calls it "bad file", which named
  // neither the problem nor a limit. 100,000 `[`: refused at once, on line 2.
  const std::string yaml =
      "domain: d\ndescriptors: " + std::string(100'000, '[') + std::string(100'000, ']') + "\n";
  CHECK(error_of(yaml) ==
        "rules.yaml:2: invalid YAML: nested too deeply (the YAML reader stops at 500 levels of "
        "lists and mappings)");
}

TEST_CASE("A flat request of 100,000 entries against 10,000 descriptors is matched in linear time",
          "[rules][hostile][regression]") {
  // Fault: the flat match scanned the whole request for each descriptor of the file it visited:
  // (descriptors) x (entries), 0.9 s for 10,000 of each (g++ -O2). A request of more than 8
  // entries is now hashed once. The first entry of a repeated key still counts.
  const Rules rules = Rules::from_string(numbered_descriptors(10'000), "rules.yaml");
  std::vector<ratelimit::DescriptorEntry> request;
  request.push_back({"k7", "first"});
  for (int i = 0; i < 100'000; ++i) request.push_back({"x" + std::to_string(i), "v"});
  request.push_back({"k7", "second"});   // a repeat: ignored
  request.push_back({"k9999", "last"});  // the file's last descriptor
  const auto start = std::chrono::steady_clock::now();
  const auto m = rules.match(std::span<const ratelimit::DescriptorEntry>(request));
  const auto took = std::chrono::steady_clock::now() - start;
  WARN("10,000 descriptors x 100,003 entries matched in "
       << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
  REQUIRE(m.size() == 2);
  CHECK(m[0].rule->name == "k7");
  CHECK(m[0].key == "5:first");  // the counter of the first value, length-prefixed
  CHECK(m[1].rule->name == "k9999");
  CHECK(m[1].key == "4:last");
  // A small request (scanned, 8 entries or fewer) matches alike.
  const auto small = rules.match({{"k7", "first"}, {"k7", "second"}});
  REQUIRE(small.size() == 1);
  CHECK(small[0].key == "5:first");
}

TEST_CASE("An empty time_zone or first_day is refused instead of read as absent",
          "[rules][errors][hostile][regression]") {
  // Fault: `time_zone: ""` read as no time zone (UTC) and `first_day: ""` as Monday, and for a
  // rate (which takes neither) both passed silently: an emptied template field went unnoticed.
  CHECK(error_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
                 "requests_per_unit: 1, time_zone: \"\"}\n") ==
        "rules.yaml:4: rate_limit.time_zone = \"\": empty (an IANA name such as Europe/Madrid, "
        "or leave it out for UTC)");
  CHECK(error_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: week\n"
                 "      requests_per_unit: 1\n      first_day: ''\n") ==
        "rules.yaml:7: rate_limit.first_day = \"\": empty (monday .. sunday, or leave it out for "
        "monday)");
}

TEST_CASE("A long wildcard part against a long value matches in linear time",
          "[rules][hostile][regression]") {
  // Fault: each middle part of a wildcard was found with std::string_view::find, which compares
  // up to the part's length at every position: "*" a^m "b*" against a^n cost n x m (a part of
  // 1 MiB in a file and a 4 MiB value: minutes per request). Parts are now found with glibc's
  // memmem (Two-Way, linear). Here m = 100,000 and n = 4 MiB (4 * 10^11 byte comparisons before).
  const std::string part(100'000, 'a');
  const Rules rules =
      Rules::from_string("domain: d\ndescriptors:\n  - key: k\n    value: \"*" + part +
                             "b*\"\n    rate_limit: {unit: second, "
                             "requests_per_unit: 5}\n",
                         "rules.yaml");
  const std::string miss(std::size_t{4} << 20, 'a');
  const auto start = std::chrono::steady_clock::now();
  CHECK(rules.lookup({{"k", miss}}).rule == nullptr);
  CHECK(rules.lookup({{"k", "x" + miss + "bx"}}).rule != nullptr);  // the part, then b: a match
  const auto took = std::chrono::steady_clock::now() - start;
  WARN("a 100,000-byte wildcard part against 4 MiB values: "
       << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
  // The linear search on periodic parts, where a mismatch must resume inside the part: (ab)^40 c
  // (81 bytes) is in (ab)^100 c and not in (ab)^100 x; parts in order, each at its first place.
  using ratelimit::detail::wildcard_match;
  std::string abs;
  for (int i = 0; i < 40; ++i) abs += "ab";
  std::string text;
  for (int i = 0; i < 100; ++i) text += "ab";
  CHECK(wildcard_match("*" + abs + "c*", text + "c"));
  CHECK_FALSE(wildcard_match("*" + abs + "c*", text + "x"));
  CHECK(wildcard_match("x*" + abs + "c*" + abs + "c", "x" + text + "c" + text + "c"));
  CHECK_FALSE(wildcard_match("x*" + abs + "c*" + abs + "c*d", "x" + text + "c" + text + "c"));
  CHECK(wildcard_match("*" + std::string(65, 'a') + "*",
                       std::string(64, 'a') + "b" + std::string(65, 'a')));
}
