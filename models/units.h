#pragma once
// Units as types. Every physical quantity in memtwin carries its unit in its type, never in a
// comment: Bytes (exact, integral), Seconds, BytesPerSec, FlopsPerSec, Flops. Conversions from the
// scenario's strings ("80GiB", "450GB/s", "2us", "989TFLOPS", "400Gbps") live in unit_parse.h.
#include <cmath>
#include <cstdint>
#include <compare>

namespace memtwin {

/// A quantity of type T with a double magnitude in the SI base unit of Tag.
template <class Tag>
class Quantity {
 public:
  constexpr Quantity() = default;
  constexpr explicit Quantity(double value) : value_(value) {}
  [[nodiscard]] constexpr double value() const { return value_; }
  constexpr auto operator<=>(const Quantity&) const = default;
  constexpr Quantity operator+(Quantity o) const { return Quantity(value_ + o.value_); }
  constexpr Quantity operator-(Quantity o) const { return Quantity(value_ - o.value_); }
  constexpr Quantity operator*(double k) const { return Quantity(value_ * k); }
  constexpr Quantity operator/(double k) const { return Quantity(value_ / k); }
  constexpr double operator/(Quantity o) const { return value_ / o.value_; }
  constexpr Quantity& operator+=(Quantity o) { value_ += o.value_; return *this; }

 private:
  double value_ = 0.0;
};

struct SecondsTag {};
struct BytesPerSecTag {};
struct FlopsPerSecTag {};
struct FlopsTag {};

using Seconds = Quantity<SecondsTag>;          ///< seconds
using BytesPerSec = Quantity<BytesPerSecTag>;  ///< bytes per second (decimal: 1 GB/s = 1e9 B/s)
using FlopsPerSec = Quantity<FlopsPerSecTag>;  ///< floating-point operations per second
using Flops = Quantity<FlopsTag>;              ///< a count of floating-point operations

/// An exact count of bytes. Memory accounting must not drift through floating point, so Bytes is
/// integral; fractional results (a share of a sharded tensor) are rounded up by the caller.
class Bytes {
 public:
  constexpr Bytes() = default;
  constexpr explicit Bytes(std::int64_t count) : count_(count) {}
  [[nodiscard]] constexpr std::int64_t count() const { return count_; }
  [[nodiscard]] constexpr double as_double() const { return static_cast<double>(count_); }
  constexpr auto operator<=>(const Bytes&) const = default;
  constexpr Bytes operator+(Bytes o) const { return Bytes(count_ + o.count_); }
  constexpr Bytes operator-(Bytes o) const { return Bytes(count_ - o.count_); }
  constexpr Bytes operator*(std::int64_t k) const { return Bytes(count_ * k); }
  constexpr Bytes& operator+=(Bytes o) { count_ += o.count_; return *this; }
  constexpr Bytes& operator-=(Bytes o) { count_ -= o.count_; return *this; }

 private:
  std::int64_t count_ = 0;
};

/// A fractional byte count (a share of a sharded tensor, a bucket of elements), rounded up.
inline Bytes ceil_bytes(double bytes) { return Bytes(static_cast<std::int64_t>(std::ceil(bytes))); }

constexpr Seconds operator/(Bytes b, BytesPerSec r) { return Seconds(b.as_double() / r.value()); }
constexpr Seconds operator/(Flops f, FlopsPerSec r) { return Seconds(f.value() / r.value()); }

constexpr std::int64_t kKiB = 1024;
constexpr std::int64_t kMiB = 1024 * kKiB;
constexpr std::int64_t kGiB = 1024 * kMiB;

}  // namespace memtwin
