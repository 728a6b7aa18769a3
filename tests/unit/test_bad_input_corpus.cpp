// The bad-input corpus (tests/bad_inputs/cases.tsv): every case exits with its code and message,
// within 60 s and 1 GiB of address space, and none reports an internal error.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "tests/test_support.h"

namespace {

struct Case {
  int line = 0;
  int exit_code = 0;
  std::string fragment;
  std::vector<std::string> args;
};

std::string expand(std::string arg, const std::string& dir) {
  for (std::size_t at = arg.find("@/"); at != std::string::npos; at = arg.find("@/", at + dir.size())) {
    arg.replace(at, 2, dir);
  }
  return arg;
}

std::vector<Case> read_cases() {
  const std::string dir = memtwin::test::source_path("tests/bad_inputs") + "/";
  std::ifstream in(dir + "cases.tsv");
  std::vector<Case> cases;
  std::string text;
  for (int n = 1; std::getline(in, text); ++n) {
    if (text.empty() || text[0] == '#') continue;
    std::stringstream fields(text);
    Case c;
    c.line = n;
    std::string code, args;
    std::getline(fields, code, '\t');
    std::getline(fields, c.fragment, '\t');
    std::getline(fields, args);
    c.exit_code = std::stoi(code);
    std::stringstream words(args);
    for (std::string w; words >> w;) c.args.push_back(expand(w, dir));
    cases.push_back(std::move(c));
  }
  return cases;
}

// 1 GiB of address space, except under AddressSanitizer, whose shadow memory alone reserves
// terabytes of it (the fuzzers' -malloc_limit_mb bounds allocations there).
#ifdef MEMTWIN_SANITIZED
constexpr const char* kAddressLimit = "";
#else
constexpr const char* kAddressLimit = "ulimit -v 1048576; ";
#endif

}  // namespace

TEST_CASE("every case of the bad-input corpus exits with its code and message, within 60 s and 1 GiB", "[unit]") {
  const std::vector<Case> cases = read_cases();
  REQUIRE(cases.size() >= 60);
  for (const Case& c : cases) {
    INFO("cases.tsv:" << c.line);
    if (kAddressLimit[0] == '\0' && c.fragment == "ulimit -v") {  // needs the limit ASan cannot run under
      WARN("cases.tsv:" << c.line << " not run: it needs the address-space limit, which this sanitizer build cannot set");
      continue;
    }
    // The shell limits the address space and the time; memtwin runs as its last command (exec).
    std::vector<std::string> args = {"-c", std::string(kAddressLimit) + "exec timeout 60 \"$0\" \"$@\"", MEMTWIN_BINARY};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto r = memtwin::test::run_binary("/bin/sh", args);
    INFO(r.err);
    CHECK(r.exit_code == c.exit_code);
    CHECK_THAT(r.err, Catch::Contains(c.fragment));
    CHECK_THAT(r.err, !Catch::Contains("internal error"));
  }
}
