#include "hw/host/host_serving_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace memtwin::hw {

void HostServingKernels::gemm(int rows, int cols, int inner, const float* a, int lda, const float* b, int ldb, float beta,
                              float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, cols, inner, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

void HostServingKernels::fill(float* x, std::int64_t count, float value) { std::fill(x, x + count, value); }

void HostServingKernels::rms_norm(const float* in, float* out, int tokens, int hidden, const float* weight, float eps) {
  for (int t = 0; t < tokens; ++t) {
    const float* x = in + static_cast<std::ptrdiff_t>(t) * hidden;
    float* y = out + static_cast<std::ptrdiff_t>(t) * hidden;
    float squares = 0;
#pragma omp simd reduction(+ : squares)
    for (int j = 0; j < hidden; ++j) squares += x[j] * x[j];
    const float scale = 1.0f / std::sqrt(squares / static_cast<float>(hidden) + eps);
    if (weight) {
#pragma omp simd
      for (int j = 0; j < hidden; ++j) y[j] = x[j] * scale * weight[j];
    } else {
#pragma omp simd
      for (int j = 0; j < hidden; ++j) y[j] = x[j] * scale;
    }
  }
}

void HostServingKernels::rotary(float* rows, int tokens, int row_stride, int heads, int head_dim,
                                const std::int32_t* positions, double theta) {
  const int half = head_dim / 2;
  int needed = 0;
  for (int t = 0; t < tokens; ++t) needed = std::max(needed, positions[t] + 1);
  if (head_dim != rope_dim_ || theta != rope_theta_) {
    rope_dim_ = head_dim;
    rope_theta_ = theta;
    rope_cos_.clear();
    rope_sin_.clear();
  }
  for (int p = static_cast<int>(rope_cos_.size()) / std::max(half, 1); p < needed; ++p) {  // the tables grow to the positions seen
    for (int j = 0; j < half; ++j) {
      const double angle = p * std::pow(theta, -2.0 * j / head_dim);
      rope_cos_.push_back(static_cast<float>(std::cos(angle)));
      rope_sin_.push_back(static_cast<float>(std::sin(angle)));
    }
  }
  for (int t = 0; t < tokens; ++t) {
    const float* cos = rope_cos_.data() + static_cast<std::ptrdiff_t>(positions[t]) * half;
    const float* sin = rope_sin_.data() + static_cast<std::ptrdiff_t>(positions[t]) * half;
    float* row = rows + static_cast<std::ptrdiff_t>(t) * row_stride;
    for (int head = 0; head < heads; ++head) {
      float* x = row + static_cast<std::ptrdiff_t>(head) * head_dim;
#pragma omp simd
      for (int j = 0; j < half; ++j) {
        const float a = x[j], b = x[j + half];
        x[j] = a * cos[j] - b * sin[j];
        x[j + half] = a * sin[j] + b * cos[j];
      }
    }
  }
}

void HostServingKernels::upload(void* device, const void* host, std::int64_t bytes) {
  std::memcpy(device, host, static_cast<std::size_t>(bytes));
}

void HostServingKernels::download(void* host, const void* device, std::int64_t bytes) {
  std::memcpy(host, device, static_cast<std::size_t>(bytes));
}

// Per query head: the scores of query t against keys 0..t (one GEMM for the whole prompt, its
// upper triangle unused), each row's softmax, then the probabilities times the values (a second
// GEMM over the rows, the masked part zero).
void HostServingKernels::causal_attention(const float* rows, int row_stride, int tokens, int q_heads, int kv_heads, int head_dim,
                                          float* out, int out_stride) {
  if (tokens <= 0) return;
  const int group = q_heads / kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  logits_.resize(static_cast<std::size_t>(tokens) * tokens);
  const float* keys = rows + static_cast<std::ptrdiff_t>(q_heads) * head_dim;
  const float* values = keys + static_cast<std::ptrdiff_t>(kv_heads) * head_dim;
  for (int head = 0; head < q_heads; ++head) {
    const int kv = head / group;
    const float* q = rows + static_cast<std::ptrdiff_t>(head) * head_dim;
    const float* k = keys + static_cast<std::ptrdiff_t>(kv) * head_dim;
    const float* v = values + static_cast<std::ptrdiff_t>(kv) * head_dim;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, tokens, tokens, head_dim, scale, q, row_stride, k, row_stride, 0.0f,
                logits_.data(), tokens);
    for (int t = 0; t < tokens; ++t) {
      float* p = logits_.data() + static_cast<std::ptrdiff_t>(t) * tokens;
      const float most = *std::max_element(p, p + t + 1);
      float sum = 0;
      for (int j = 0; j <= t; ++j) sum += p[j] = std::exp(p[j] - most);
      const float inverse = 1.0f / sum;
      for (int j = 0; j <= t; ++j) p[j] *= inverse;
      std::fill(p + t + 1, p + tokens, 0.0f);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tokens, head_dim, tokens, 1.0f, logits_.data(), tokens, v, row_stride,
                0.0f, out + static_cast<std::ptrdiff_t>(head) * head_dim, out_stride);
  }
}

void HostServingKernels::activation(float* rows, int tokens, int row_stride, int inner, bool gated) {
  for (int t = 0; t < tokens; ++t) {
    float* row = rows + static_cast<std::ptrdiff_t>(t) * row_stride;
    float* out = row + (gated ? 2 : 1) * inner;
#pragma omp simd
    for (int j = 0; j < inner; ++j) {
      const float g = row[j];
      out[j] = g / (1.0f + std::exp(-g)) * (gated ? row[inner + j] : 1.0f);
    }
  }
}

void HostServingKernels::copy_rows(const float* src, int src_stride, float* dst, int dst_stride, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    std::copy(src + static_cast<std::ptrdiff_t>(r) * src_stride, src + static_cast<std::ptrdiff_t>(r) * src_stride + cols,
              dst + static_cast<std::ptrdiff_t>(r) * dst_stride);
  }
}

void HostServingKernels::write_paged(const float* values, const std::int64_t* slot_mapping, int tokens,
                                     const kernels::PagedShape& shape, std::uint8_t* cache) {
  kernels::write_paged(values, slot_mapping, tokens, shape, cache);
}

void HostServingKernels::decode_attention(const kernels::DecodeAttentionArgs& a) { kernels::decode_attention(a); }

void HostServingKernels::clear_scores(const kernels::PagedScores& scores, const std::int64_t* slot_mapping, int tokens) {
  for (int t = 0; t < tokens; ++t) {
    if (slot_mapping[t] >= 0) std::fill_n(scores.data + slot_mapping[t] * scores.kv_heads, scores.kv_heads, 0.0f);
  }
}

void HostServingKernels::score_prompt(const float* queries, int row_stride, int rows, int first_position, int q_heads,
                                      const kernels::PagedShape& shape, const std::uint8_t* k_cache,
                                      const std::int32_t* block_table, const kernels::PagedScores& scores,
                                      const std::int32_t* score_table) {
  const int hd = shape.format.head_dim, keys = first_position + rows, group = q_heads / shape.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  keys_.resize(static_cast<std::size_t>(keys) * hd);
  logits_.resize(static_cast<std::size_t>(rows) * keys);
  for (int kvh = 0; kvh < shape.kv_heads; ++kvh) {
    for (int t = 0; t < keys; ++t) {
      kernels::dequantize_vector(k_cache + shape.offset(block_table[t / shape.block_size], t % shape.block_size, kvh), shape.format,
                                 keys_.data() + static_cast<std::ptrdiff_t>(t) * hd);
    }
    for (int g = 0; g < group; ++g) {
      const float* q = queries + static_cast<std::ptrdiff_t>(kvh * group + g) * hd;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, hd, scale, q, row_stride, keys_.data(), hd, 0.0f,
                  logits_.data(), keys);
      for (int r = 0; r < rows; ++r) {
        float* p = logits_.data() + static_cast<std::ptrdiff_t>(r) * keys;
        const int seen = first_position + r + 1;  // causal
        const float m = *std::max_element(p, p + seen);
        float sum = 0;
        for (int t = 0; t < seen; ++t) sum += (p[t] = std::exp(p[t] - m));
        const float inv = 1.0f / sum;
        for (int t = 0; t < seen; ++t) *scores.at(score_table, t, kvh) += p[t] * inv;
      }
    }
  }
}

void HostServingKernels::prefill_attention(std::int64_t queries, std::int64_t keys, int head_dim, int heads) {
  kernels_.gemm({queries, keys, head_dim, heads});
  kernels_.gemm({queries, head_dim, keys, heads});
}

void HostServingKernels::argmax_rows(const float* x, int rows, int cols, std::vector<int>& out) {
  out.resize(static_cast<std::size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    const float* row = x + static_cast<std::ptrdiff_t>(r) * cols;
    out[static_cast<std::size_t>(r)] = static_cast<int>(std::max_element(row, row + cols) - row);
  }
}

void HostServingKernels::swap(std::int64_t bytes) { kernels_.memcopy(static_cast<double>(bytes)); }

}  // namespace memtwin::hw
