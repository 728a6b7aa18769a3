#pragma once
// "Will it fit?" for serving: weights, KV pool and its capacity under vLLM's rule
// (gpu_memory_utilization x memory - weights - profile-run activations - non-torch memory - CUDA
// graph pool) or an explicit per-GPU pool, with KV compression.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/kv/kv_compressor.h"
#include "models/scenario.h"
#include "models/units.h"

namespace memtwin {

struct ServingMemory {
  // Per GPU (the heaviest pipeline stage of a replica).
  Bytes weights, activations, runtime, cuda_graphs, kv_pool;
  Bytes peak, capacity, budget;  ///< budget: what the engine may use (utilization x capacity)
  /// Compressed bytes per token of context, for the workload's typical request (its footprint over
  /// its length): eviction and quantisation both lower it. Uncompressed: 2 x layers x kv_heads x
  /// head_dim x element bytes.
  double kv_bytes_per_token = 0;
  double kv_bytes_per_token_uncompressed = 0;
  double kv_bytes_per_stored_token = 0;        ///< per cached token: the unit of a paged block
  Bytes block_bytes;
  std::int64_t capacity_blocks = 0;
  std::int64_t capacity_tokens = 0;            ///< context tokens that fit (pool / kv_bytes_per_token)
  std::int64_t max_context_tokens = 0;         ///< longest prompt one sequence can have (<= max_model_len)
  std::int64_t max_len_sequences = 0;          ///< sequences of max_model_len tokens that fit at once
  std::int64_t typical_sequences = 0;          ///< mean-sized requests whose KV fits at once (before max_num_seqs)
  double typical_prompt = 0, typical_output = 0;
  bool fits = false;
  std::string why_not;                         ///< when it does not fit
};

/// Bytes per weight on the linear layers for a weight format (AWQ int4: 4-bit codes + 4-bit zero
/// points + fp16 scales per group = 0.5 + 2.5/G bytes; 4.156 bits at G = 128).
double linear_weight_bytes(WeightDtype dtype, int group_size, double in_features);

/// The KV layout of one GPU of the scenario's serving replica.
KvShape serving_kv_shape(const Scenario& scenario);
/// A length distribution's mean (clipped to its maximum); `fallback` for an empirical file, which
/// is read later.
double mean_length(const LengthDistribution& d, double fallback);

ServingMemory serving_memory(const Scenario& scenario);

std::vector<std::string> serving_fit_hints(const Scenario& scenario, const ServingMemory& memory);

}  // namespace memtwin
