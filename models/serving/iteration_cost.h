#pragma once
// The time of one serving-engine iteration on one replica, as a roofline per kernel class summed
// over the batch: the weights are streamed once per iteration by GEMMs whose FLOPs scale with the
// tokens computed (a MoE layer's experts only where tokens were routed, balanced routing assumed); each decoding sequence's cached KV is read once (at its compressed size, plus
// the work of dequantising it), or at a measured decode-attention kernel rate where the cluster has
// one (`cluster.kernels.decode_attention`); prefill attention FLOPs scale with their context; the
// memory-bound kernels (norms, residual adds, rotary, the activation) move their bytes per token;
// every new token's K and V are written to the paged cache (at `cluster.kernels.kv_write` where
// measured).
// Compression costs its upkeep, as its descriptor's selection says (models/kv/kv_method.h): a prompt
// vote once per prompt (scoring an observation window against the prompt's keys, then compacting
// what is kept); accumulated scores' bookkeeping on every decode step and their scoring of the
// prompt. Weight-only int4 GEMMs also dequantise every weight on the CUDA cores. An engine without CUDA
// graphs adds the host's dispatch per layer (cluster.runtime.eager_layer_overhead).
// Tensor parallelism splits the work and adds two all-reduces per layer. Expert parallelism
// (inference.serving.expert_parallel) gives each GPU its share of the experts whole, fed the tokens
// of every replica of the group, and adds per MoE layer the all-gather of the group's hidden states
// before the experts and the reduce-scatter of their outputs after (vLLM's default
// allgather_reducescatter dispatch). Efficiencies are the cluster's (cluster.efficiency).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/kv/kv_compressor.h"
#include "models/serving/iteration_ops.h"
#include "models/scenario.h"

namespace memtwin {

struct IterationLoad {
  int prefill_tokens = 0;          ///< prompt tokens computed this iteration (all sequences)
  double prefill_attention = 0;    ///< sum over prefill chunks of chunk x (tokens before it + chunk / 2)
  int decode_sequences = 0;        ///< sequences producing one token
  int prefills_completing = 0;     ///< prefill chunks that end their prompt (each samples its first token)
  double decode_context = 0;       ///< sum of their cached tokens (kept tokens for eviction methods)
  double kv_bytes_read = 0;        ///< compressed KV bytes the decode attention reads, whole replica
  /// Of decode_context, the tokens in a full-precision residual (channel-key groups).
  double decode_residual_context = 0;
  double completed_prompt_tokens = 0;      ///< the prompts whose prefill ends this iteration: their lengths
  double completed_prompt_kept_bytes = 0;  ///< and the compressed bytes they keep (what a selection writes)
  /// With expert parallelism: the tokens of the whole group this iteration (every replica's batch,
  /// which this GPU's experts serve); 0 means this replica's alone.
  int expert_group_tokens = 0;
};

class IterationModel {
 public:
  explicit IterationModel(const Scenario& scenario);
  /// Seconds for one iteration of this load: its kernels, then its tensor-parallel all-reduces on
  /// idle intra-node links (the alpha-beta form).
  [[nodiscard]] double seconds(const IterationLoad& load) const;
  /// The kernels alone (a simulator runs the all-reduces as flows instead): of all pipeline stages
  /// one after another; each stage takes an equal share.
  [[nodiscard]] double compute_seconds(const IterationLoad& load) const;
  /// The same by kind of work (models/serving/iteration_ops.h); compute_seconds is its total.
  [[nodiscard]] IterationOpSeconds compute_breakdown(const IterationLoad& load) const;
  /// Tensor parallelism's ring all-reduces of the hidden states: two per layer, each this many bytes.
  [[nodiscard]] int tp_all_reduces() const;
  [[nodiscard]] double tp_all_reduce_bytes(const IterationLoad& load) const;
  /// Expert parallelism's dispatch and combine: one all-gather and one reduce-scatter per MoE layer
  /// over the replicas (one such group per tensor rank), each of this many bytes in all when the
  /// busiest replica computes `max_replica_tokens` (the others are padded to it, as vLLM does).
  [[nodiscard]] int ep_collectives() const;
  [[nodiscard]] double ep_collective_bytes(int max_replica_tokens) const;
  /// The replicas in a group that step together: every replica with expert parallelism, else 1.
  [[nodiscard]] int lockstep_replicas() const { return ep_ > 1 ? s_.inference->serving.replicas : 1; }
  /// The fraction of the routed experts' weights an iteration reads when the experts serve `tokens`
  /// (a fused MoE kernel skips experts no token was routed to): min(1, tokens x top-k / experts) with
  /// balanced routing; 1 for dense models.
  [[nodiscard]] double experts_touched(double tokens) const;
  /// The weight bytes per GPU an iteration reads, those experts only.
  [[nodiscard]] double weight_bytes_read(double tokens) const;
  /// Seconds for the prefill of one prompt alone (with a selecting method's selection), and for
  /// one decode step of one sequence whose `context` tokens are prompt (the idle-system TTFT and
  /// TPOT), at the scenario's KV compression.
  [[nodiscard]] double prefill_alone(int prompt_tokens) const;
  [[nodiscard]] double decode_alone(int context) const;

 private:
  /// Seconds the weight GEMMs take at this many rows (the head at `sampled`) where calibrated
  /// whole from memory: per shape, else at one rate for all; 0 where not measured.
  /// `group`: the expert-parallel group's tokens, which the routed experts' GEMMs multiply.
  [[nodiscard]] double measured_weight_reads(double tokens, double sampled, double group) const;
  /// The expert-parallel collectives of one iteration on idle links (the alpha-beta form).
  [[nodiscard]] double ep_collective_seconds(int max_replica_tokens) const;

  Scenario s_;  // a copy: a model may outlive the scenario it was made from
  double weight_bytes_ = 0;       // per GPU
  struct PricedGemm {
    std::int64_t inner = 0, outputs = 0;
    double bytes = 0;            // every matrix of this shape in the replica, per GPU
    double rows_per_token = 1;
    bool head = false;           // its rows are the sampled positions
    bool group_rows = false;     // its rows are the expert-parallel group's tokens
    bool routed = false;         // a routed expert's matrix: read only where tokens were routed to it
  };
  std::vector<PricedGemm> weight_gemms_;  // serving_weight_gemms, for gemm_memory_by_shape
  double other_weight_bytes_ = 0;         // norms, biases: weight_bytes_ beyond the GEMMs' matrices
  double routed_weight_bytes_ = 0;        // the routed experts' matrices, per GPU
  double body_params_ = 0;        // matmul parameters per token of the blocks, whole model
  double head_params_ = 0;        // the output head's: run only for the positions that sample
  double attention_width_ = 0;    // layers x heads x head_dim (whole model)
  double peak_flops_ = 0, fp32_flops_ = 0, hbm_ = 0;
  double tp_ = 1;
  double ep_ = 1;                 // GPUs sharing a MoE layer's experts (1: no expert parallelism)
  double routed_params_per_token_ = 0;  // with expert parallelism: the routed experts' part of body_params_
  double dequant_ops_per_element_ = 0;  // KV
  double weight_dequant_ops_ = 0;       // per GPU and iteration (W4A16)
  double eager_seconds_ = 0;            // host dispatch the GPU waits for, per iteration
  // Compression upkeep: the one-off selection after prefill (a prompt vote) and accumulated
  // attention scores' bookkeeping, whole replica.
  bool selects_after_prefill_ = false;
  double selection_window_ = 0;             // observation-window queries scored against the prompt
  double score_upkeep_bytes_per_token_ = 0;  // per kept token and decode step
  double prompt_score_factor_ = 0;           // extra prefill-attention FLOPs for the prompt's scores
  std::unique_ptr<KvCompressor> compressor_;
  double token_bytes_full_ = 0;   // uncompressed KV bytes per token, whole replica
  double kv_elements_per_token_ = 0;  // K and V elements per token, whole replica
  double elementwise_bytes_per_token_ = 0;  // norms, residuals, rotary, activation: whole model
  double decode_kernel_elements_per_s_ = 0;  // measured decode attention, 0: roofline
  std::map<double, double> decode_kernel_by_bytes_;  // measured by working set (preferred)
  std::map<double, double> residual_kernel_by_bytes_;  // channel-key groups: the kernel over the fp16 residual
  double kv_write_elements_per_s_ = 0;       // measured paged-cache writes, 0: roofline
  double prompt_scoring_pairs_per_s_ = 0;    // measured prompt scoring (accumulated scores), 0: roofline
};

}  // namespace memtwin
