#pragma once
// How much a KV format loses: reconstruction error of K and V (relative Frobenius), error of the
// decode-attention output against full precision (relative L2), and overlap of the top-k attended
// tokens, on KV the caller provides (synthetic with outlier channels, or a user's .npy tensors).
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kv_format.h"

namespace memtwin::kernels {

/// K or V of one sequence: [tokens, kv_heads, head_dim] floats.
struct KvTensor {
  int tokens = 0, kv_heads = 0, head_dim = 0;
  std::vector<float> data;
};

struct QualityReport {
  double key_error = 0, value_error = 0;  ///< ||x - x^|| / ||x|| over the whole tensor
  double output_error = 0;                ///< relative L2 of the attention output, all query heads
  double topk_overlap = 0;                ///< mean |top-k(reference) ∩ top-k(quantised)| / k
  double bytes_per_token = 0;             ///< K and V, all heads, this format
};

/// Synthetic KV with realistic statistics: unit normals, with a few key channels 10-50x larger
/// (as KIVI and KVQuant report for keys).
KvTensor synthetic_keys(int tokens, int kv_heads, int head_dim, std::uint64_t seed);
KvTensor synthetic_values(int tokens, int kv_heads, int head_dim, std::uint64_t seed);

/// The element count of a tensor of `shape` (each dimension in [1, 2^31)) whose data must fit in
/// `available` bytes at `element` bytes each; throws std::runtime_error naming `path` otherwise,
/// before anything is allocated (a 128-byte file asking for 32 GB is refused, not allocated).
std::size_t checked_elements(const std::vector<long>& shape, std::size_t element, std::uintmax_t available,
                             const std::string& path);

/// Reads a float32 or float16 .npy file of shape [tokens, kv_heads, head_dim] (C order). Throws
/// std::runtime_error naming the file for anything else.
KvTensor read_npy(const std::string& path);

/// Measures `format` on keys/values with `q_heads` random queries (GQA) and top-`k` overlap.
QualityReport measure_quality(const KvTensor& keys, const KvTensor& values, const KvFormat& format, int q_heads,
                              int k, std::uint64_t seed);

}  // namespace memtwin::kernels
