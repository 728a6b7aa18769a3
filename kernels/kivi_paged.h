#pragma once
// KIVI's cache (kivi.h) in the serving engine's paged pool, and the two kernels that use it: the
// append that writes new tokens and quantises whole key groups as they leave the residual window,
// and decode attention that reads quantised groups and the full-precision residual directly.
//
// Layout. The scheduler counts a KIVI sequence in bytes (GroupQuantKv::sequence_bytes), so each
// block gives the sequence, in every layer, `slice_bytes()`: block_size tokens' worth of quantised
// K and V for all KV heads. A sequence's blocks (its block table) lay those slices end to end into
// one byte range per layer, and in it:
//   * its quantised groups first, G tokens each, `group_bytes()` per group: per KV head, the keys
//     per channel (quantize_keys_per_channel: head_dim x (codes + fp16 scale + zero point)) then
//     the G values per token (group-quantised along channels, kv_format.h, G channels a group);
//   * then its residual, token by token, `residual_token_bytes()` per token: per KV head, K then V,
//     head_dim fp16 halves each.
// block_size must be a multiple of G and a residual token must divide a group, so that no group
// and no token straddles two blocks (validate() says which). The bytes a sequence of n tokens
// uses are exactly its size model's (a test holds them equal).
//
// Blocks shrink when a group is quantised (G fp16 tokens become one smaller group). The engine
// therefore stages a sequence's residual before the scheduler's blocks are synced whenever this
// iteration will quantise it (`KiviAppendArgs::staged`), and the append reads it from there.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/kv_format.h"
#include "kernels/simd_level.h"

namespace memtwin::kernels {

struct KiviPagedShape {
  int num_blocks = 0;
  int block_size = 32;
  int kv_heads = 8;
  int head_dim = 128;
  int bits = 2;       ///< 2, 4 or 8
  int group = 32;     ///< G: tokens per key group, channels per value group
  int residual = 128; ///< R: the newest tokens kept in fp16 (a multiple of G)

  /// Values' format: per token, groups of G channels.
  [[nodiscard]] KvFormat value_format() const;
  /// One KV head's G keys, channel by channel: head_dim x (packed codes + fp16 scale and zero).
  [[nodiscard]] std::size_t key_group_bytes() const;
  /// One KV head's part of a group: its keys, then its G values.
  [[nodiscard]] std::size_t head_group_bytes() const;
  [[nodiscard]] std::size_t group_bytes() const { return static_cast<std::size_t>(kv_heads) * head_group_bytes(); }
  [[nodiscard]] std::size_t residual_token_bytes() const { return static_cast<std::size_t>(kv_heads) * 4 * head_dim; }
  /// A block's share of one layer: block_size / G groups.
  [[nodiscard]] std::size_t slice_bytes() const { return static_cast<std::size_t>(block_size / group) * group_bytes(); }
  /// One layer's region of the pool.
  [[nodiscard]] std::size_t bytes() const { return slice_bytes() * static_cast<std::size_t>(num_blocks); }
  /// Tokens of an n-token sequence held quantised: whole groups once R tokens stand after them.
  [[nodiscard]] std::int64_t quantized_tokens(std::int64_t n) const {
    const std::int64_t eligible = n > residual ? n - residual : 0;
    return eligible / group * group;
  }
  /// Bytes of one layer an n-token sequence uses.
  [[nodiscard]] std::size_t sequence_bytes(std::int64_t n) const;
  /// Throws std::invalid_argument naming the constraint that does not hold.
  void validate() const;
};

struct KiviAppendArgs {
  const float* keys = nullptr;    ///< [rows, kv_heads, head_dim]: the new tokens' keys
  const float* values = nullptr;  ///< same shape
  int num_seqs = 0;
  const std::int32_t* first_row = nullptr;   ///< [num_seqs]: the sequence's first new row
  const std::int32_t* new_tokens = nullptr;  ///< [num_seqs]: its new rows (consecutive)
  const std::int32_t* cached = nullptr;      ///< [num_seqs]: tokens it held before
  /// [num_seqs]: where kivi_stage_residual copied the sequence's residual, or null to read it from
  /// the cache (only safe when its blocks did not shrink).
  const std::uint16_t* const* staged = nullptr;
  const std::int32_t* block_tables = nullptr;  ///< [num_seqs, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  KiviPagedShape shape;
  std::uint8_t* cache = nullptr;  ///< one layer's region
};

/// The argument set for `num_seqs` sequences (no staging): how the engine, the calibration and the
/// tests call kivi_append.
inline KiviAppendArgs make_kivi_append_args(const float* keys, const float* values, int num_seqs, const std::int32_t* first_row,
                                            const std::int32_t* new_tokens, const std::int32_t* cached,
                                            const std::int32_t* block_tables, int max_blocks_per_seq, const KiviPagedShape& shape,
                                            std::uint8_t* cache) {
  KiviAppendArgs a;
  a.keys = keys;
  a.values = values;
  a.num_seqs = num_seqs;
  a.first_row = first_row;
  a.new_tokens = new_tokens;
  a.cached = cached;
  a.block_tables = block_tables;
  a.max_blocks_per_seq = max_blocks_per_seq;
  a.shape = shape;
  a.cache = cache;
  return a;
}

/// Appends each sequence's new tokens: into its residual (rounded to fp16), and when the residual
/// reaches R + G or more, its oldest whole groups quantised (keys per channel, values per token),
/// exactly as KiviSequence::append does token by token. Parallel over sequences.
void kivi_append(const KiviAppendArgs& a);

/// The residual of a sequence holding `tokens` tokens, copied out of its cache:
/// tokens - quantized_tokens(tokens) entries of residual_token_bytes() (as halves).
void kivi_stage_residual(const std::uint8_t* cache, const std::int32_t* block_table, std::int64_t tokens,
                         const KiviPagedShape& shape, std::uint16_t* out);

/// Channels of a key group whose weights share one fixed-point scale in the integer K pass
/// (kivi_decode_attention at SimdLevel::avx512_vnni).
inline constexpr int kKiviKeyWeightRun = 32;

struct KiviDecodeArgs {
  const float* query = nullptr;               ///< [num_seqs, q_heads, head_dim]
  const std::uint8_t* cache = nullptr;        ///< one layer's region
  const std::int32_t* block_tables = nullptr; ///< [num_seqs, max_blocks_per_seq]
  const std::int32_t* context_lens = nullptr; ///< [num_seqs]: tokens held (>= 1)
  float* out = nullptr;                       ///< [num_seqs, q_heads, head_dim]
  int num_seqs = 0;
  int q_heads = 0;  ///< a multiple of kv_heads, at most 8 per KV head
  int max_blocks_per_seq = 0;
  float scale = 0;  ///< usually 1 / sqrt(head_dim)
  KiviPagedShape shape;
};

/// The argument set with the usual scale, 1/sqrt(head_dim).
inline KiviDecodeArgs make_kivi_decode_args(const float* query, const std::uint8_t* cache, const std::int32_t* block_tables,
                                            const std::int32_t* context_lens, float* out, int num_seqs, int q_heads,
                                            int max_blocks_per_seq, const KiviPagedShape& shape) {
  KiviDecodeArgs a;
  a.query = query;
  a.cache = cache;
  a.block_tables = block_tables;
  a.context_lens = context_lens;
  a.out = out;
  a.num_seqs = num_seqs;
  a.q_heads = q_heads;
  a.max_blocks_per_seq = max_blocks_per_seq;
  a.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  a.shape = shape;
  return a;
}

/// One query per sequence against its quantised groups and residual. A key group's scores come
/// from its codes directly: q.k_t = sum_c (q_c s_c) code_ct + sum_c q_c z_c. Each sequence's
/// memory is read in its order, every KV head at once; parallel over sequences with OpenMP where
/// available. The best vectorised kernel of at most `highest` that the CPU runs and that takes the
/// call's shape runs (AVX-512: groups and head_dim multiples of 32; AVX2: of 16), else the portable
/// one (tests compare them).
///
/// At SimdLevel::avx512_vnni, 4- and 8-bit caches are taken in integers, as llama.cpp's CPU backend
/// takes quantised blocks: the values weighed as kIntegerWeightTile (kv_kernels.h) states, and the
/// keys scored with each weight q_c s_c rounded to 16-bit fixed point on one scale per run of
/// kKiviKeyWeightRun channels (the run's largest |q_c s_c| over 32767). Each weight is then within
/// half a step, so each score q.k_t moves by at most kKiviKeyWeightRun / 65534 x sum over the runs
/// of the run's largest |q_c| x range_c (range_c: the span of channel c's keys in the group,
/// s_c x (2^bits - 1)) - about 2^-11 of a run's largest term, what fp16 weights would cost - before
/// the scale.
void kivi_decode_attention(const KiviDecodeArgs& a, SimdLevel highest);
/// The same with the best level the CPU has (`allow_simd = false`: the portable kernel).
void kivi_decode_attention(const KiviDecodeArgs& a, bool allow_simd = true);

/// Everything a sequence of `tokens` tokens holds, dequantised: keys and values [tokens, kv_heads,
/// head_dim] (the tests' reference path).
void kivi_read_sequence(const std::uint8_t* cache, const std::int32_t* block_table, std::int64_t tokens,
                        const KiviPagedShape& shape, std::vector<float>& keys, std::vector<float>& values);

}  // namespace memtwin::kernels
