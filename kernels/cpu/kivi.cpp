#include "kernels/kivi.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/kv_kernels.h"

namespace memtwin::kernels {

void quantize_keys_per_channel(const float* keys, int group, int head_dim, int bits, std::uint8_t* out) {
  const int code_bytes = (group * bits + 7) / 8, levels = (1 << bits) - 1;
  std::vector<float> channel(group);
  for (int c = 0; c < head_dim; ++c) {
    for (int t = 0; t < group; ++t) channel[t] = keys[t * head_dim + c];
    const float lo = *std::min_element(channel.begin(), channel.end());
    const float hi = *std::max_element(channel.begin(), channel.end());
    const std::uint16_t scale_h = float_to_half((hi - lo) / levels), zero_h = float_to_half(lo);
    const float scale = half_to_float(scale_h), zero = half_to_float(zero_h);
    std::uint8_t* base = out + static_cast<std::size_t>(c) * (code_bytes + 4);
    std::memset(base, 0, code_bytes);
    for (int t = 0; t < group; ++t) {
      int code = scale > 0 ? static_cast<int>(std::lround((channel[t] - zero) / scale)) : 0;
      code = std::clamp(code, 0, levels);
      base[t * bits / 8] |= static_cast<std::uint8_t>(code << (t * bits % 8));
    }
    std::memcpy(base + code_bytes, &scale_h, 2);
    std::memcpy(base + code_bytes + 2, &zero_h, 2);
  }
}

void dequantize_keys_per_channel(const std::uint8_t* in, int group, int head_dim, int bits, float* keys) {
  const int code_bytes = (group * bits + 7) / 8, mask = (1 << bits) - 1;
  for (int c = 0; c < head_dim; ++c) {
    const std::uint8_t* base = in + static_cast<std::size_t>(c) * (code_bytes + 4);
    std::uint16_t scale_h, zero_h;
    std::memcpy(&scale_h, base + code_bytes, 2);
    std::memcpy(&zero_h, base + code_bytes + 2, 2);
    const float scale = half_to_float(scale_h), zero = half_to_float(zero_h);
    for (int t = 0; t < group; ++t) {
      const int code = (base[t * bits / 8] >> (t * bits % 8)) & mask;
      keys[t * head_dim + c] = code * scale + zero;
    }
  }
}

KiviSequence::KiviSequence(int head_dim, int bits, int group, int residual)
    : head_dim_(head_dim), bits_(bits), group_(group), residual_(residual) {
  value_format_.element = bits == 8 ? KvElement::int8 : bits == 4 ? KvElement::int4 : KvElement::int2;
  value_format_.head_dim = head_dim;
  value_format_.group = group;
  value_format_.validate();
  if (residual % group != 0) throw std::invalid_argument("KIVI needs the residual to be a multiple of the group");
}

void KiviSequence::append(const float* key, const float* value) {
  // Values and keys stay together in the residual; both are rounded to fp16 there.
  for (int i = 0; i < head_dim_; ++i) {
    residual_k_.push_back(half_to_float(float_to_half(key[i])));
    residual_v_.push_back(half_to_float(float_to_half(value[i])));
  }
  // Once a whole group stands beyond the residual window, the oldest G tokens are quantised.
  const std::int64_t in_residual = static_cast<std::int64_t>(residual_k_.size()) / head_dim_;
  if (in_residual >= residual_ + group_) {
    const std::size_t group_bytes = static_cast<std::size_t>(head_dim_) * ((group_ * bits_ + 7) / 8 + 4);
    key_groups_.resize(key_groups_.size() + group_bytes);
    quantize_keys_per_channel(residual_k_.data(), group_, head_dim_, bits_, key_groups_.data() + key_groups_.size() - group_bytes);
    const std::size_t vbytes = value_format_.vector_bytes();
    for (int t = 0; t < group_; ++t) {
      values_.resize(values_.size() + vbytes);
      quantize_vector(&residual_v_[static_cast<std::size_t>(t) * head_dim_], value_format_, values_.data() + values_.size() - vbytes);
    }
    residual_k_.erase(residual_k_.begin(), residual_k_.begin() + static_cast<long>(group_) * head_dim_);
    residual_v_.erase(residual_v_.begin(), residual_v_.begin() + static_cast<long>(group_) * head_dim_);
    quantized_ += group_;
  }
}

std::size_t KiviSequence::bytes() const {
  return key_groups_.size() + values_.size() + (residual_k_.size() + residual_v_.size()) * 2;
}

void KiviSequence::read(std::vector<float>& keys, std::vector<float>& values) const {
  keys.assign(static_cast<std::size_t>(tokens()) * head_dim_, 0.f);
  values.assign(keys.size(), 0.f);
  const std::size_t group_bytes = static_cast<std::size_t>(head_dim_) * ((group_ * bits_ + 7) / 8 + 4);
  for (std::int64_t g = 0; g < quantized_ / group_; ++g) {
    dequantize_keys_per_channel(key_groups_.data() + g * group_bytes, group_, head_dim_, bits_,
                                &keys[static_cast<std::size_t>(g) * group_ * head_dim_]);
  }
  for (std::int64_t t = 0; t < quantized_; ++t) {
    dequantize_vector(values_.data() + t * value_format_.vector_bytes(), value_format_, &values[static_cast<std::size_t>(t) * head_dim_]);
  }
  std::copy(residual_k_.begin(), residual_k_.end(), keys.begin() + quantized_ * head_dim_);
  std::copy(residual_v_.begin(), residual_v_.end(), values.begin() + quantized_ * head_dim_);
}

}  // namespace memtwin::kernels
