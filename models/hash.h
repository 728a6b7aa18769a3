#pragma once
// FNV-1a over a canonical text form: the identity of what a backend executes (a training Plan, a
// serving run's requests and limits), stable across platforms and runs.
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <string>

namespace memtwin {

class Fnv1a {
 public:
  void add(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 1099511628211ULL;
  }
  void add(const std::string& s) { add(s.data(), s.size() + 1); }
  /// A double as its "%.17g" text (std::to_chars gives printf's digits, several times faster:
  /// a large plan hashes millions of them).
  void add(double d) {
    char buf[32];
    const auto end = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::general, 17).ptr;
    add(buf, static_cast<std::size_t>(end - buf));
  }
  void add(std::int64_t v) { add(&v, sizeof v); }
  [[nodiscard]] std::uint64_t value() const { return h_; }
  /// 16 hex digits, as results print it.
  [[nodiscard]] std::string hex() const { return to_hex(h_); }
  static std::string to_hex(std::uint64_t v) {
    char buf[20];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
  }

 private:
  std::uint64_t h_ = 1469598103934665603ULL;
};

}  // namespace memtwin
