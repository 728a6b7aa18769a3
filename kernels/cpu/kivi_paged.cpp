#include "kernels/kivi_paged.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

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

// The sequence's byte range of one layer, addressed through its block table.
struct SequenceRange {
  const KiviPagedShape& shape;
  const std::int32_t* table;
  std::uint8_t* cache;
  [[nodiscard]] std::uint8_t* at(std::size_t offset) const {
    const std::size_t slice = shape.slice_bytes();
    return cache + static_cast<std::size_t>(table[offset / slice]) * slice + offset % slice;
  }
  [[nodiscard]] std::uint8_t* group(std::int64_t g) const { return at(static_cast<std::size_t>(g) * shape.group_bytes()); }
  /// Residual token j of a sequence whose first `quantized` tokens are groups.
  [[nodiscard]] std::uint8_t* residual(std::int64_t quantized, std::int64_t j) const {
    return at(static_cast<std::size_t>(quantized / shape.group) * shape.group_bytes() +
              static_cast<std::size_t>(j) * shape.residual_token_bytes());
  }
};

void check_tokens(std::int64_t tokens, int max_blocks, const KiviPagedShape& s, const char* who) {
  if (tokens < 0 || s.sequence_bytes(tokens) > static_cast<std::size_t>(max_blocks) * s.slice_bytes()) {
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(tokens) + " tokens do not fit in " +
                                std::to_string(max_blocks) + " blocks");
  }
}

// One sequence's append: see kivi_append.
void append_sequence(const KiviAppendArgs& a, int seq) {
  const KiviPagedShape& s = a.shape;
  const int hd = s.head_dim, heads = s.kv_heads;
  const std::int64_t before = a.cached[seq], added = a.new_tokens[seq];
  const std::int64_t q0 = s.quantized_tokens(before), q1 = s.quantized_tokens(before + added);
  const SequenceRange range{s, a.block_tables + static_cast<std::size_t>(seq) * a.max_blocks_per_seq, a.cache};
  const std::size_t row = static_cast<std::size_t>(heads) * hd;
  const float* new_k = a.keys + static_cast<std::size_t>(a.first_row[seq]) * row;
  const float* new_v = a.values + static_cast<std::size_t>(a.first_row[seq]) * row;
  auto write_residual = [&](std::uint8_t* dst, const float* k, const float* v) {  // one token, all heads
    auto* h = reinterpret_cast<std::uint16_t*>(dst);
    for (int head = 0; head < heads; ++head, h += 2 * hd) {
      for (int i = 0; i < hd; ++i) h[i] = float_to_half(k[static_cast<std::size_t>(head) * hd + i]);
      for (int i = 0; i < hd; ++i) h[hd + i] = float_to_half(v[static_cast<std::size_t>(head) * hd + i]);
    }
  };
  const std::int64_t r0 = before - q0;
  if (q1 == q0) {  // nothing leaves the residual: the new tokens follow it
    for (std::int64_t t = 0; t < added; ++t) {
      std::uint8_t* dst = range.residual(q0, r0 + t);
      write_residual(dst, new_k + t * row, new_v + t * row);
    }
    return;
  }
  // Old residual and new tokens as the residual holds them (fp16-rounded), [token][head][K|V][hd].
  const std::int64_t total = r0 + added;
  std::vector<float> tokens(static_cast<std::size_t>(total) * 2 * row);
  const float* halves = half_to_float_table();
  for (std::int64_t t = 0; t < r0; ++t) {
    const std::uint16_t* h = a.staged && a.staged[seq]
                                 ? a.staged[seq] + static_cast<std::size_t>(t) * 2 * row
                                 : reinterpret_cast<const std::uint16_t*>(range.residual(q0, t));
    for (std::size_t i = 0; i < 2 * row; ++i) tokens[static_cast<std::size_t>(t) * 2 * row + i] = halves[h[i]];
  }
  for (std::int64_t t = 0; t < added; ++t) {
    float* dst = &tokens[static_cast<std::size_t>(r0 + t) * 2 * row];
    for (int head = 0; head < heads; ++head) {
      for (int i = 0; i < hd; ++i) {
        dst[static_cast<std::size_t>(head) * 2 * hd + i] = halves[float_to_half(new_k[t * row + head * hd + i])];
        dst[static_cast<std::size_t>(head) * 2 * hd + hd + i] = halves[float_to_half(new_v[t * row + head * hd + i])];
      }
    }
  }
  // The oldest (q1 - q0) of them become groups, the rest the new residual.
  const KvFormat vf = s.value_format();
  std::vector<float> keys(static_cast<std::size_t>(s.group) * hd);
  for (std::int64_t g = q0 / s.group; g < q1 / s.group; ++g) {
    std::uint8_t* base = range.group(g);
    const std::int64_t first = g * s.group - q0;
    for (int head = 0; head < heads; ++head, base += s.head_group_bytes()) {
      for (int t = 0; t < s.group; ++t) {
        const float* k = &tokens[(static_cast<std::size_t>(first + t) * heads + head) * 2 * hd];
        std::copy(k, k + hd, &keys[static_cast<std::size_t>(t) * hd]);
      }
      quantize_keys_per_channel(keys.data(), s.group, hd, s.bits, base);
      for (int t = 0; t < s.group; ++t) {
        const float* v = &tokens[(static_cast<std::size_t>(first + t) * heads + head) * 2 * hd + hd];
        quantize_vector(v, vf, base + s.key_group_bytes() + static_cast<std::size_t>(t) * vf.vector_bytes());
      }
    }
  }
  for (std::int64_t t = q1 - q0; t < total; ++t) {
    auto* h = reinterpret_cast<std::uint16_t*>(range.residual(q1, t - (q1 - q0)));
    const float* src = &tokens[static_cast<std::size_t>(t) * 2 * row];
    for (std::size_t i = 0; i < 2 * row; ++i) h[i] = float_to_half(src[i]);
  }
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
#pragma omp parallel for schedule(dynamic) if (a.num_seqs > 1)
  for (int seq = 0; seq < a.num_seqs; ++seq) append_sequence(a, seq);
}

void kivi_stage_residual(const std::uint8_t* cache, const std::int32_t* block_table, std::int64_t tokens,
                         const KiviPagedShape& shape, std::uint16_t* out) {
  const std::int64_t q = shape.quantized_tokens(tokens);
  const SequenceRange range{shape, block_table, const_cast<std::uint8_t*>(cache)};
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

// One (sequence, KV head): scores from the groups' codes and the residual's halves, the softmax,
// then the values. Built for AVX2+FMA and the baseline on x86-64, the loader picking one.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=haswell", "default")))
#endif
void attend_kivi(const KiviDecodeArgs& a, int seq, int kvh, const float* halves) {
  const KiviPagedShape& s = a.shape;
  const int hd = s.head_dim, G = s.group, gqa = a.q_heads / s.kv_heads;
  const std::int64_t n = a.context_lens[seq], q = s.quantized_tokens(n);
  const int code_bytes = (G * s.bits + 7) / 8;
  const SequenceRange range{s, a.block_tables + static_cast<std::size_t>(seq) * a.max_blocks_per_seq,
                            const_cast<std::uint8_t*>(a.cache)};
  const float* query = a.query + (static_cast<std::size_t>(seq) * a.q_heads + static_cast<std::size_t>(kvh) * gqa) * hd;
  std::vector<float> scores(static_cast<std::size_t>(gqa) * n), acc(static_cast<std::size_t>(gqa) * hd, 0.f);
  alignas(64) float codes[256], dot[8][256];
  for (std::int64_t g = 0; g < q / G; ++g) {
    const std::uint8_t* keys = range.group(g) + static_cast<std::size_t>(kvh) * s.head_group_bytes();
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
      for (int t = 0; t < G; ++t) scores[static_cast<std::size_t>(h) * n + g * G + t] = (dot[h][t] + constant[h]) * a.scale;
  }
  const std::size_t head_offset = static_cast<std::size_t>(kvh) * 4 * hd;  // bytes into a residual token
  for (std::int64_t j = 0; j < n - q; ++j) {
    const auto* k = reinterpret_cast<const std::uint16_t*>(range.residual(q, j) + head_offset);
    for (int i = 0; i < hd; ++i) codes[i] = halves[k[i]];
    for (int h = 0; h < gqa; ++h) {
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int i = 0; i < hd; ++i) sum += query[h * hd + i] * codes[i];
      scores[static_cast<std::size_t>(h) * n + q + j] = sum * a.scale;
    }
  }
  float denominators[8];
  for (int h = 0; h < gqa; ++h) {
    float* sh = &scores[static_cast<std::size_t>(h) * n];
    const float m = *std::max_element(sh, sh + n);
    float sum = 0;
    for (std::int64_t t = 0; t < n; ++t) sum += (sh[t] = std::exp(sh[t] - m));
    denominators[h] = sum;
  }
  const KvFormat vf = s.value_format();
  for (std::int64_t g = 0; g < q / G; ++g) {
    const std::uint8_t* values = range.group(g) + static_cast<std::size_t>(kvh) * s.head_group_bytes() + s.key_group_bytes();
    for (int t = 0; t < G; ++t) {
      const std::uint8_t* v = values + static_cast<std::size_t>(t) * vf.vector_bytes();
      for (int cg = 0; cg < vf.groups(); ++cg) {  // value groups along channels
        const std::uint8_t* base = v + static_cast<std::size_t>(cg) * vf.group_bytes();
        std::uint16_t params[2];
        std::memcpy(params, base + code_bytes, 4);
        const float scale = halves[params[0]], zero = halves[params[1]];
        unpack_codes(base, G, s.bits, codes + cg * G);
        for (int i = 0; i < G; ++i) codes[cg * G + i] = codes[cg * G + i] * scale + zero;
      }
      for (int h = 0; h < gqa; ++h) {
        const float p = scores[static_cast<std::size_t>(h) * n + g * G + t];
        float* ah = &acc[static_cast<std::size_t>(h) * hd];
#pragma omp simd
        for (int i = 0; i < hd; ++i) ah[i] += p * codes[i];
      }
    }
  }
  for (std::int64_t j = 0; j < n - q; ++j) {
    const auto* v = reinterpret_cast<const std::uint16_t*>(range.residual(q, j) + head_offset) + hd;
    for (int i = 0; i < hd; ++i) codes[i] = halves[v[i]];
    for (int h = 0; h < gqa; ++h) {
      const float p = scores[static_cast<std::size_t>(h) * n + q + j];
      float* ah = &acc[static_cast<std::size_t>(h) * hd];
#pragma omp simd
      for (int i = 0; i < hd; ++i) ah[i] += p * codes[i];
    }
  }
  float* out = a.out + (static_cast<std::size_t>(seq) * a.q_heads + static_cast<std::size_t>(kvh) * gqa) * hd;
  for (int h = 0; h < gqa; ++h)
    for (int i = 0; i < hd; ++i) out[h * hd + i] = acc[static_cast<std::size_t>(h) * hd + i] / denominators[h];
}

}  // namespace

void kivi_decode_attention(const KiviDecodeArgs& a) {
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
  const int pairs = a.num_seqs * a.shape.kv_heads;
  const bool parallel = tokens * a.shape.kv_heads >= (1L << 12);  // as decode_attention: threads pay off past ~100 us
#pragma omp parallel for schedule(static) if (parallel)
  for (int pair = 0; pair < pairs; ++pair) attend_kivi(a, pair / a.shape.kv_heads, pair % a.shape.kv_heads, halves);
}

void kivi_read_sequence(const std::uint8_t* cache, const std::int32_t* block_table, std::int64_t tokens,
                        const KiviPagedShape& shape, std::vector<float>& keys, std::vector<float>& values) {
  const int hd = shape.head_dim, heads = shape.kv_heads, G = shape.group;
  const std::int64_t q = shape.quantized_tokens(tokens);
  const SequenceRange range{shape, block_table, const_cast<std::uint8_t*>(cache)};
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
