#pragma once
// Every enumerated scenario value, with the exact spelling users write. The schema lists the
// choices from these tables and the scenario builder converts with them, so a spelling is written
// down once.
#include <array>
#include <optional>
#include <string_view>

namespace memtwin {

template <class E, std::size_t N>
struct EnumNames {
  std::array<std::string_view, N> names;
  [[nodiscard]] constexpr std::string_view name(E e) const { return names[static_cast<std::size_t>(e)]; }
  [[nodiscard]] constexpr std::optional<E> parse(std::string_view text) const {
    for (std::size_t i = 0; i < N; ++i)
      if (names[i] == text) return static_cast<E>(i);
    return std::nullopt;
  }
};

enum class Fabric { nvswitch, nvlink, pcie };
inline constexpr EnumNames<Fabric, 3> kFabricNames{{"nvswitch", "nvlink", "pcie"}};

enum class Topology { fat_tree, leaf_spine };
inline constexpr EnumNames<Topology, 2> kTopologyNames{{"fat-tree", "leaf-spine"}};

/// The GPU's architecture generation, which picks NCCL's per-generation tuning constants
/// (compute capability 7.x volta, 8.0/8.6 ampere, 8.9 ada, 9.0 hopper, 10.x blackwell); `cpu` is
/// the host device, whose communicator is MPI, not NCCL.
enum class GpuGeneration { volta, ampere, ada, hopper, blackwell, cpu };
inline constexpr EnumNames<GpuGeneration, 6> kGpuGenerationNames{{"volta", "ampere", "ada", "hopper", "blackwell", "cpu"}};

/// How collectives are costed: `nccl` is NCCL's own tuning model (algorithm and protocol chosen per
/// call); `ring` a plain ring with one link latency per step (MPI on the host device, or a GPU
/// whose generation is not known).
enum class CollectiveLibrary { nccl, ring };
inline constexpr EnumNames<CollectiveLibrary, 2> kCollectiveLibraryNames{{"nccl", "ring"}};

/// NCCL's algorithms and protocols, spelt as NCCL_ALGO and NCCL_PROTO spell them (lowercase).
enum class CollectiveAlgorithm { ring, tree, nvls, nvls_tree, pat };
inline constexpr EnumNames<CollectiveAlgorithm, 5> kCollectiveAlgorithmNames{{"ring", "tree", "nvls", "nvlstree", "pat"}};
enum class CollectiveProtocol { ll, ll128, simple };
inline constexpr EnumNames<CollectiveProtocol, 3> kCollectiveProtocolNames{{"ll", "ll128", "simple"}};

enum class MlpKind { swiglu, geglu, gelu, relu };
inline constexpr EnumNames<MlpKind, 4> kMlpNames{{"swiglu", "geglu", "gelu", "relu"}};

enum class NormKind { rmsnorm, layernorm };
inline constexpr EnumNames<NormKind, 2> kNormNames{{"rmsnorm", "layernorm"}};

enum class BiasKind { none, qkv, all };
inline constexpr EnumNames<BiasKind, 3> kBiasNames{{"none", "qkv", "all"}};

enum class PositionEmbedding { rope, learned, alibi };
inline constexpr EnumNames<PositionEmbedding, 3> kPositionNames{{"rope", "learned", "alibi"}};

enum class Framework { ideal, deepspeed, fsdp, megatron };
inline constexpr EnumNames<Framework, 4> kFrameworkNames{{"ideal", "deepspeed", "fsdp", "megatron"}};

enum class Precision { fp32, bf16, fp16, fp8 };
inline constexpr EnumNames<Precision, 4> kPrecisionNames{{"fp32", "bf16", "fp16", "fp8"}};

enum class Optimizer { adam, adamw, sgd, sgd_momentum, adafactor };
inline constexpr EnumNames<Optimizer, 5> kOptimizerNames{
    {"adam", "adamw", "sgd", "sgd_momentum", "adafactor"}};

enum class PipelineSchedule { one_f_one_b, interleaved, gpipe };
inline constexpr EnumNames<PipelineSchedule, 3> kPipelineScheduleNames{{"1f1b", "interleaved", "gpipe"}};

enum class ShardingStrategy { ddp, zero, fsdp };
inline constexpr EnumNames<ShardingStrategy, 3> kShardingStrategyNames{{"ddp", "zero", "fsdp"}};

enum class FsdpMode { full_shard, shard_grad_op, hybrid_shard, no_shard };
inline constexpr EnumNames<FsdpMode, 4> kFsdpModeNames{
    {"full_shard", "shard_grad_op", "hybrid_shard", "no_shard"}};

enum class FsdpWrap { transformer_block, whole_model };
inline constexpr EnumNames<FsdpWrap, 2> kFsdpWrapNames{{"transformer_block", "whole_model"}};

enum class OffloadTarget { none, cpu, nvme };
inline constexpr EnumNames<OffloadTarget, 3> kOffloadNames{{"none", "cpu", "nvme"}};

enum class Recompute { none, selective, full };
inline constexpr EnumNames<Recompute, 3> kRecomputeNames{{"none", "selective", "full"}};

enum class AttentionImpl { flash, explicit_scores };
inline constexpr EnumNames<AttentionImpl, 2> kAttentionNames{{"flash", "explicit"}};

enum class FineTuning { full, lora, qlora };
inline constexpr EnumNames<FineTuning, 3> kFineTuningNames{{"full", "lora", "qlora"}};

enum class LoraTarget { q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj };
inline constexpr EnumNames<LoraTarget, 7> kLoraTargetNames{
    {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}};

enum class Engine { vllm };
inline constexpr EnumNames<Engine, 1> kEngineNames{{"vllm"}};

enum class Preemption { recompute, swap };
inline constexpr EnumNames<Preemption, 2> kPreemptionNames{{"recompute", "swap"}};

enum class Router { round_robin, least_outstanding, least_kv };
inline constexpr EnumNames<Router, 3> kRouterNames{{"round_robin", "least_outstanding", "least_kv"}};

/// fp32: unquantised single precision, as the host device computes (OpenBLAS sgemm).
enum class WeightDtype { bf16, fp16, fp8, int8, awq_int4, fp32 };
inline constexpr EnumNames<WeightDtype, 6> kWeightDtypeNames{{"bf16", "fp16", "fp8", "int8", "awq_int4", "fp32"}};

enum class KvDtype { bf16, fp16, fp8 };
inline constexpr EnumNames<KvDtype, 3> kKvDtypeNames{{"bf16", "fp16", "fp8"}};

enum class TierPolicy { lru, lfu };
inline constexpr EnumNames<TierPolicy, 2> kTierPolicyNames{{"lru", "lfu"}};

enum class Arrival { poisson, gamma, constant, closed_loop };
inline constexpr EnumNames<Arrival, 4> kArrivalNames{{"poisson", "gamma", "constant", "closed_loop"}};

enum class LengthDist { fixed, uniform, normal, lognormal, empirical };
inline constexpr EnumNames<LengthDist, 5> kLengthDistNames{
    {"fixed", "uniform", "normal", "lognormal", "empirical"}};

enum class Fidelity { full, fast, automatic };
inline constexpr EnumNames<Fidelity, 3> kFidelityNames{{"full", "fast", "auto"}};

}  // namespace memtwin
