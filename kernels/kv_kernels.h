#pragma once
// KV-cache kernels: quantise/dequantise, paged cache write (reshape_and_cache) and decode attention
// over a paged cache, for fp16 and int8/int4/int2 group-quantised KV (kv_format.h). Each has a CPU
// implementation here (the reference for the CUDA one, and the host device's kernel) and a naive
// float reference (`reference_*`) it is tested against. Launchers validate shapes and throw
// std::invalid_argument on misuse.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/kv_format.h"
#include "kernels/simd_level.h"

namespace memtwin::kernels {

/// Quantises one vector x[head_dim] of finite values into f.vector_bytes() bytes at `out` (fp16,
/// fp8: converts). On x86-64 CPUs with AVX2 a vectorised kernel writes the same bytes for the
/// integer formats; `allow_simd = false` forces the portable one (a test holds them equal).
void quantize_vector(const float* x, const KvFormat& f, std::uint8_t* out, bool allow_simd = true);
/// The inverse: f.vector_bytes() bytes at `in` into out[head_dim].
void dequantize_vector(const std::uint8_t* in, const KvFormat& f, float* out);

/// Writes new K or V vectors into a paged cache.
///   values        // [tokens, kv_heads, head_dim] floats
///   slot_mapping  // [tokens]: physical block * block_size + slot; negative = skip (padding)
///   cache         // [num_blocks, block_size, kv_heads, vector_bytes]
void write_paged(const float* values, const std::int64_t* slot_mapping, int tokens, const PagedShape& shape,
                 std::uint8_t* cache);

struct DecodeAttentionArgs {
  const float* query = nullptr;             // [num_seqs, q_heads, head_dim]
  const std::uint8_t* k_cache = nullptr;    // [num_blocks, block_size, kv_heads, vector_bytes]
  const std::uint8_t* v_cache = nullptr;    // same shape as k_cache
  const std::int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  const std::int32_t* context_lens = nullptr;  // [num_seqs], tokens cached per sequence (>= 1)
  float* out = nullptr;                     // [num_seqs, q_heads, head_dim]; may be null when probs is set
  /// Optional: each query head's attention probabilities, [num_seqs, q_heads, probs_stride] (the
  /// first context_lens[seq] of each row written), for eviction methods that score tokens by the
  /// attention they receive (H2O, SnapKV). CPU kernels only.
  float* probs = nullptr;
  int probs_stride = 0;
  int num_seqs = 0;
  int q_heads = 0;                          // a multiple of kv_heads (GQA), at most 8 per KV head
  int max_blocks_per_seq = 0;
  float scale = 0;                          // usually 1 / sqrt(head_dim)
  PagedShape shape;
};

/// The argument set for `num_seqs` sequences (their block tables and cached lengths) with the usual
/// scale, 1/sqrt(head_dim): how the engine, the calibration, the benchmark and the tests call it.
inline DecodeAttentionArgs make_decode_args(const float* query, const std::uint8_t* k_cache, const std::uint8_t* v_cache,
                                            const std::int32_t* block_tables, const std::int32_t* context_lens, float* out,
                                            int num_seqs, int q_heads, int max_blocks_per_seq, const PagedShape& shape) {
  DecodeAttentionArgs a;
  a.query = query;
  a.k_cache = k_cache;
  a.v_cache = v_cache;
  a.block_tables = block_tables;
  a.context_lens = context_lens;
  a.out = out;
  a.num_seqs = num_seqs;
  a.q_heads = q_heads;
  a.max_blocks_per_seq = max_blocks_per_seq;
  a.scale = 1.0f / std::sqrt(static_cast<float>(shape.format.head_dim));
  a.shape = shape;
  return a;
}

/// Checks an argument set; throws std::invalid_argument naming what is wrong.
void validate(const DecodeAttentionArgs& a);

/// One query token per sequence against its cached context (CPU, parallel over sequences and KV
/// heads with OpenMP where available), with the best kernel of at most `highest` that this CPU runs
/// and that takes the call's shape (the AVX-512 kernel: head_dim a multiple of 128 for one or two
/// query heads per KV head, 64 for four, 32 for eight; 8-bit groups a multiple of 16, 4-bit of 32;
/// the AVX2 kernel: head_dim a multiple of 16; other shapes the portable kernel). Tests hold every
/// level to the reference.
void decode_attention(const DecodeAttentionArgs& a, SimdLevel highest);
/// The same with the best level the CPU has (`allow_simd = false`: the portable kernel).
void decode_attention(const DecodeAttentionArgs& a, bool allow_simd = true);
/// Whether the CPU has at least AVX2 (and the build its kernels).
bool decode_attention_simd_available();

/// The query as decode attention at SimdLevel::avx512_vnni scores 8- and 4-bit keys, with integer
/// dot products (VNNI's unsigned-by-signed byte products), as llama.cpp's CPU backend dots its
/// quantised blocks against activations rounded to bytes: each run of `group` elements of
/// q[elements] (group divides elements) becomes two signed bytes per element with one scale,
/// max |q| / 127, q_i ~ scale x (high_i + low_i / 256): high rounds q_i / scale to nearest (ties to
/// even), low rounds the remainder in 256ths (clamped to +-127), so every element is within
/// scale / 256 of q_i (a 16-bit fixed-point query; one byte alone would leave half a step, which
/// on keys with outlier channels moves scores by tenths). A zero run gets scale 0 and codes 0.
void round_query_to_bytes(const float* q, int elements, int group, std::int8_t* high, std::int8_t* low, float* scales);
/// Whether decode_attention(a, highest) takes this call in integers: int8 and int4 caches whose
/// groups are a multiple of 32 up to 128, on CPUs with AVX-512 VNNI, when the AVX-512 kernel takes
/// the shape. It then scores the keys against the query rounded by round_query_to_bytes (per query
/// head, in the cache's groups) instead of the query itself, and weighs the values in 16-bit fixed
/// point (kIntegerWeightTile).
bool scores_against_rounded_query(const DecodeAttentionArgs& a, SimdLevel highest);
/// The integer V pass weighs each token's codes by p_t x (its group's scale), rounded to 16-bit
/// fixed point on one scale per run of kIntegerWeightTile tokens (the run's largest probability
/// times its largest scale, over 32767), as llama.cpp's CPU backend rounds activations to
/// integers. Each weight is within half a step of its value, so each output is within
/// kIntegerWeightTile / 65534 (about 2^-11) of the largest range a token's group spans (the
/// group's max - min, the scale x 255 or 15) of the output with exact weights: about what
/// rounding the probabilities to fp16 before the weighted sum costs, as GPU kernels do.
inline constexpr int kIntegerWeightTile = 32;

/// Naive float reference: contiguous K and V [num_seqs][max_context][kv_heads][head_dim].
void reference_decode_attention(const float* query, const float* k, const float* v, const std::int32_t* context_lens,
                                int num_seqs, int max_context, int q_heads, int kv_heads, int head_dim, float scale,
                                float* out);

}  // namespace memtwin::kernels
