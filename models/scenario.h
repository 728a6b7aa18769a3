#pragma once
// The Scenario: plain values with units already converted. It is built only by the loader
// (scenario_loader.h) from a validated YAML document; nothing downstream ever sees YAML.
// Contract: every field holds a valid value (the loader rejected anything else), and optional
// fields are empty exactly when the user gave no value and the schema defines no default.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/enums.h"
#include "models/kv/kv_method_id.h"
#include "models/units.h"

namespace memtwin {

struct GpuSpec {
  std::string name;                     ///< catalog name, or "custom"
  Bytes memory;                         ///< HBM capacity per GPU
  BytesPerSec hbm_bandwidth;            ///< peak HBM bandwidth
  std::map<Precision, FlopsPerSec> flops;  ///< dense peak per dtype (no sparsity)
  std::optional<BytesPerSec> nvlink_bandwidth;  ///< per GPU, per direction; empty: no NVLink
  BytesPerSec pcie_bandwidth;           ///< per GPU, per direction
  std::optional<int> sms;               ///< streaming multiprocessors; empty: GEMMs are not split into waves
  std::optional<GpuGeneration> generation;  ///< empty: not known (collectives then use a plain ring)
  std::optional<double> price_per_hour; ///< USD per GPU-hour, typical on-demand
  std::string source;                   ///< where the numbers come from
};

struct IntraNodeFabric {
  Fabric fabric = Fabric::nvswitch;
  BytesPerSec bandwidth;  ///< per GPU, per direction
  Seconds latency;
};

struct InterNodeFabric {
  int nics_per_node = 8;
  BytesPerSec nic_bandwidth;  ///< per NIC, per direction
  Seconds latency;
  /// fat_tree: each node's uplink to a non-blocking core carries its NICs' bandwidth over
  /// `oversubscription`. leaf_spine: `nodes_per_leaf` nodes hang off each leaf switch at their
  /// NICs' full bandwidth, and each leaf's uplink to the spine carries its nodes' NIC bandwidth
  /// over `oversubscription`.
  Topology topology = Topology::fat_tree;
  double oversubscription = 1.0;  ///< >= 1; 2 means the uplinks carry half the bandwidth below them
  int nodes_per_leaf = 0;         ///< leaf_spine only: nodes on each leaf switch (the last leaf may have fewer)
  [[nodiscard]] bool leaf_spine() const { return topology == Topology::leaf_spine; }
  /// The leaf switch of a node (leaf_spine), or the node itself (fat_tree: every node its own leaf).
  [[nodiscard]] int leaf_of(int node) const { return leaf_spine() ? node / nodes_per_leaf : node; }
  /// What a node's own uplink divides its NICs' bandwidth by: the oversubscription, unless a leaf
  /// level above takes it.
  [[nodiscard]] double node_uplink_oversubscription() const { return leaf_spine() ? 1.0 : oversubscription; }
};

struct HostSpec {
  Bytes memory;                ///< DRAM per node
  BytesPerSec pcie_bandwidth;  ///< per GPU, per direction, between GPU and host DRAM
  double cpu_adam_params_per_s = 0;  ///< parameters one node's CPUs update per second (offloaded Adam)
};

struct NvmeSpec {
  Bytes capacity;  ///< per node
  BytesPerSec read_bandwidth;
  BytesPerSec write_bandwidth;
  Seconds latency;
};

/// Device memory outside the model's tensors (the `runtime` and `fragmentation` of a breakdown).
struct RuntimeOverheads {
  Bytes cuda_context;        ///< context, kernel images, cuBLAS workspace
  Bytes nccl_buffers;        ///< per communicator
  Bytes framework_overhead;  ///< framework's own allocations
  Bytes cuda_graph_pool;     ///< serving: captured CUDA graphs
  double allocator_waste = 0.1;  ///< reserved / allocated - 1 on transient tensors
  /// Serving without CUDA graphs: host time per transformer layer and iteration that the GPU waits
  /// for (Python dispatch and the launches of kernels shorter than their launch).
  Seconds eager_layer_overhead{50e-6};
};

/// Achieved fractions of peak, per op class: the roofline's calibration (a table from
/// `memtwin calibrate` replaces them later).
struct Efficiency {
  double gemm = 0.81;
  double attention = 0.6;
  double memory = 0.89;
  /// Memory-bound GEMMs (a decode batch's few rows against the weights): some BLAS libraries pack
  /// the weights first and reach less of the bandwidth than a stream does. Unset: `memory`.
  double gemm_memory = 0.89;
  /// How far a GEMM overlaps reading its weights with its arithmetic: 1, the longer of the two
  /// (GPUs stream operands while computing); 0, their sum (a CPU core packs the weights, then
  /// computes). Serving iterations' GEMMs; `memtwin calibrate` measures it.
  double gemm_overlap = 1.0;
  /// The fraction of the collective model's bandwidth a software stack's collectives reach (1:
  /// what NCCL's tuning model, or a measured nccl-tests fit, gives). A stack fitted below it spends
  /// the difference with its links idle (per-call and per-step overheads the model does not have),
  /// so the shortfall is time, not traffic: CollectiveModel adds it to a collective's latency.
  double collectives = 1.0;
  /// GEMM efficiency by the number of rows (tokens) multiplied, measured by `memtwin calibrate`:
  /// small batches reach less of the peak. Empty: `gemm` for every shape.
  std::map<int, double> gemm_by_rows;
  /// The GEMM efficiency for `rows` rows: interpolated in log2(rows) between measured points,
  /// the end points beyond them; `gemm` when there is no table.
  [[nodiscard]] double gemm_at(double rows) const;
  /// A weight GEMM from memory at a few rows, measured whole by `memtwin calibrate`: its time is the
  /// weights' bytes / (memory bandwidth x this fraction), arithmetic included (per weight byte it is
  /// 2 x rows FLOPs whatever the shape). Kernels change with the rows (matrix-vector at one row,
  /// packed tiles from two), so a line through reads + arithmetic misses some row counts by a
  /// quarter. Empty: not measured.
  std::map<int, double> gemm_memory_by_rows;
  /// That fraction at `rows` (interpolated in log2(rows)); 0 when there is no table or `rows` is
  /// beyond its last point.
  [[nodiscard]] double gemm_memory_at(double rows) const;
  /// The same measurement per weight shape (inner features, outputs): at one row a BLAS library may
  /// run a narrow matrix as a matrix-vector product at twice the rate of a wide one, and of itself
  /// at two rows, so a batch's GEMMs are priced each by the measured shape nearest its own. Empty:
  /// not measured (gemm_memory_by_rows, else the roofline).
  std::map<std::pair<std::int64_t, std::int64_t>, std::map<int, double>> gemm_memory_by_shape;
  /// The fraction for a GEMM of this shape at `rows` rows: the table of the measured shape nearest
  /// in log(inner) and log(outputs), interpolated in log2(rows); 0 when there is none or `rows` is
  /// beyond its last point.
  [[nodiscard]] double gemm_memory_at(double rows, std::int64_t inner, std::int64_t outputs) const;
  /// Output tile of one thread block in a large GEMM (rows x columns).
  int tile_rows = 128, tile_columns = 256;
  /// Wave quantisation: a GEMM's output is cut into tiles that run `sms` at a time; when the last
  /// wave is partly empty the GPU idles for the rest of it. The fraction of the waves' slots that
  /// hold a tile (1 for a GEMM that fills its waves), taking the better of the tile's two
  /// orientations as cuBLAS's heuristics would. 1 when `sms` is 0 (not known).
  [[nodiscard]] double wave_utilization(std::int64_t m, std::int64_t n, int sms) const;
};

/// A collective measured on a real cluster (nccl-tests output fitted by `memtwin calibrate
/// --nccl-tests`): time = latency + bytes x bus factor / bus_bandwidth for that kind and group.
struct MeasuredCollective {
  std::string collective;  ///< "all_reduce", "all_gather", "reduce_scatter", "all_to_all"
  int ranks = 0, nodes = 1;
  Seconds latency;
  BytesPerSec bus_bandwidth;
  std::string source;
};

/// What the collective cost model (models/comm/collective_model.h) is told about the cluster
/// beyond its links. Every default is NCCL's; see docs/collectives.md for the sources.
struct CollectiveSettings {
  CollectiveLibrary library = CollectiveLibrary::nccl;
  std::vector<CollectiveAlgorithm> algorithms;  ///< those NCCL may pick (NCCL_ALGO); all it has by default
  std::vector<CollectiveProtocol> protocols;    ///< those NCCL may pick (NCCL_PROTO)
  int channels = 16;                            ///< NCCL channels (rings/trees) per communicator
  double intra_node_efficiency = 1.0;  ///< usable / nominal intra-node link bandwidth
  double inter_node_efficiency = 1.0;  ///< usable / nominal NIC bandwidth
  Seconds net_overhead{1e-6};          ///< NCCL's per-step network post overhead (NCCL_NET_OVERHEAD)
  std::vector<MeasuredCollective> measured;  ///< from a calibration file; replace the model where they apply
};

struct Cluster {
  int nodes = 1;
  int gpus_per_node = 1;
  GpuSpec gpu;
  IntraNodeFabric intra_node;
  InterNodeFabric inter_node;
  HostSpec host;
  std::optional<NvmeSpec> nvme;
  RuntimeOverheads runtime;
  Efficiency efficiency;
  CollectiveSettings collectives;
  /// Measured decode-attention kernel throughput by KV format ("fp16", "int4", ...): cached K and
  /// V elements per second per GPU. Formats without a figure use the roofline.
  std::map<std::string, double> decode_attention_elements_per_s;
  /// The same measured at several working sets (bytes of cached KV the batch reads -> rate), from
  /// a calibration file: caches make small batches faster. Preferred over the single figure.
  std::map<std::string, std::map<double, double>> decode_attention_by_bytes;
  /// Measured paged-cache writes of new tokens' K and V by KV format, elements per second per GPU.
  std::map<std::string, double> kv_write_elements_per_s;
  /// Measured prompt scoring of the methods that accumulate attention scores: causal query-key
  /// pairs x query heads per second per GPU, one layer (0: half the prefill attention's roofline).
  double prompt_scoring_pairs_per_s = 0;
  std::optional<std::string> calibration;  ///< path to a calibration YAML
  std::optional<double> price_per_gpu_hour;
  [[nodiscard]] int total_gpus() const { return nodes * gpus_per_node; }
};

/// A transformer architecture, or only a parameter count (then `architecture_known` is false and
/// only model-state estimates are possible).
struct ModelSpec {
  std::string name;
  bool architecture_known = true;
  double parameters_override = 0;  ///< > 0 when the user gave `parameters:` alone
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int intermediate = 0;
  int vocab = 0;
  MlpKind mlp = MlpKind::swiglu;
  bool tied_embeddings = false;
  int experts = 1;
  int experts_per_token = 1;
  NormKind norm = NormKind::rmsnorm;
  BiasKind bias = BiasKind::none;
  PositionEmbedding position = PositionEmbedding::rope;
  int max_position_embeddings = 0;
  bool dropout = false;  ///< training stores dropout masks
  std::string source;
};

struct Parallelism {
  int tensor = 1;
  bool sequence_parallel = false;
  int pipeline = 1;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  int interleave = 1;
  int expert = 1;
  /// Context parallelism: each sequence split over this many ranks (Megatron-Core, Llama 3), which
  /// hold the same weights and gather each other's keys and values for attention.
  int context = 1;
};

/// DeepSpeed ZeRO knobs (element counts, as DeepSpeed's config takes them).
struct DeepSpeedBuckets {
  double reduce_bucket_size = 5e8;
  double allgather_bucket_size = 5e8;
  double prefetch_bucket_size = 5e7;
  double param_persistence_threshold = 1e5;
  double max_live_parameters = 1e9;
  double sub_group_size = 1e9;
};

struct Sharding {
  ShardingStrategy strategy = ShardingStrategy::ddp;
  int zero_stage = 0;               ///< 0..3, meaningful for strategy zero
  FsdpMode fsdp_mode = FsdpMode::full_shard;
  int shard_group = 0;              ///< hybrid_shard: GPUs per shard group
  FsdpWrap wrap = FsdpWrap::transformer_block;
  bool limit_all_gathers = true;
  Bytes ddp_bucket;                 ///< PyTorch DDP gradient bucket
  DeepSpeedBuckets deepspeed;
};

struct Offload {
  OffloadTarget optimizer = OffloadTarget::none;
  OffloadTarget parameters = OffloadTarget::none;
  bool pin_memory = true;
};

struct FineTuningSpec {
  FineTuning method = FineTuning::full;
  int lora_rank = 16;
  std::vector<LoraTarget> lora_targets;
  bool double_quant = true;
};

struct Training {
  Framework framework = Framework::ideal;
  int global_batch = 1;
  int micro_batch = 1;
  int seq_len = 2048;
  double target_tokens = 0;  ///< > 0: tokens to train on, for planning
  Precision precision = Precision::bf16;
  Optimizer optimizer = Optimizer::adamw;
  Parallelism parallelism;
  Sharding sharding;
  Offload offload;
  Recompute recompute = Recompute::none;
  AttentionImpl attention = AttentionImpl::flash;
  FineTuningSpec fine_tuning;
};

/// What a serving instance does with a request: all of it, or one side of prefill/decode
/// disaggregation (its prefill, handing the KV cache on; or its decode, from a KV cache received).
enum class InstanceRole { colocated, prefill, decode };

struct ServingSpec {
  int replicas = 1;
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  /// vLLM's enable_expert_parallel: a MoE model's experts are spread whole over every GPU of the
  /// replicas (data-parallel attention), which step together; off, each replica holds all experts.
  bool expert_parallel = false;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  int max_model_len = 4096;
  int block_size = 16;
  double gpu_memory_utilization = 0.9;
  bool chunked_prefill = true;
  bool prefix_caching = false;
  Preemption preemption = Preemption::recompute;
  bool cuda_graphs = true;
  Bytes swap_space;  ///< host memory per GPU reserved for swapped-out KV blocks
  Router router = Router::round_robin;
  /// Derived, not a key: the side an instance scenario of a disaggregated deployment serves
  /// (models/serving/disaggregation.h).
  InstanceRole role = InstanceRole::colocated;
  /// GPUs a MoE layer's experts are spread over: replicas x tensor parallel with expert
  /// parallelism (vLLM's EP size), else 1 (each replica's tensor ranks split every expert).
  [[nodiscard]] int expert_parallel_size() const { return expert_parallel ? replicas * tensor_parallel : 1; }
};

/// inference.kv_cache.compression: the method and the parameters its descriptor reads (models/kv/kv_method.h).
struct CompressionSpec {
  KvCompression method = KvCompression::none;
  int bits = 2;
  int group_size = 32;
  int residual = 128;
  double heavy_ratio = 0.1;
  double recent_ratio = 0.1;
  int sinks = 4;
  int window = 0;     ///< the recent window, or the observation window of a prompt-voting method
  int budget = 2048;  ///< tokens kept per head (mean over layers) by a prompt-voting method
  int pooling_kernel = 7;
  double beta = 20;   ///< ratio between the shallowest and deepest layer budgets (models/kv says which methods read each)
};

/// What `memtwin quality` measured of this scenario's KV method on a real model
/// (inference.kv_cache.quality: the entry of its document that matches the method, its bits, and
/// for a method that keeps fewer tokens the nearest budget).
struct KvQualityMeasured {
  std::string file, model, method, variant;
  double budget = 1;           ///< the share of the prompt the scenario's method keeps (1: every token)
  double measured_budget = 1;  ///< the share the measurement kept
  double perplexity = 0, perplexity_delta = 0, kl = 0, token_agreement = 0;
  double retrieval = -1;  ///< share of retrieval probes answered; -1: none were run
};

struct KvCacheSpec {
  KvDtype dtype = KvDtype::bf16;
  std::optional<Bytes> memory;  ///< explicit KV pool per GPU instead of the engine's rule
  CompressionSpec compression;
  std::optional<KvQualityMeasured> quality;
};

struct TierSpec {
  std::optional<Bytes> host_memory;
  std::optional<Bytes> nvme;
  TierPolicy policy = TierPolicy::lru;
  bool proactive_offload = false;  ///< copy idle cached prefixes to host memory before they are evicted
};

struct LengthDistribution {
  LengthDist dist = LengthDist::fixed;
  double value = 0, mean = 0, std = 0, min = 1, max = 0;  ///< token counts; max 0 = unbounded
  std::string file;  ///< empirical: one length per line
};

struct WorkloadSpec {
  Arrival arrival = Arrival::poisson;
  double rate_per_s = 0;
  double cv = 2;
  int concurrency = 0;
  std::int64_t requests = 1000;
  LengthDistribution prompt_tokens;
  LengthDistribution output_tokens;
  std::string trace;
  /// inference.workload.lengths: a file of (prompt, output) token pairs, one drawn per request
  /// (both from the same row, so their correlation is kept); empty: the two distributions.
  std::string length_pairs;
  int shared_prefix_groups = 0;
  int shared_prefix_tokens = 0;
};

struct SloSpec {
  std::optional<Seconds> ttft_p99;
  std::optional<Seconds> tpot_p99;
  std::optional<Seconds> e2e_p99;
};

/// inference.disaggregation: prefill and decode on separate instances (DistServe, Splitwise,
/// vLLM's disaggregated prefill), each with its replicas and tensor parallelism, the prefill
/// instances first in rank order. A request's KV cache moves from its prefill instance to a
/// decode instance over the cluster's links when its prefill completes.
struct Disaggregation {
  int prefill_replicas = 1, prefill_tensor_parallel = 1;
  int decode_replicas = 1, decode_tensor_parallel = 1;
  bool layerwise_transfer = false;  ///< KV streamed layer by layer while the prefill runs
  /// A side on a GPU type of its own (`<side>.gpu` other than cluster.gpu): the cluster's nodes of
  /// that type (builders.h, cluster_on_gpu). Empty: the side runs on cluster.gpu.
  std::optional<Cluster> prefill_cluster, decode_cluster;
  [[nodiscard]] int prefill_gpus() const { return prefill_replicas * prefill_tensor_parallel; }
  [[nodiscard]] int decode_gpus() const { return decode_replicas * decode_tensor_parallel; }
  [[nodiscard]] int gpus() const { return prefill_gpus() + decode_gpus(); }
};

struct Inference {
  Engine engine = Engine::vllm;
  ServingSpec serving;
  std::optional<Disaggregation> disaggregation;
  WeightDtype weight_dtype = WeightDtype::bf16;
  int weight_group_size = 128;
  KvCacheSpec kv_cache;
  TierSpec tiers;
  WorkloadSpec workload;
  SloSpec slo;
  /// The GPUs the deployment serves on: both sides' instances with disaggregation, else the replicas'.
  [[nodiscard]] int gpus() const {
    return disaggregation ? disaggregation->gpus() : serving.replicas * serving.tensor_parallel * serving.pipeline_parallel;
  }
};

struct SimulationSpec {
  Fidelity fidelity = Fidelity::full;
  Seconds time_limit{600};  ///< a simulation estimated to take longer is refused (sim/resource_check.h)
  /// A collective alone on its links runs as the few of its flows that stand for the rest, with the
  /// same times (sim/lone_collectives.h); false runs every flow. Not a scenario key (results do not
  /// depend on it): `memtwin run --every-flow` sets it.
  bool merge_lone_collectives = true;
};

struct Scenario;

/// One of several jobs on a shared cluster (`jobs:`): a training scenario of its own, placed on the
/// shared cluster's GPUs (its cluster.nodes nodes from first_node, its cluster.gpus_per_node GPUs of
/// each from first_gpu), on the shared cluster's links.
struct JobSpec {
  std::string name;
  std::shared_ptr<const Scenario> scenario;
  int first_node = 0, first_gpu = 0;
  /// The shared cluster's GPU (node x gpus_per_node + GPU) that each of the job's ranks runs on.
  [[nodiscard]] std::vector<int> placement(const Cluster& shared) const;
};

struct Scenario {
  std::string name;
  std::string description;
  std::uint64_t seed = 1;
  std::string source_file;  ///< where it was loaded from ("<embedded>" for built-ins)
  Cluster cluster;
  ModelSpec model;
  std::optional<Training> training;
  std::optional<Inference> inference;
  /// Several jobs on this cluster (then no model or workload of its own): simulated together.
  std::vector<JobSpec> jobs;
  SimulationSpec simulation;
};

/// "training", "inference" or "jobs": what a scenario runs.
inline const char* workload_name(const Scenario& s) { return !s.jobs.empty() ? "jobs" : s.training ? "training" : "inference"; }

inline std::vector<int> JobSpec::placement(const Cluster& shared) const {
  const Cluster& own = scenario->cluster;
  std::vector<int> gpus;
  for (int n = 0; n < own.nodes; ++n)
    for (int g = 0; g < own.gpus_per_node; ++g) gpus.push_back((first_node + n) * shared.gpus_per_node + first_gpu + g);
  return gpus;
}

}  // namespace memtwin
