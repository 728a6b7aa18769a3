#include "kernels/kivi_paged.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/decode_attention_simd.h"
#include "kernels/cpu/dequantize_fast.h"
#include "kernels/cpu/head_ranges.h"
#include "kernels/cpu/thread_policy.h"
#include "kernels/cpu/kivi_sequence_range.h"
#include "kernels/kivi.h"
#include "kernels/kv_kernels.h"

namespace memtwin::kernels {

KvFormat KiviPagedShape::value_format() const {
  KvFormat f;
  f.element = bits == 8 ? KvElement::int8 : bits == 4 ? KvElement::int4 : KvElement::int2;
  f.head_dim = head_dim;
  f.group = group;
  return f;
}

std::size_t KiviPagedShape::key_group_bytes() const {
  return static_cast<std::size_t>(head_dim) * static_cast<std::size_t>((group * bits + 7) / 8 + 4);
}

std::size_t KiviPagedShape::head_group_bytes() const {
  return key_group_bytes() + static_cast<std::size_t>(group) * value_format().vector_bytes();
}

std::size_t KiviPagedShape::sequence_bytes(std::int64_t n) const {
  const std::int64_t q = quantized_tokens(n);
  return static_cast<std::size_t>(q / group) * group_bytes() + static_cast<std::size_t>(n - q) * residual_token_bytes();
}

void KiviPagedShape::validate() const {
  auto fail = [](const std::string& m) { throw std::invalid_argument("KIVI paged cache: " + m); };
  if (bits != 2 && bits != 4 && bits != 8) fail("bits must be 2, 4 or 8, got " + std::to_string(bits));
  value_format().validate();
  if (kv_heads <= 0 || num_blocks < 0) fail("kv_heads must be positive and num_blocks not negative");
  if (residual < 0 || residual % group != 0) fail("the residual (" + std::to_string(residual) + ") must be a multiple of the group");
  if (block_size <= 0 || block_size % group != 0) {
    fail("block_size (" + std::to_string(block_size) + ") must be a multiple of the group (" + std::to_string(group) +
         ") so that no key group straddles two blocks");
  }
  if (group_bytes() % residual_token_bytes() != 0) {
    fail("a group (" + std::to_string(group_bytes()) + " bytes) must hold whole residual tokens (" +
         std::to_string(residual_token_bytes()) + " bytes) so that no token straddles two blocks");
  }
}

namespace {

void check_tokens(std::int64_t tokens, int max_blocks, const KiviPagedShape& s, const char* who) {
  if (tokens < 0 || s.sequence_bytes(tokens) > static_cast<std::size_t>(max_blocks) * s.slice_bytes()) {
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(tokens) + " tokens do not fit in " +
                                std::to_string(max_blocks) + " blocks");
  }
}

// One sequence's append: see kivi_append. Tokens that stay in the residual keep their halves
// (moved, not converted); only the tokens quantised into groups are read back as floats.
void append_sequence(const KiviAppendArgs& a, int seq, const float* halves) {
  const KiviPagedShape& s = a.shape;
  const int hd = s.head_dim, heads = s.kv_heads;
  const std::int64_t before = a.cached[seq], added = a.new_tokens[seq];
  const std::int64_t q0 = s.quantized_tokens(before), q1 = s.quantized_tokens(before + added);
  const std::int64_t r0 = before - q0, leaving = q1 - q0;  // old residual; tokens becoming groups
  const KiviSequenceRange range{s, a.block_tables + static_cast<std::size_t>(seq) * a.max_blocks_per_seq, a.cache};
  const std::size_t row = static_cast<std::size_t>(heads) * hd, token_bytes = s.residual_token_bytes();
  const float* new_k = a.keys + static_cast<std::size_t>(a.first_row[seq]) * row;
  const float* new_v = a.values + static_cast<std::size_t>(a.first_row[seq]) * row;
  KvFormat fp16;
  fp16.head_dim = hd;
  // Token t of the combined [old residual, new tokens]: an old one's halves, or a new one rounded.
  auto old_token = [&](std::int64_t t) -> const std::uint8_t* {
    return a.staged && a.staged[seq] ? reinterpret_cast<const std::uint8_t*>(a.staged[seq]) + static_cast<std::size_t>(t) * token_bytes
                                     : range.residual(q0, t);
  };
  auto write_new = [&](std::int64_t t, std::uint8_t* dst) {  // new token t (0-based), all heads, as halves
    for (int head = 0; head < heads; ++head, dst += 4 * static_cast<std::size_t>(hd)) {
      quantize_vector(new_k + static_cast<std::size_t>(t) * row + static_cast<std::size_t>(head) * hd, fp16, dst);
      quantize_vector(new_v + static_cast<std::size_t>(t) * row + static_cast<std::size_t>(head) * hd, fp16, dst + 2 * hd);
    }
  };
  if (leaving > 0) {
    // The leaving tokens as floats, [token][head][K | V][head_dim], before the groups overwrite
    // the start of the old residual.
    std::vector<float> tokens(static_cast<std::size_t>(leaving) * 2 * row);
    std::vector<std::uint8_t> rounded(token_bytes);
    for (std::int64_t t = 0; t < leaving; ++t) {
      const std::uint8_t* bytes = t < r0 ? old_token(t) : (write_new(t - r0, rounded.data()), rounded.data());
      const auto* h = reinterpret_cast<const std::uint16_t*>(bytes);
      for (std::size_t i = 0; i < 2 * row; ++i) tokens[static_cast<std::size_t>(t) * 2 * row + i] = halves[h[i]];
    }
    const KvFormat vf = s.value_format();
    std::vector<float> keys(static_cast<std::size_t>(s.group) * hd);
    for (std::int64_t g = 0; g < leaving / s.group; ++g) {
      std::uint8_t* base = range.group(q0 / s.group + g);
      for (int head = 0; head < heads; ++head, base += s.head_group_bytes()) {
        for (int t = 0; t < s.group; ++t) {
          const float* k = &tokens[(static_cast<std::size_t>(g * s.group + t) * heads + head) * 2 * hd];
          std::copy(k, k + hd, &keys[static_cast<std::size_t>(t) * hd]);
        }
        quantize_keys_per_channel(keys.data(), s.group, hd, s.bits, base);
        for (int t = 0; t < s.group; ++t) {
          const float* v = &tokens[(static_cast<std::size_t>(g * s.group + t) * heads + head) * 2 * hd + hd];
          quantize_vector(v, vf, base + s.key_group_bytes() + static_cast<std::size_t>(t) * vf.vector_bytes());
        }
      }
    }
  }
  // The old tokens that stay move down behind the groups (their destinations lie below their
  // sources, so ascending order never overwrites one not yet moved), then the new ones follow.
  for (std::int64_t t = leaving; t < r0; ++t) std::memmove(range.residual(q1, t - leaving), old_token(t), token_bytes);
  for (std::int64_t t = std::max(leaving, r0); t < r0 + added; ++t) write_new(t - r0, range.residual(q1, t - leaving));
}

}  // namespace

void kivi_append(const KiviAppendArgs& a) {
  a.shape.validate();
  if (!a.keys || !a.values || !a.first_row || !a.new_tokens || !a.cached || !a.block_tables || !a.cache) {
    throw std::invalid_argument("kivi_append: a pointer is null");
  }
  for (int seq = 0; seq < a.num_seqs; ++seq) {  // checked before the parallel loop: no throwing inside it
    if (a.new_tokens[seq] < 0 || a.first_row[seq] < 0) throw std::invalid_argument("kivi_append: negative rows");
    check_tokens(static_cast<std::int64_t>(a.cached[seq]) + a.new_tokens[seq], a.max_blocks_per_seq, a.shape, "kivi_append");
  }
  // Threads pay off for prefill chunks and group quantisation, not for a decode step's token.
  long work = 0;
  for (int seq = 0; seq < a.num_seqs; ++seq) {
    const std::int64_t before = a.cached[seq], after = before + a.new_tokens[seq];
    work += a.new_tokens[seq] + (a.shape.quantized_tokens(after) - a.shape.quantized_tokens(before)) * 8;
  }
  const float* halves = half_to_float_table();
#pragma omp parallel for schedule(dynamic) if (a.num_seqs > 1 && work * a.shape.kv_heads >= (1L << 12))
  for (int seq = 0; seq < a.num_seqs; ++seq) append_sequence(a, seq, halves);
}

void kivi_stage_residual(const std::uint8_t* cache, const std::int32_t* block_table, std::int64_t tokens,
                         const KiviPagedShape& shape, std::uint16_t* out) {
  const std::int64_t q = shape.quantized_tokens(tokens);
  const KiviSequenceRange range{shape, block_table, const_cast<std::uint8_t*>(cache)};
  const std::size_t bytes = shape.residual_token_bytes();
  for (std::int64_t j = 0; j < tokens - q; ++j) std::memcpy(out + static_cast<std::size_t>(j) * bytes / 2, range.residual(q, j), bytes);
}

namespace {

// Unpacks G codes of `bits` each (lowest bits first) into floats.
inline void unpack_codes(const std::uint8_t* in, int count, int bits, float* out) {
  switch (bits) {
    case 8:
#pragma omp simd
      for (int i = 0; i < count; ++i) out[i] = in[i];
      break;
    case 4:
#pragma omp simd
      for (int i = 0; i < count / 2; ++i) {
        out[2 * i] = in[i] & 0xf;
        out[2 * i + 1] = in[i] >> 4;
      }
      break;
    default:
#pragma omp simd
      for (int i = 0; i < count / 4; ++i) {
        out[4 * i] = in[i] & 0x3;
        out[4 * i + 1] = (in[i] >> 2) & 0x3;
        out[4 * i + 2] = (in[i] >> 4) & 0x3;
        out[4 * i + 3] = in[i] >> 6;
      }
      break;
  }
}

// One sequence, every KV head at once: scores from the groups' codes and the residual's halves,
// the softmax, then the values. The memory is read in its order (a group's heads, a residual
// token's heads one after another): a (sequence, head) at a time would stride 4 x head_dim x
// kv_heads bytes between tokens, a power of two that piles every token onto a few cache sets
// (half the rate here). Built for x86-64-v3 (AVX2, FMA, F16C: "arch=haswell" would pick the
// baseline on any other CPU) and the baseline, the loader picking one.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
void attend_kivi(const KiviDecodeArgs& a, int seq, const float* halves) {
  const KiviPagedShape& s = a.shape;
  const int hd = s.head_dim, G = s.group, gqa = a.q_heads / s.kv_heads;
  const std::int64_t n = a.context_lens[seq], q = s.quantized_tokens(n);
  const int code_bytes = (G * s.bits + 7) / 8;
  const KiviSequenceRange range{s, a.block_tables + static_cast<std::size_t>(seq) * a.max_blocks_per_seq,
                            const_cast<std::uint8_t*>(a.cache)};
  const float* queries = a.query + static_cast<std::size_t>(seq) * a.q_heads * hd;  // [q_heads][hd]
  std::vector<float> scores(static_cast<std::size_t>(a.q_heads) * n), acc(static_cast<std::size_t>(a.q_heads) * hd, 0.f);
  alignas(64) float codes[256], dot[8][256];
  auto score = [&](int row, std::int64_t t) -> float& { return scores[static_cast<std::size_t>(row) * n + t]; };
  for (std::int64_t g = 0; g < q / G; ++g) {
    const std::uint8_t* group = range.group(g);
    for (int kvh = 0; kvh < s.kv_heads; ++kvh) {
      const std::uint8_t* keys = group + static_cast<std::size_t>(kvh) * s.head_group_bytes();
      const float* query = queries + static_cast<std::size_t>(kvh) * gqa * hd;
      float constant[8] = {};
      for (int h = 0; h < gqa; ++h) std::fill(dot[h], dot[h] + G, 0.f);
      for (int c = 0; c < hd; ++c) {
        const std::uint8_t* channel = keys + static_cast<std::size_t>(c) * (code_bytes + 4);
        std::uint16_t params[2];
        std::memcpy(params, channel + code_bytes, 4);
        const float scale = halves[params[0]], zero = halves[params[1]];
        unpack_codes(channel, G, s.bits, codes);
        for (int h = 0; h < gqa; ++h) {
          const float w = query[h * hd + c] * scale;
          constant[h] += query[h * hd + c] * zero;
          float* d = dot[h];
#pragma omp simd
          for (int t = 0; t < G; ++t) d[t] += w * codes[t];
        }
      }
      for (int h = 0; h < gqa; ++h)
        for (int t = 0; t < G; ++t) score(kvh * gqa + h, g * G + t) = (dot[h][t] + constant[h]) * a.scale;
    }
  }
  for (std::int64_t j = 0; j < n - q; ++j) {
    const auto* token = reinterpret_cast<const std::uint16_t*>(range.residual(q, j));
    for (int kvh = 0; kvh < s.kv_heads; ++kvh) {
      halves_to_floats(token + static_cast<std::size_t>(kvh) * 2 * hd, hd, codes);
      for (int h = 0; h < gqa; ++h) {
        const float* query = queries + static_cast<std::size_t>(kvh * gqa + h) * hd;
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < hd; ++i) sum += query[i] * codes[i];
        score(kvh * gqa + h, q + j) = sum * a.scale;
      }
    }
  }
  std::vector<float> denominators(static_cast<std::size_t>(a.q_heads));
  for (int row = 0; row < a.q_heads; ++row) {
    float* sr = &score(row, 0);
    const float m = *std::max_element(sr, sr + n);
    float sum = 0;
    for (std::int64_t t = 0; t < n; ++t) sum += (sr[t] = std::exp(sr[t] - m));
    denominators[static_cast<std::size_t>(row)] = sum;
  }
  auto accumulate = [&](int kvh, std::int64_t t) {  // the value in `codes` into the GQA group's rows
    for (int h = 0; h < gqa; ++h) {
      const float p = score(kvh * gqa + h, t);
      float* ah = &acc[static_cast<std::size_t>(kvh * gqa + h) * hd];
#pragma omp simd
      for (int i = 0; i < hd; ++i) ah[i] += p * codes[i];
    }
  };
  const KvFormat vf = s.value_format();
  for (std::int64_t g = 0; g < q / G; ++g) {
    const std::uint8_t* group = range.group(g);
    for (int kvh = 0; kvh < s.kv_heads; ++kvh) {
      const std::uint8_t* values = group + static_cast<std::size_t>(kvh) * s.head_group_bytes() + s.key_group_bytes();
      for (int t = 0; t < G; ++t) {
        dequantize_fast(values + static_cast<std::size_t>(t) * vf.vector_bytes(), vf, halves, codes);
        accumulate(kvh, g * G + t);
      }
    }
  }
  for (std::int64_t j = 0; j < n - q; ++j) {
    const auto* token = reinterpret_cast<const std::uint16_t*>(range.residual(q, j));
    for (int kvh = 0; kvh < s.kv_heads; ++kvh) {
      halves_to_floats(token + static_cast<std::size_t>(kvh) * 2 * hd + hd, hd, codes);
      accumulate(kvh, q + j);
    }
  }
  float* out = a.out + static_cast<std::size_t>(seq) * a.q_heads * hd;
  for (int row = 0; row < a.q_heads; ++row)
    for (int i = 0; i < hd; ++i) out[row * hd + i] = acc[static_cast<std::size_t>(row) * hd + i] / denominators[static_cast<std::size_t>(row)];
}

}  // namespace

void kivi_decode_attention(const KiviDecodeArgs& a, bool allow_simd) {
  kivi_decode_attention(a, allow_simd ? cpu_simd_level() : SimdLevel::portable);
}

void kivi_decode_attention(const KiviDecodeArgs& a, SimdLevel highest) {
  a.shape.validate();
  auto fail = [](const std::string& m) { throw std::invalid_argument("kivi_decode_attention: " + m); };
  if (!a.query || !a.cache || !a.block_tables || !a.context_lens || !a.out) fail("a pointer is null");
  if (a.num_seqs <= 0 || a.max_blocks_per_seq <= 0) fail("num_seqs and max_blocks_per_seq must be positive");
  if (a.q_heads % a.shape.kv_heads != 0 || a.q_heads / a.shape.kv_heads > 8 || a.q_heads <= 0) {
    fail("q_heads must be a multiple of kv_heads, at most 8 per KV head");
  }
  if (!(a.scale > 0)) fail("scale must be positive");
  long tokens = 0;
  for (int seq = 0; seq < a.num_seqs; ++seq) {
    if (a.context_lens[seq] < 1) fail("context length below 1 for sequence " + std::to_string(seq));
    check_tokens(a.context_lens[seq], a.max_blocks_per_seq, a.shape, "kivi_decode_attention");
    tokens += a.context_lens[seq];
  }
  const float* halves = half_to_float_table();
  const SimdLevel level = std::min(highest, cpu_simd_level());
  const bool avx512 = level >= SimdLevel::avx512 && simd::kivi_avx512_takes(a);
  const bool vectorised = avx512 || (level >= SimdLevel::avx2 && simd::kivi_avx2_takes(a));
  // A policy per kernel (portable, AVX2, AVX-512: their costs differ severalfold), work in
  // multiply-adds as for the paged kernel. The portable kernel splits sequences only; the
  // vectorised ones split a sequence's KV heads too.
  static ThreadPolicy policies[3];
  const int kernel = avx512 ? 2 : vectorised ? 1 : 0;
  const ThreadChoice threads(policies[kernel], (vectorised || a.num_seqs > 1) && worth_threads(tokens, a.shape.kv_heads),
                             static_cast<double>(tokens) * a.q_heads * a.shape.head_dim);
  const bool parallel = threads.team();
  if (!vectorised) {
#pragma omp parallel for schedule(dynamic) if (parallel)
    for (int seq = 0; seq < a.num_seqs; ++seq) attend_kivi(a, seq, halves);
    return;
  }
  const HeadRanges split(a.num_seqs, a.shape.kv_heads, parallel);
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int unit = 0; unit < split.units(); ++unit) {
    const auto [seq, first, count] = split[unit];
    if (avx512) {
      simd::attend_kivi_avx512(a, seq, first, count, level >= SimdLevel::avx512_vnni);
    } else {
      simd::attend_kivi_avx2(a, seq, first, count);
    }
  }
}

void kivi_read_sequence(const std::uint8_t* cache, const std::int32_t* block_table, std::int64_t tokens,
                        const KiviPagedShape& shape, std::vector<float>& keys, std::vector<float>& values) {
  const int hd = shape.head_dim, heads = shape.kv_heads, G = shape.group;
  const std::int64_t q = shape.quantized_tokens(tokens);
  const KiviSequenceRange range{shape, block_table, const_cast<std::uint8_t*>(cache)};
  const std::size_t row = static_cast<std::size_t>(heads) * hd;
  keys.assign(static_cast<std::size_t>(tokens) * row, 0.f);
  values.assign(keys.size(), 0.f);
  const KvFormat vf = shape.value_format();
  std::vector<float> group(static_cast<std::size_t>(G) * hd);
  for (std::int64_t g = 0; g < q / G; ++g) {
    for (int h = 0; h < heads; ++h) {
      const std::uint8_t* base = range.group(g) + static_cast<std::size_t>(h) * shape.head_group_bytes();
      dequantize_keys_per_channel(base, G, hd, shape.bits, group.data());
      for (int t = 0; t < G; ++t) {
        const std::size_t at = static_cast<std::size_t>(g * G + t) * row + static_cast<std::size_t>(h) * hd;
        std::copy_n(&group[static_cast<std::size_t>(t) * hd], hd, &keys[at]);
        dequantize_vector(base + shape.key_group_bytes() + static_cast<std::size_t>(t) * vf.vector_bytes(), vf, &values[at]);
      }
    }
  }
  for (std::int64_t j = 0; j < tokens - q; ++j) {
    const auto* h16 = reinterpret_cast<const std::uint16_t*>(range.residual(q, j));
    for (int h = 0; h < heads; ++h) {
      const std::size_t at = static_cast<std::size_t>(q + j) * row + static_cast<std::size_t>(h) * hd;
      for (int i = 0; i < hd; ++i) keys[at + i] = half_to_float(h16[static_cast<std::size_t>(h) * 2 * hd + i]);
      for (int i = 0; i < hd; ++i) values[at + i] = half_to_float(h16[static_cast<std::size_t>(h) * 2 * hd + hd + i]);
    }
  }
}

}  // namespace memtwin::kernels
