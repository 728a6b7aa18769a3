#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "kernels/cpu/decode_attention_simd.h"
#include "kernels/cpu/dequantize_fast.h"
#include "kernels/cpu/head_ranges.h"
#include "kernels/cpu/thread_policy.h"
#include "kernels/kv_kernels.h"

namespace memtwin::kernels {

void validate(const DecodeAttentionArgs& a) {
  a.shape.format.validate();
  auto fail = [](const std::string& m) { throw std::invalid_argument("decode_attention: " + m); };
  if (!a.query || !a.k_cache || !a.v_cache || !a.block_tables || !a.context_lens || !(a.out || a.probs)) {
    fail("a pointer is null");
  }
  if (a.probs && a.probs_stride < a.max_blocks_per_seq * a.shape.block_size) {
    fail("probs_stride must hold max_blocks_per_seq * block_size tokens");
  }
  if (a.num_seqs <= 0) fail("num_seqs must be positive");
  if (a.shape.kv_heads <= 0 || a.q_heads % a.shape.kv_heads != 0) {
    fail("q_heads (" + std::to_string(a.q_heads) + ") must be a multiple of kv_heads (" + std::to_string(a.shape.kv_heads) + ")");
  }
  if (a.q_heads / a.shape.kv_heads > 8) fail("at most 8 query heads per KV head are supported");
  if (a.shape.block_size <= 0 || a.max_blocks_per_seq <= 0) fail("block_size and max_blocks_per_seq must be positive");
  if (!(a.scale > 0)) fail("scale must be positive");
}

void write_probabilities(const DecodeAttentionArgs& a, int seq, int first_head, int heads, const float* numerators,
                         const float* denominators) {
  if (!a.probs) return;
  const int ctx = a.context_lens[seq];
  for (int g = 0; g < heads; ++g) {
    float* p = a.probs + (static_cast<std::size_t>(seq) * a.q_heads + first_head + g) * a.probs_stride;
    const float* n = numerators + static_cast<std::size_t>(g) * ctx;
    const float inv = 1.0f / denominators[g];
#pragma omp simd
    for (int t = 0; t < ctx; ++t) p[t] = n[t] * inv;
  }
}

namespace {

// One (sequence, KV head): two passes over the cache, K then V, each vector dequantised once and
// used by every query head of the GQA group. Built twice on x86-64 (x86-64-v3: AVX2, FMA, F16C; and baseline), the
// loader picking the one the CPU runs.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
void attend_pair(const DecodeAttentionArgs& a, int seq, int kvh, const float* halves) {
  const KvFormat& f = a.shape.format;
  const int hd = f.head_dim;
  const int group = a.q_heads / a.shape.kv_heads;
  const int ctx = a.context_lens[seq];
  std::vector<float> scores(static_cast<std::size_t>(group) * ctx), acc(static_cast<std::size_t>(group) * hd, 0.f);
  alignas(64) float vec[256];
  const float* q = a.query + (static_cast<std::size_t>(seq) * a.q_heads + kvh * group) * hd;
  const std::int32_t* table = a.block_tables + static_cast<std::size_t>(seq) * a.max_blocks_per_seq;
  for (int t = 0; t < ctx; ++t) {
    dequantize_fast(a.k_cache + a.shape.offset(table[t / a.shape.block_size], t % a.shape.block_size, kvh), f, halves, vec);
    for (int g = 0; g < group; ++g) {
      const float* qg = q + g * hd;
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int i = 0; i < hd; ++i) dot += qg[i] * vec[i];
      scores[static_cast<std::size_t>(g) * ctx + t] = dot * a.scale;
    }
  }
  std::vector<float> denominators(group);
  for (int g = 0; g < group; ++g) {
    float* sg = &scores[static_cast<std::size_t>(g) * ctx];
    const float m = *std::max_element(sg, sg + ctx);
    float sum = 0;
    for (int t = 0; t < ctx; ++t) sum += (sg[t] = std::exp(sg[t] - m));
    denominators[g] = sum;
  }
  write_probabilities(a, seq, kvh * group, group, scores.data(), denominators.data());
  if (!a.out) return;
  for (int t = 0; t < ctx; ++t) {
    dequantize_fast(a.v_cache + a.shape.offset(table[t / a.shape.block_size], t % a.shape.block_size, kvh), f, halves, vec);
    for (int g = 0; g < group; ++g) {
      const float p = scores[static_cast<std::size_t>(g) * ctx + t];
      float* ag = &acc[static_cast<std::size_t>(g) * hd];
#pragma omp simd
      for (int i = 0; i < hd; ++i) ag[i] += p * vec[i];
    }
  }
  float* o = a.out + (static_cast<std::size_t>(seq) * a.q_heads + kvh * group) * hd;
  for (int g = 0; g < group; ++g)
    for (int i = 0; i < hd; ++i) o[g * hd + i] = acc[static_cast<std::size_t>(g) * hd + i] / denominators[g];
}

}  // namespace

namespace simd {
bool avx2_supported() {
#if defined(__x86_64__) && defined(__GNUC__) && defined(MEMTWIN_KERNELS_AVX2)
  // F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
  return false;
#endif
}
bool avx512_supported() {
#if defined(__x86_64__) && defined(__GNUC__) && defined(MEMTWIN_KERNELS_AVX512)
  // (__builtin_cpu_supports also asks the OS, through XGETBV, whether it saves the AVX-512 state.)
  return avx2_supported() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

bool avx512_vnni_supported() {
#if defined(__x86_64__) && defined(__GNUC__) && defined(MEMTWIN_KERNELS_AVX512)
  return avx512_supported() && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}
}  // namespace simd

SimdLevel cpu_simd_level() {
  static const SimdLevel level = simd::avx512_vnni_supported() ? SimdLevel::avx512_vnni
                                 : simd::avx512_supported()    ? SimdLevel::avx512
                                 : simd::avx2_supported()      ? SimdLevel::avx2
                                                               : SimdLevel::portable;
  return level;
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::avx512_vnni: return "avx512_vnni";
    case SimdLevel::avx512: return "avx512";
    case SimdLevel::avx2: return "avx2";
    default: return "portable";
  }
}

bool decode_attention_simd_available() { return cpu_simd_level() >= SimdLevel::avx2; }

void decode_attention(const DecodeAttentionArgs& a, bool allow_simd) {
  decode_attention(a, allow_simd ? cpu_simd_level() : SimdLevel::portable);
}

void decode_attention(const DecodeAttentionArgs& a, SimdLevel highest) {
  validate(a);
  for (int seq = 0; seq < a.num_seqs; ++seq) {  // checked before the parallel loop: no throwing inside it
    if (a.context_lens[seq] < 1 || a.context_lens[seq] > a.max_blocks_per_seq * a.shape.block_size) {
      throw std::invalid_argument("decode_attention: context length out of range for sequence " + std::to_string(seq));
    }
  }
  const float* halves = half_to_float_table();
  const SimdLevel level = std::min(highest, cpu_simd_level());
  const int pairs = a.num_seqs * a.shape.kv_heads;
  long tokens = 0;
  for (int seq = 0; seq < a.num_seqs; ++seq) tokens += a.context_lens[seq];
  // A policy per kernel level (their costs differ tenfold); work in multiply-adds, tokens x query
  // heads x head_dim, so that calls of different shapes compare.
  static ThreadPolicy policies[std::size(kSimdLevels)];
  const ThreadChoice threads(policies[static_cast<int>(level)], worth_threads(tokens, a.shape.kv_heads),
                             static_cast<double>(tokens) * a.q_heads * a.shape.format.head_dim);
  const bool parallel = threads.team();
  if (level == SimdLevel::portable) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int pair = 0; pair < pairs; ++pair) attend_pair(a, pair / a.shape.kv_heads, pair % a.shape.kv_heads, halves);
    return;
  }
  // The vectorised kernels attend a sequence's KV heads together, split between the threads.
  const HeadRanges split(a.num_seqs, a.shape.kv_heads, parallel);
  const bool avx512 = level >= SimdLevel::avx512, vnni = level >= SimdLevel::avx512_vnni;
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int unit = 0; unit < split.units(); ++unit) {
    const auto [seq, first, count] = split[unit];
    if (avx512 && simd::attend_heads_avx512(a, seq, first, count, vnni)) continue;
    if (simd::attend_heads_avx2(a, seq, first, count)) continue;
    for (int kvh = first; kvh < first + count; ++kvh) attend_pair(a, seq, kvh, halves);
  }
}

bool scores_against_rounded_query(const DecodeAttentionArgs& a, SimdLevel highest) {
  return std::min(highest, cpu_simd_level()) >= SimdLevel::avx512_vnni && simd::avx512_takes(a) &&
         simd::vnni_takes(a.shape.format) && simd::vnni_value_tile_takes(a.shape.format, a.q_heads / a.shape.kv_heads);
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
