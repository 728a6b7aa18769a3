#pragma once
// The vectorised decode attention, paged (decode_attention_avx2.cpp, decode_attention_avx512.cpp) and
// KIVI's (kivi_decode_avx2.cpp), each compiled for its instruction set, and the checks that this CPU
// can run them. Internal to
// kernels/: decode_attention() and kivi_decode_attention() dispatch.
#include "kernels/kivi_paged.h"
#include "kernels/kv_kernels.h"

namespace memtwin::kernels {
/// Both kernels' last step when a.probs is set: heads [first_head, first_head + heads) of the
/// sequence, from their softmax numerators ([heads, context] in a row each) and denominators.
void write_probabilities(const DecodeAttentionArgs& a, int seq, int first_head, int heads, const float* numerators,
                         const float* denominators);
}  // namespace memtwin::kernels

namespace memtwin::kernels::simd {

/// Whether the CPU has AVX2, FMA and F16C and the build has the kernel.
bool avx2_supported();
/// Whether the CPU has AVX-512 F, BW, VL and DQ (and AVX2, FMA, F16C) and the build has the kernel.
bool avx512_supported();
/// Whether it has AVX-512 VNNI as well.
bool avx512_vnni_supported();

/// Whether the AVX-512 paged kernel takes this call's shape (see decode_attention() in
/// kv_kernels.h); false in a build without it.
bool avx512_takes(const DecodeAttentionArgs& a);
/// As attend_heads_avx2, with AVX-512 (decode_attention_avx512.cpp); false (nothing written) for
/// shapes it does not take, which the AVX2 kernel then takes. `vnni`: the CPU has AVX-512 VNNI and
/// the call allows it, so 8- and 4-bit keys that vnni_takes are scored by vnni_key_scores.
bool attend_heads_avx512(const DecodeAttentionArgs& a, int seq, int first_kv_head, int kv_heads, bool vnni);

/// Attends one sequence's KV heads first_kv_head .. first_kv_head + kv_heads - 1 (and their query
/// heads) as the portable kernel does each (sequence, KV head) pair; false (nothing written) for
/// shapes it does not handle (head_dim not a multiple of 16 or above 256, quantisation
/// groups not a multiple of 8, GQA groups other than 1, 2, 4, 8), which the portable kernel then takes.
bool attend_heads_avx2(const DecodeAttentionArgs& a, int seq, int first_kv_head, int kv_heads);

/// Whether the AVX2 KIVI kernel takes this call's shape: groups a multiple of 16 tokens, head_dim
/// a multiple of 16 up to 256, at most 8 query heads per KV head, and a build with the kernel. The
/// caller checks the CPU (avx2_supported()).
bool kivi_avx2_takes(const KiviDecodeArgs& a);
/// KIVI decode attention with AVX2, FMA and F16C (kivi_decode_avx2.cpp) of sequence `seq`'s KV
/// heads first_kv_head .. first_kv_head + kv_heads - 1 and their query heads (only their outputs
/// are written). Only for calls kivi_avx2_takes.
void attend_kivi_avx2(const KiviDecodeArgs& a, int seq, int first_kv_head, int kv_heads);

/// Whether the AVX-512 KIVI kernel takes this call's shape: groups and head_dim multiples of 32
/// (head_dim up to 256), at most 8 query heads per KV head, and a build with the kernel. The caller
/// checks the CPU (avx512_supported()).
bool kivi_avx512_takes(const KiviDecodeArgs& a);
/// As attend_kivi_avx2, with AVX-512 (kivi_decode_avx512.cpp). Only for calls kivi_avx512_takes.
/// `vnni`: the CPU has AVX-512 VNNI and the call allows it, so the keys of 8- and 4-bit caches are
/// scored (kivi_vnni_key_scores) and their values weighed (vnni_weigh_tile) in integers.
void attend_kivi_avx512(const KiviDecodeArgs& a, int seq, int first_kv_head, int kv_heads, bool vnni);

/// One KV head's key group of a KIVI cache (kivi_paged.h), scored in integers for `heads` query
/// heads of its GQA group (kivi_vnni_keys.cpp).
struct KiviKeyGroup {
  const std::uint8_t* keys = nullptr;  ///< channel c's G codes at keys + c x channel_bytes
  std::size_t channel_bytes = 0;
  const std::uint8_t* next_keys = nullptr;  ///< head_dim x channel_bytes asked into L2 meanwhile, or null
  const float* weights = nullptr;  ///< query head h's q_c x scale_c (head_dim floats) at weights + h x weights_stride
  std::size_t weights_stride = 0;
  const float* constants = nullptr;  ///< [heads]: sum_c q_c zero_c
  float* scores = nullptr;  ///< query head h's G scores, scale x (sum_c w'_c code_ct + constant), at scores + h x scores_stride
  std::size_t scores_stride = 0;
  float scale = 0;
};
/// Whether kivi_vnni_key_scores takes this shape for `heads` query heads per KV head: 8- or 4-bit
/// keys, groups a multiple of 32 tokens, head_dim a multiple of 32 up to 256, heads 1-4 or 8, in a
/// build with the kernel.
bool kivi_vnni_keys_take(const KiviPagedShape& s, int heads);
/// Writes a key group's scores with each weight w_c = q_c x scale_c rounded to 16-bit fixed point
/// (w'_c; kKiviKeyWeightRun states the rounding). Only on CPUs with AVX-512 VNNI, for shapes
/// kivi_vnni_keys_take.
void kivi_vnni_key_scores(const KiviPagedShape& s, int heads, const KiviKeyGroup& g);

/// The shape both integer passes (vnni_key_scores, vnni_weigh_tile) are also compiled for with
/// their loop counts fixed: head_dim 128 in groups of 32 channels (one 32-channel chunk a group,
/// four groups), the Llama shape with the cache's default group. Other shapes take the general loops.
inline bool integer_passes_fixed_shape(const KvFormat& f) { return f.head_dim == 128 && f.group == 32; }
/// round_query_to_bytes as the VNNI K pass computes it (its build's copy, in AVX-512 vectors, for
/// groups of a multiple of 16): the same bytes and scales, which a test checks. Only on CPUs with
/// AVX-512 VNNI, in a build with the kernel.
void vnni_round_query_to_bytes(const float* q, int elements, int group, std::int8_t* high, std::int8_t* low, float* scales);
/// Whether vnni_key_scores takes this format: int8 or int4 with groups a multiple of 32 channels
/// up to 128, in a build with the kernel (decode_attention_vnni.cpp).
bool vnni_takes(const KvFormat& f);
/// The AVX-512 kernel's K pass with VNNI, for formats vnni_takes: scores[h][g][t] = scale x q'_{h,g} . k_{h,t}
/// for the KV heads `first_kv_head` .. + `kv_heads` - 1 of sequence `seq` (its `ctx` tokens) and
/// their G = q_heads / kv_heads query heads (1, 2, 4 or 8), q' each query head rounded by
/// round_query_to_bytes with the cache's group. `scores` holds kv_heads x G x ctx floats (a query
/// head's row after another). Only on CPUs with AVX-512 VNNI.
void vnni_key_scores(const DecodeAttentionArgs& a, int seq, int first_kv_head, int kv_heads, float* scores);
/// One tile of the integer V pass (decode_attention_vnni_values.cpp): up to kIntegerWeightTile
/// tokens' value vectors of one KV head, weighed for `heads` query heads (vnni_weigh_tile).
struct VnniValueTile {
  const std::uint8_t* const* rows = nullptr;  ///< kIntegerWeightTile tokens: vector j at rows[j] + offset
  std::size_t offset = 0;
  int tokens = 0;  ///< the tile's tokens; rows past them must point at a readable vector (weight 0)
  const float* probs = nullptr;  ///< query head h's probabilities of the tile's tokens at probs + h x probs_stride
  std::size_t probs_stride = 0;
  float* zero_sums = nullptr;  ///< [head][value group][16 lanes]: sum_t p_t zero_t added lane-wise (sum the lanes at the end)
  float* acc = nullptr;        ///< [head][head_dim]: sum_t p_t scale_t code_t added, channels in vnni_value_position's order
  const std::uint8_t* const* prefetch = nullptr;  ///< rows whose vectors (at + offset) to ask into L2 meanwhile
  int prefetch_count = 0;
};
/// Whether vnni_weigh_tile takes this format for `heads` query heads per KV head: vnni_takes, at
/// most 8 value groups, heads 1-4 or 8, and at most 16 heads and groups together.
bool vnni_value_tile_takes(const KvFormat& f, int heads);
/// Adds one tile's weighted codes and zero points (see kIntegerWeightTile for the rounding). Only
/// on CPUs with AVX-512 VNNI, for shapes vnni_value_tile_takes.
void vnni_weigh_tile(const KvFormat& f, int heads, const VnniValueTile& tile);
/// Where channel c of a value vector accumulates in a VnniValueTile's acc row.
int vnni_value_position(const KvFormat& f, int channel);
/// Its V pass (decode_attention_vnni_values.cpp), for formats vnni_takes: writes a.out's rows of
/// those query heads, sum_t w'_t v_t / denominator, from each query head's softmax numerators
/// (`numerators`, laid out as vnni_key_scores writes scores) and their sums (`denominators`, one a
/// query head); w'_t is p_t times the value's group scale rounded to 16-bit fixed point per tile of
/// kIntegerWeightTile tokens (kv_kernels.h). Only on CPUs with AVX-512 VNNI.
void vnni_weighted_values(const DecodeAttentionArgs& a, int seq, int first_kv_head, int kv_heads, const float* numerators,
                          const float* denominators);

}  // namespace memtwin::kernels::simd
