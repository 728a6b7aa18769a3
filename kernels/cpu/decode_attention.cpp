#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/kv_kernels.h"

namespace memtwin::kernels {

void validate(const DecodeAttentionArgs& a) {
  a.shape.format.validate();
  auto fail = [](const std::string& m) { throw std::invalid_argument("decode_attention: " + m); };
  if (!a.query || !a.k_cache || !a.v_cache || !a.block_tables || !a.context_lens || !a.out) fail("a pointer is null");
  if (a.num_seqs <= 0) fail("num_seqs must be positive");
  if (a.shape.kv_heads <= 0 || a.q_heads % a.shape.kv_heads != 0) {
    fail("q_heads (" + std::to_string(a.q_heads) + ") must be a multiple of kv_heads (" + std::to_string(a.shape.kv_heads) + ")");
  }
  if (a.q_heads / a.shape.kv_heads > 8) fail("at most 8 query heads per KV head are supported");
  if (a.shape.block_size <= 0 || a.max_blocks_per_seq <= 0) fail("block_size and max_blocks_per_seq must be positive");
  if (!(a.scale > 0)) fail("scale must be positive");
}

void decode_attention(const DecodeAttentionArgs& a) {
  validate(a);
  const KvFormat& f = a.shape.format;
  const int hd = f.head_dim;
  const int group = a.q_heads / a.shape.kv_heads;
  const int pairs = a.num_seqs * a.shape.kv_heads;
  for (int seq = 0; seq < a.num_seqs; ++seq) {  // checked before the parallel loop: no throwing inside it
    if (a.context_lens[seq] < 1 || a.context_lens[seq] > a.max_blocks_per_seq * a.shape.block_size) {
      throw std::invalid_argument("decode_attention: context length out of range for sequence " + std::to_string(seq));
    }
  }
#pragma omp parallel for schedule(dynamic)
  for (int pair = 0; pair < pairs; ++pair) {
    const int seq = pair / a.shape.kv_heads, kvh = pair % a.shape.kv_heads;
    const int ctx = a.context_lens[seq];
    std::vector<float> scores(static_cast<std::size_t>(group) * ctx), vec(hd), acc(static_cast<std::size_t>(group) * hd, 0.f);
    const float* q = a.query + (static_cast<std::size_t>(seq) * a.q_heads + kvh * group) * hd;
    // Pass 1: scores, each K vector dequantised once and used by every query head of its group.
    for (int t = 0; t < ctx; ++t) {
      const int block = a.block_tables[static_cast<std::size_t>(seq) * a.max_blocks_per_seq + t / a.shape.block_size];
      dequantize_vector(a.k_cache + a.shape.offset(block, t % a.shape.block_size, kvh), f, vec.data());
      for (int g = 0; g < group; ++g) {
        float dot = 0;
        for (int i = 0; i < hd; ++i) dot += q[g * hd + i] * vec[i];
        scores[static_cast<std::size_t>(g) * ctx + t] = dot * a.scale;
      }
    }
    std::vector<float> denominators(group);
    for (int g = 0; g < group; ++g) {
      float* s = &scores[static_cast<std::size_t>(g) * ctx];
      const float m = *std::max_element(s, s + ctx);
      float sum = 0;
      for (int t = 0; t < ctx; ++t) sum += (s[t] = std::exp(s[t] - m));
      denominators[g] = sum;
    }
    // Pass 2: the probability-weighted sum of V.
    for (int t = 0; t < ctx; ++t) {
      const int block = a.block_tables[static_cast<std::size_t>(seq) * a.max_blocks_per_seq + t / a.shape.block_size];
      dequantize_vector(a.v_cache + a.shape.offset(block, t % a.shape.block_size, kvh), f, vec.data());
      for (int g = 0; g < group; ++g) {
        const float p = scores[static_cast<std::size_t>(g) * ctx + t];
        for (int i = 0; i < hd; ++i) acc[static_cast<std::size_t>(g) * hd + i] += p * vec[i];
      }
    }
    float* o = a.out + (static_cast<std::size_t>(seq) * a.q_heads + kvh * group) * hd;
    for (int g = 0; g < group; ++g)
      for (int i = 0; i < hd; ++i) o[g * hd + i] = acc[static_cast<std::size_t>(g) * hd + i] / denominators[g];
  }
}

void reference_decode_attention(const float* query, const float* k, const float* v, const std::int32_t* context_lens,
                                int num_seqs, int max_context, int q_heads, int kv_heads, int head_dim, float scale,
                                float* out) {
  const int group = q_heads / kv_heads;
  for (int s = 0; s < num_seqs; ++s) {
    for (int h = 0; h < q_heads; ++h) {
      const int kvh = h / group;
      const float* q = query + (static_cast<std::size_t>(s) * q_heads + h) * head_dim;
      std::vector<double> p(context_lens[s]);
      double m = -1e300;
      for (int t = 0; t < context_lens[s]; ++t) {
        const float* kt = k + ((static_cast<std::size_t>(s) * max_context + t) * kv_heads + kvh) * head_dim;
        double dot = 0;
        for (int i = 0; i < head_dim; ++i) dot += static_cast<double>(q[i]) * kt[i];
        p[t] = dot * scale;
        m = std::max(m, p[t]);
      }
      double sum = 0;
      for (double& x : p) sum += (x = std::exp(x - m));
      float* o = out + (static_cast<std::size_t>(s) * q_heads + h) * head_dim;
      for (int i = 0; i < head_dim; ++i) {
        double acc = 0;
        for (int t = 0; t < context_lens[s]; ++t) {
          acc += p[t] * v[((static_cast<std::size_t>(s) * max_context + t) * kv_heads + kvh) * head_dim + i];
        }
        o[i] = static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace memtwin::kernels
