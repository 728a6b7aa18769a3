#pragma once
// Parsing and printing of quantities as the scenario language writes them.
//
// Contract: every parse_* function accepts "<number><suffix>" with optional spaces between the
// number and the suffix, and throws UnitError with a message naming the accepted suffixes when the
// suffix is missing or unknown, or when the number is negative, zero (where zero is meaningless),
// not finite or not a number. Decimal prefixes are powers of 1000 (GB, TB/s, Gbps), binary ones
// powers of 1024 (GiB, MiB/s). Bit rates (bps, b/s) are divided by 8.
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "models/units.h"

namespace memtwin {

class UnitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

Bytes parse_bytes(std::string_view text);            ///< "80GiB", "30TB", "512B"
BytesPerSec parse_bandwidth(std::string_view text);  ///< "450GB/s", "400Gbps", "25GiB/s"
Seconds parse_duration(std::string_view text);       ///< "2us", "5 ms", "1.5s", "2min", "1h"
FlopsPerSec parse_flops_rate(std::string_view text); ///< "989TFLOPS", "312 TFLOP/s"
double parse_rate_per_second(std::string_view text); ///< "10/s", "600/min", "36000/h" -> per second

/// The whole of `text` as one decimal or scientific number ("12", "-0.5", "+2", "1e-3"): no
/// spaces, units or hexadecimal, the same in every locale; nullopt otherwise. "nan" and "inf"
/// parse, so that a caller refusing them can say why.
std::optional<double> parse_plain_number(std::string_view text);

/// Canonical strings that parse back to exactly the same value ("80GiB", "450GB/s", "2us").
std::string format_bytes(Bytes b);
std::string format_bandwidth(BytesPerSec r);
std::string format_duration(Seconds s);
std::string format_flops_rate(FlopsPerSec f);

/// Human-readable, rounded ("74.5 GiB", "1.23 TB/s", "3.2 ms") for tables.
std::string human_bytes(Bytes b);
std::string human_bandwidth(BytesPerSec r);
std::string human_duration(Seconds s);
std::string human_count(double n);  ///< "6.74 B", "128 K"

}  // namespace memtwin
