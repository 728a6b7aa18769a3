// The cluster section of the scenario schema: GPUs, fabrics, host, NVMe, runtime, efficiencies,
// measured kernels and the collective model's settings.
#include "models/schema_table.h"

#include "models/kv/kv_method.h"
#include "models/scenario.h"

namespace memtwin::schema_detail {

namespace {
// Physical floors for rates: below them a step would take longer than can be simulated (SimGrid's
// clock runs to infinity or its sharing solver loses precision), so such values are refused where
// they are written, like any out-of-range value.
constexpr double kMinBandwidth = 1e6;  // 1 MB/s
constexpr double kMinFlops = 1e9;      // 1 GFLOP/s
constexpr double kMinFraction = 1e-4;  // achieved fractions of a peak
constexpr double kMinPerSecond = 1e3;  // elements or parameters per second
}  // namespace


void declare_cluster(Table& t) {
  t.add("cluster.nodes", K::integer, "1", "number of nodes").at_least(1);
  t.add("cluster.gpus_per_node", K::integer, "8", "GPUs in each node").at_least(1);
  t.add("cluster.gpu.preset", K::preset, none, "GPU catalog name (`memtwin gpus`); `gpu: NAME` is short for this");
  t.add("cluster.gpu.memory", K::bytes, none, "memory per GPU as CUDA reports it").above(0).derived("from the preset");
  t.add("cluster.gpu.hbm_bandwidth", K::bandwidth, none, "peak memory bandwidth").at_least(kMinBandwidth).derived("from the preset");
  for (const char* dtype : {"fp32", "bf16", "fp16", "fp8"}) {
    t.add(std::string("cluster.gpu.flops.") + dtype, K::flops_rate, none,
          std::string("dense peak ") + dtype + " tensor throughput (no sparsity)")
        .at_least(kMinFlops).derived("from the preset; absent means unsupported");
  }
  t.add("cluster.gpu.nvlink_bandwidth", K::bandwidth, none, "NVLink bandwidth per GPU, per direction")
      .at_least(kMinBandwidth).derived("from the preset; absent means no NVLink");
  t.add("cluster.gpu.pcie_bandwidth", K::bandwidth, none, "PCIe bandwidth per GPU, per direction").at_least(kMinBandwidth).derived("from the preset");
  t.add("cluster.gpu.sms", K::integer, none,
        "streaming multiprocessors: GEMM tiles run in waves of this many (wave quantisation)")
      .at_least(1).derived("from the preset; absent means GEMMs are not split into waves");
  t.add("cluster.gpu.generation", K::choice, none,
        "architecture generation: picks NCCL's per-generation constants (ada is compute capability 8.9, NCCL's "
        "Ampere class); cpu is the host device")
      .choices(names(kGpuGenerationNames)).derived("from the preset; none for a custom GPU");
  t.add("cluster.gpu.price_per_hour", K::number, none, "typical price in USD per GPU-hour").at_least(0).derived("from the preset");
  t.add("cluster.gpu.source", K::text, "", "where the numbers come from");

  t.add("cluster.intra_node.fabric", K::choice, none, "how GPUs inside a node are connected")
      .choices(names(kFabricNames)).derived("nvswitch when the GPU has NVLink, else pcie");
  t.add("cluster.intra_node.bandwidth", K::bandwidth, none, "per GPU, per direction").at_least(kMinBandwidth)
      .derived("the GPU's NVLink bandwidth, else its PCIe bandwidth");
  t.add("cluster.intra_node.latency", K::duration, "2us", "per message").at_least(0);

  t.add("cluster.inter_node.nics_per_node", K::integer, none, "NICs per node (one per GPU: rail-optimised)")
      .at_least(1).derived("gpus_per_node");
  t.add("cluster.inter_node.nic_bandwidth", K::bandwidth, "400Gbps", "per NIC, per direction").at_least(kMinBandwidth);
  t.add("cluster.inter_node.latency", K::duration, "5us", "per message").at_least(0);
  t.add("cluster.inter_node.topology", K::choice, "fat-tree",
        "fabric between nodes: fat-tree (each node's uplink to a non-blocking core) or leaf-spine "
        "(nodes_per_leaf nodes on each leaf switch, leaves joined by a spine)").choices(names(kTopologyNames));
  t.add("cluster.inter_node.oversubscription", K::number, "1",
        "uplink oversubscription (1 = non-blocking): a node's uplink with fat-tree, a leaf's uplink to the spine with leaf-spine")
      .at_least(1);
  t.add("cluster.inter_node.nodes_per_leaf", K::integer, none, "leaf-spine: nodes on each leaf switch")
      .at_least(1).derived("required with topology leaf-spine");

  t.add("cluster.host.memory", K::bytes, "2TiB", "host DRAM per node").above(0);
  t.add("cluster.host.pcie_bandwidth", K::bandwidth, none, "GPU to host DRAM, per GPU, per direction")
      .at_least(kMinBandwidth).derived("the GPU's PCIe bandwidth");
  t.add("cluster.host.cpu_adam_params_per_s", K::number, "2e9",
        "parameters one node's CPUs update per second with an offloaded Adam (DeepSpeed CPU-Adam class)").at_least(kMinPerSecond);

  t.add("cluster.nvme.capacity", K::bytes, none, "NVMe capacity per node; the nvme section is optional").above(0);
  t.add("cluster.nvme.read_bandwidth", K::bandwidth, "7GB/s", "per node (PCIe Gen4 SSD)").at_least(kMinBandwidth);
  t.add("cluster.nvme.write_bandwidth", K::bandwidth, "5GB/s", "per node (PCIe Gen4 SSD)").at_least(kMinBandwidth);
  t.add("cluster.nvme.latency", K::duration, "80us", "per request").at_least(0);

  t.add("cluster.runtime.cuda_context", K::bytes, "595MiB",
        "device memory the CUDA context, kernel images and cuBLAS take per GPU before any tensor (measured: H200, CUDA 13)")
      .at_least(0);
  t.add("cluster.runtime.nccl_buffers", K::bytes, "578MiB",
        "device memory NCCL takes per GPU for each communicator (measured: one-rank communicator, H200, CUDA 13)")
      .at_least(0);
  t.add("cluster.runtime.framework_overhead", K::bytes, "256MiB",
        "framework allocations outside the model (RNG state, streams, small caches)").at_least(0);
  t.add("cluster.runtime.cuda_graph_pool", K::bytes, "512MiB",
        "serving: memory CUDA graphs of the decode batch sizes take (vLLM logs 0.3-1 GiB)").at_least(0);
  t.add("cluster.runtime.allocator_waste", K::number, "0.1",
        "caching-allocator waste on transient tensors: reserved / allocated - 1 (PyTorch: 0.05-0.15)")
      .at_least(0).at_most(1);
  t.add("cluster.runtime.eager_layer_overhead", K::duration, "50us",
        "serving with inference.serving.cuda_graphs: false: host time per transformer layer and iteration the GPU "
        "waits for (Python dispatch, kernel launches); fitted to TinyChat's fp16 decode: ~108us on an A100 server, "
        "~25us on an RTX 4090 desktop")
      .at_least(0);
  t.add("cluster.efficiency.preset", K::preset, none,
        "a software stack's efficiencies on a GPU generation (scenarios/presets/efficiency.yaml, e.g. "
        "pytorch-2023-hopper); `efficiency: NAME` is short for this; keys given here replace the entry's");
  t.add("cluster.efficiency.generation", K::choice, none, "the GPU generation a preset's efficiencies were measured on")
      .choices(names(kGpuGenerationNames)).derived("from the preset; must be cluster.gpu.generation");
  t.add("cluster.efficiency.source", K::text, "", "where the efficiencies come from");
  t.add("cluster.efficiency.gemm", K::number, "0.81",
        "achieved fraction of peak FLOP/s on large GEMMs (measured: cuBLAS bf16 on an H200)").at_least(kMinFraction).at_most(1);
  t.add("cluster.efficiency.attention", K::number, "0.6",
        "achieved fraction of peak FLOP/s in fused attention (FlashAttention-2 class)").at_least(kMinFraction).at_most(1);
  t.add("cluster.efficiency.memory", K::number, "0.89",
        "achieved fraction of peak HBM bandwidth in memory-bound kernels (measured: device copy on an H200)")
      .at_least(kMinFraction).at_most(1);
  t.add("cluster.efficiency.collectives", K::number, "1",
        "achieved fraction of the collective model's bandwidth (NCCL's tuning model, or a measured nccl-tests "
        "fit): 1 for a stack whose collectives run as NCCL's model says; an older stack's entry in "
        "scenarios/presets/efficiency.yaml may be fitted below it")
      .at_least(kMinFraction).at_most(1);
  t.add("cluster.efficiency.gemm_tile_rows", K::integer, "128",
        "output rows of one thread block's tile in a large GEMM (cuBLAS/CUTLASS 16-bit kernels on Ampere and Hopper)")
      .at_least(1);
  t.add("cluster.efficiency.gemm_tile_columns", K::integer, "256",
        "output columns of that tile: with `gpu.sms`, a GEMM whose last wave of tiles leaves SMs idle reaches that "
        "much less of `gemm` (either orientation, whichever fills the waves better)")
      .at_least(1);
  t.add("cluster.efficiency.gemm_overlap", K::number, "1",
        "serving GEMMs: how far weight reads overlap the arithmetic (1: the longer of the two, as GPUs; 0: their sum, "
        "as a CPU core that packs weights first)")
      .at_least(0).at_most(1);
  t.add("cluster.efficiency.gemm_memory", K::number, none,
        "achieved fraction of peak memory bandwidth when a GEMM is memory-bound (decode: weights read by a few rows)")
      .at_least(kMinFraction).at_most(1).derived("efficiency.memory");
  for (const KvKernelFormat& format : kv_kernel_formats()) {
    t.add("cluster.kernels.decode_attention." + format.name, K::number, none,
          "measured decode-attention kernel throughput over a " + format.cache +
              ": cached K and V elements per second per GPU (memtwin calibrate)")
        .at_least(kMinPerSecond).derived("the roofline of cached bytes and dequantisation");
    if (!format.write_kernel) continue;
    t.add("cluster.kernels.kv_write." + format.name, K::number, none,
          "measured paged-cache write (quantise and scatter) throughput into a " + format.name +
              " KV cache: K and V elements per second per GPU (memtwin calibrate)")
        .at_least(kMinPerSecond).derived("the roofline of the written bytes");
  }
  t.add("cluster.kernels.prompt_scoring", K::number, none,
        "measured prompt scoring of the methods that accumulate attention scores (" +
            kv_method_names(KvSelection::accumulated_scores) +
            "; the prompt's attention probabilities summed per key): causal query-key pairs x query heads per second "
            "per GPU, one layer (memtwin calibrate)")
      .at_least(kMinPerSecond).derived("half the prefill attention's roofline");
  t.add("cluster.collectives.library", K::choice, none,
        "how collectives are costed: nccl (NCCL's tuning model, algorithm and protocol per call) or ring (one "
        "link latency per ring step, the link bandwidth)")
      .choices(names(kCollectiveLibraryNames)).derived("nccl when gpu.generation is a GPU's, else ring");
  t.add("cluster.collectives.algorithms", K::choice_list, none,
        "the algorithms NCCL may choose (NCCL_ALGO); NVLS needs NVSwitch on Hopper or later")
      .choices(names(kCollectiveAlgorithmNames)).derived("all of them, where they apply");
  t.add("cluster.collectives.protocols", K::choice_list, none,
        "the protocols NCCL may choose (NCCL_PROTO); LL128 runs only over NVLink")
      .choices(names(kCollectiveProtocolNames)).derived("all of them, where they apply");
  t.add("cluster.collectives.channels", K::integer, none,
        "NCCL channels per communicator (its per-channel bandwidth caps apply to each)")
      .at_least(1).at_most(64).derived("2 per GPU of a node, 2 to 32 (NCCL's rings on NVSwitch nodes)");
  t.add("cluster.collectives.intra_node_efficiency", K::number, none,
        "usable fraction of the intra-node bandwidth for collectives (NCCL's per-link NVLink figure over the "
        "datasheet's: 20 of 25 GB/s Volta/Ampere, 20.6 Hopper, 40.1 of 50 Blackwell; PCIe 12 of 16 GB/s)")
      .at_least(kMinFraction).at_most(1).derived("by generation and fabric, 1 for the ring library");
  t.add("cluster.collectives.inter_node_efficiency", K::number, none,
        "usable fraction of each NIC's bandwidth (NCCL's fastest inter-node channel speed, 24 of 25 GB/s for "
        "HDR, 48 of 50 for NDR)")
      .at_least(kMinFraction).at_most(1).derived("0.96, 1 for the ring library");
  t.add("cluster.collectives.net_overhead", K::duration, "1us",
        "NCCL's per-step network post overhead (NCCL_NET_OVERHEAD: 1us Intel hosts, 2us AMD)")
      .at_least(0);
  t.add("cluster.calibration", K::path, none, "calibration table written by `memtwin calibrate`");
  t.add("cluster.price_per_gpu_hour", K::number, none, "USD per GPU-hour for planning").at_least(0)
      .derived("the GPU preset's price");
}

}  // namespace memtwin::schema_detail
