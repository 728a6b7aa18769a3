#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/kv_format.h"

namespace memtwin::kernels {

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1f;
  std::uint32_t mantissa = h & 0x3ff;
  std::uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x3ff;
      bits = sign | (exponent << 23) | (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000 | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::uint16_t float_to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const std::uint32_t sign = (x >> 16) & 0x8000;
  const std::uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000) return static_cast<std::uint16_t>(sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0));
  if (abs >= 0x477ff000) return static_cast<std::uint16_t>(sign | 0x7c00);  // overflow to infinity
  if (abs < 0x38800000) {                                                   // subnormal or zero
    if (abs < 0x33000000) return static_cast<std::uint16_t>(sign);
    // value = |f| / 2^-24, rounded to nearest even: the 24-bit significand shifted right.
    const std::uint32_t total_shift = 126 - (abs >> 23);
    const std::uint32_t mantissa = (abs & 0x7fffff) | 0x800000;
    std::uint32_t value = mantissa >> total_shift;
    const std::uint32_t rest = mantissa & ((1u << total_shift) - 1);
    const std::uint32_t halfway = 1u << (total_shift - 1);
    if (rest > halfway || (rest == halfway && (value & 1))) ++value;
    return static_cast<std::uint16_t>(sign | value);
  }
  std::uint32_t value = ((abs >> 23) - 127 + 15) << 10 | ((abs >> 13) & 0x3ff);
  const std::uint32_t rest = abs & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (value & 1))) ++value;  // may carry into the exponent: correct
  return static_cast<std::uint16_t>(sign | value);
}

float e4m3_to_float(std::uint8_t v) {
  const float sign = (v & 0x80) ? -1.f : 1.f;
  const int exponent = (v >> 3) & 0xf;
  const int mantissa = v & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::nanf("");
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m/8 x 2^-6
  return sign * std::ldexp(1.f + static_cast<float>(mantissa) / 8.f, exponent - 7);
}

std::uint8_t float_to_e4m3(float f) {
  const std::uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return static_cast<std::uint8_t>(sign | 0x7f);
  const float a = std::fabs(f);
  if (a >= 448.f) return static_cast<std::uint8_t>(sign | 0x7e);  // saturate (infinities too)
  if (a < 0.015625f) {  // below the smallest normal, 2^-6: steps of 2^-9 (code 8 is 2^-6 itself)
    return static_cast<std::uint8_t>(sign | static_cast<int>(std::nearbyint(a * 512.f)));
  }
  int e2 = 0;
  const float fraction = std::frexp(a, &e2);  // a = fraction x 2^e2, fraction in [0.5, 1)
  int exponent = e2 - 1;                       // a = s x 2^exponent, s in [1, 2)
  int mantissa = static_cast<int>(std::nearbyint((fraction * 2.f - 1.f) * 8.f));  // ties to even
  if (mantissa == 8) {
    mantissa = 0;
    ++exponent;
  }
  const int biased = exponent + 7;
  if (biased > 15 || (biased == 15 && mantissa == 7)) return static_cast<std::uint8_t>(sign | 0x7e);
  return static_cast<std::uint8_t>(sign | (biased << 3) | mantissa);
}

const float* half_to_float_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (std::uint32_t h = 0; h < 65536; ++h) t[h] = half_to_float(static_cast<std::uint16_t>(h));
    return t;
  }();
  return table.data();
}

}  // namespace memtwin::kernels
