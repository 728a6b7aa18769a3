#pragma once
// The time of one serving-engine iteration on one replica, as a roofline over the batch: the
// weights are streamed once per iteration, each sequence's cached KV is read once (at its
// compressed size, plus the work of dequantising it and of eviction bookkeeping), matmul FLOPs
// scale with the tokens computed, attention FLOPs with their context; tensor parallelism splits
// the work and adds two all-reduces per layer. Efficiencies are the cluster's (cluster.efficiency).
#include <memory>

#include "models/kv/kv_compressor.h"
#include "models/scenario.h"

namespace memtwin {

struct IterationLoad {
  int prefill_tokens = 0;          ///< prompt tokens computed this iteration (all sequences)
  double prefill_attention = 0;    ///< sum over prefill chunks of chunk x (tokens before it + chunk / 2)
  int decode_sequences = 0;        ///< sequences producing one token
  double decode_context = 0;       ///< sum of their cached tokens (kept tokens for eviction methods)
  double kv_bytes_read = 0;        ///< compressed KV bytes the decode attention reads, whole replica
  int selections = 0;              ///< prompts finishing prefill under SnapKV/PyramidKV/entropy (one-off scoring)
  double selection_prompt_tokens = 0;
};

class IterationModel {
 public:
  explicit IterationModel(const Scenario& scenario);
  /// Seconds for one iteration of this load.
  [[nodiscard]] double seconds(const IterationLoad& load) const;
  /// Seconds for the prefill of one prompt alone, and for one decode step of one sequence with
  /// `context` cached tokens (the idle-system TTFT and TPOT).
  [[nodiscard]] double prefill_alone(int prompt_tokens) const;
  [[nodiscard]] double decode_alone(int context) const;

 private:
  const Scenario& s_;
  double weight_bytes_ = 0;       // per GPU
  double matmul_params_ = 0;      // per token, whole model
  double attention_width_ = 0;    // layers x heads x head_dim (whole model)
  double peak_flops_ = 0, fp32_flops_ = 0, hbm_ = 0;
  double tp_ = 1;
  double dequant_ops_per_element_ = 0;
  std::unique_ptr<KvCompressor> compressor_;
  double token_bytes_full_ = 0;   // uncompressed KV bytes per token, whole replica
};

}  // namespace memtwin
