#include "models/unit_parse.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

namespace memtwin {
namespace {

struct Suffix {
  std::string_view text;
  double factor;
};

// Splits "12.5 GiB" into 12.5 and "GiB"; the number must be a plain decimal or scientific literal.
std::pair<double, std::string> split_number(std::string_view text, std::string_view what) {
  std::string s(text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t start = 0;
  while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
  s = s.substr(start);
  if (s.empty()) throw UnitError("empty " + std::string(what));
  const char* begin = s.c_str();
  char* end = nullptr;
  double number = std::strtod(begin, &end);
  if (end == begin) throw UnitError("'" + s + "' does not start with a number");
  std::string rest(end);
  std::size_t first = 0;
  while (first < rest.size() && rest[first] == ' ') ++first;
  rest = rest.substr(first);
  if (!std::isfinite(number)) throw UnitError("'" + s + "' is not a finite number");
  if (number < 0) throw UnitError("'" + s + "' is negative");
  return {number, rest};
}

std::string accepted(const std::vector<Suffix>& table) {
  std::string out;
  for (const auto& s : table) {
    if (!out.empty()) out += ", ";
    out += s.text;
  }
  return out;
}

double parse_with(std::string_view text, const std::vector<Suffix>& table, std::string_view what) {
  auto [number, suffix] = split_number(text, what);
  if (suffix.empty()) {
    throw UnitError("'" + std::string(text) + "' has no unit; write it as a " + std::string(what) +
                    " with one of: " + accepted(table));
  }
  for (const auto& s : table) {
    if (suffix == s.text) return number * s.factor;
  }
  throw UnitError("unknown unit '" + suffix + "' in '" + std::string(text) + "' for a " +
                  std::string(what) + "; use one of: " + accepted(table));
}

const std::vector<Suffix>& byte_suffixes() {
  static const std::vector<Suffix> table = {
      {"B", 1},          {"KB", 1e3},         {"MB", 1e6},         {"GB", 1e9},
      {"TB", 1e12},      {"PB", 1e15},        {"KiB", 0x1p10},     {"MiB", 0x1p20},
      {"GiB", 0x1p30},   {"TiB", 0x1p40},     {"PiB", 0x1p50}};
  return table;
}

const std::vector<Suffix>& bandwidth_suffixes() {
  static const std::vector<Suffix> table = {
      {"B/s", 1},       {"KB/s", 1e3},      {"MB/s", 1e6},        {"GB/s", 1e9},
      {"TB/s", 1e12},   {"KiB/s", 0x1p10},  {"MiB/s", 0x1p20},    {"GiB/s", 0x1p30},
      {"TiB/s", 0x1p40}, {"bps", 1.0 / 8},  {"Kbps", 1e3 / 8},    {"Mbps", 1e6 / 8},
      {"Gbps", 1e9 / 8}, {"Tbps", 1e12 / 8}, {"Gb/s", 1e9 / 8},   {"Tb/s", 1e12 / 8}};
  return table;
}

const std::vector<Suffix>& duration_suffixes() {
  static const std::vector<Suffix> table = {{"ns", 1e-9}, {"us", 1e-6}, {"µs", 1e-6},
                                            {"ms", 1e-3}, {"s", 1},     {"min", 60},
                                            {"h", 3600},  {"d", 86400}};
  return table;
}

const std::vector<Suffix>& flops_suffixes() {
  static const std::vector<Suffix> table = {
      {"FLOPS", 1},       {"GFLOPS", 1e9},    {"TFLOPS", 1e12},    {"PFLOPS", 1e15},
      {"FLOP/s", 1},      {"GFLOP/s", 1e9},   {"TFLOP/s", 1e12},   {"PFLOP/s", 1e15}};
  return table;
}

// Prints the shortest decimal that parses back to the same double, without an exponent for the
// magnitudes quantities have.
std::string shortest(double v) {
  char buf[512];
  const bool plain = std::fabs(v) >= 1e-9 && std::fabs(v) < 1e21;
  auto result = plain ? std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed)
                      : std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, result.ptr);
}

std::string format_with(double value, const std::vector<std::pair<std::string_view, double>>& units) {
  // Largest unit that divides exactly (or gives a short decimal) wins.
  for (const auto& [suffix, factor] : units) {
    double scaled = value / factor;
    if (scaled >= 1 && scaled * factor == value) {
      std::string digits = shortest(scaled);
      if (digits.size() <= 8 && digits.find('e') == std::string::npos) return digits + std::string(suffix);
    }
  }
  return shortest(value / units.back().second) + std::string(units.back().first);
}

std::string human_with(double value, const std::vector<std::pair<std::string_view, double>>& units) {
  for (const auto& [suffix, factor] : units) {
    if (std::fabs(value) >= factor || factor == units.back().second) {  // a negative value in the unit of its size
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.3g %s", value / factor, std::string(suffix).c_str());
      return buf;
    }
  }
  return shortest(value);
}

}  // namespace

Bytes parse_bytes(std::string_view text) {
  double v = parse_with(text, byte_suffixes(), "size");
  if (v >= 0x1p62) throw UnitError("'" + std::string(text) + "' is too large");
  return Bytes(std::llround(v));
}

BytesPerSec parse_bandwidth(std::string_view text) {
  return BytesPerSec(parse_with(text, bandwidth_suffixes(), "bandwidth"));
}

Seconds parse_duration(std::string_view text) {
  return Seconds(parse_with(text, duration_suffixes(), "duration"));
}

FlopsPerSec parse_flops_rate(std::string_view text) {
  return FlopsPerSec(parse_with(text, flops_suffixes(), "compute rate"));
}

double parse_rate_per_second(std::string_view text) {
  static const std::vector<Suffix> table = {{"/s", 1}, {"/min", 1.0 / 60}, {"/h", 1.0 / 3600}};
  return parse_with(text, table, "rate");
}

std::string format_bytes(Bytes b) {
  static const std::vector<std::pair<std::string_view, double>> units = {
      {"PiB", 0x1p50}, {"TiB", 0x1p40}, {"GiB", 0x1p30}, {"MiB", 0x1p20}, {"KiB", 0x1p10},
      {"PB", 1e15},    {"TB", 1e12},    {"GB", 1e9},     {"MB", 1e6},     {"KB", 1e3}, {"B", 1}};
  return format_with(b.as_double(), units);
}

std::string format_bandwidth(BytesPerSec r) {
  static const std::vector<std::pair<std::string_view, double>> units = {
      {"TB/s", 1e12}, {"GB/s", 1e9}, {"GiB/s", 0x1p30}, {"MB/s", 1e6}, {"KB/s", 1e3}, {"B/s", 1}};
  return format_with(r.value(), units);
}

std::string format_duration(Seconds s) {
  static const std::vector<std::pair<std::string_view, double>> units = {
      {"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};
  return format_with(s.value(), units);
}

std::string format_flops_rate(FlopsPerSec f) {
  static const std::vector<std::pair<std::string_view, double>> units = {
      {"PFLOPS", 1e15}, {"TFLOPS", 1e12}, {"GFLOPS", 1e9}, {"FLOPS", 1}};
  return format_with(f.value(), units);
}

std::optional<double> parse_plain_number(std::string_view text) {
  if (!text.empty() && text.front() == '+') {  // from_chars takes no '+'
    text.remove_prefix(1);
    if (!text.empty() && text.front() == '-') return std::nullopt;
  }
  if (text.empty()) return std::nullopt;
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

std::string human_bytes(Bytes b) {
  static const std::vector<std::pair<std::string_view, double>> units = {
      {"TiB", 0x1p40}, {"GiB", 0x1p30}, {"MiB", 0x1p20}, {"KiB", 0x1p10}, {"B", 1}};
  // Negate as a double: -INT64_MIN does not fit an int64 (a wrapped size would recurse for ever).
  if (b.count() < 0) return "-" + human_with(-b.as_double(), units);
  return human_with(b.as_double(), units);
}

std::string human_bandwidth(BytesPerSec r) {
  static const std::vector<std::pair<std::string_view, double>> units = {
      {"TB/s", 1e12}, {"GB/s", 1e9}, {"MB/s", 1e6}, {"KB/s", 1e3}, {"B/s", 1}};
  return human_with(r.value(), units);
}

std::string human_duration(Seconds s) {
  static const std::vector<std::pair<std::string_view, double>> units = {
      {"h", 3600}, {"min", 60}, {"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};
  return human_with(s.value(), units);
}

std::string human_count(double n) {
  static const std::vector<std::pair<std::string_view, double>> units = {
      {"T", 1e12}, {"B", 1e9}, {"M", 1e6}, {"K", 1e3}, {"", 1}};
  std::string out = human_with(n, units);
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace memtwin
