#include "models/scenario/builders.h"
#include "models/scenario/calibration.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "models/kv/kv_method.h"

namespace memtwin {

double Efficiency::gemm_at(double rows) const {
  if (gemm_by_rows.empty()) return gemm;
  auto above = gemm_by_rows.lower_bound(static_cast<int>(std::ceil(rows)));
  if (above == gemm_by_rows.begin()) return above->second;
  if (above == gemm_by_rows.end()) return std::prev(above)->second;
  const auto below = std::prev(above);
  const double x0 = std::log2(below->first), x1 = std::log2(above->first), x = std::log2(std::max(rows, 1.0));
  return below->second + (above->second - below->second) * (x - x0) / (x1 - x0);
}

namespace {

// A measured table by rows, interpolated in log2(rows); 0 past its last point (not measured there).
double by_rows_within(const std::map<int, double>& table, double rows) {
  if (table.empty() || rows > table.rbegin()->first) return 0;
  auto above = table.lower_bound(static_cast<int>(std::ceil(rows)));
  if (above == table.begin()) return above->second;
  const auto below = std::prev(above);
  const double x0 = std::log2(below->first), x1 = std::log2(above->first), x = std::log2(std::max(rows, 1.0));
  return below->second + (above->second - below->second) * (x - x0) / (x1 - x0);
}

}  // namespace

double Efficiency::gemm_memory_at(double rows) const { return by_rows_within(gemm_memory_by_rows, rows); }

double Efficiency::gemm_memory_at(double rows, std::int64_t inner, std::int64_t outputs) const {
  const std::map<int, double>* nearest = nullptr;
  double best = 0;
  for (const auto& [shape, table] : gemm_memory_by_shape) {
    const double distance = std::abs(std::log(static_cast<double>(shape.first) / static_cast<double>(inner))) +
                            std::abs(std::log(static_cast<double>(shape.second) / static_cast<double>(outputs)));
    if (!nearest || distance < best) nearest = &table, best = distance;
  }
  return nearest ? by_rows_within(*nearest, rows) : 0.0;
}

double Efficiency::wave_utilization(std::int64_t m, std::int64_t n, int sms) const {
  if (sms <= 0 || m <= 0 || n <= 0) return 1.0;
  auto utilization = [&](std::int64_t tm, std::int64_t tn) {
    const std::int64_t tiles = ((m + tm - 1) / tm) * ((n + tn - 1) / tn);
    const std::int64_t waves = (tiles + sms - 1) / sms;
    return static_cast<double>(tiles) / static_cast<double>(waves * sms);
  };
  return std::max(utilization(tile_rows, tile_columns), utilization(tile_columns, tile_rows));
}

GpuSpec build_gpu(const ParamValues& v) {
  GpuSpec gpu;
  if (!v.has_section("cluster.gpu")) v.fail("cluster.gpu", "is required: a catalog name (`memtwin gpus`) or a mapping");
  gpu.name = v.given("cluster.gpu.preset") ? v.text("cluster.gpu.preset") : "custom";
  gpu.memory = v.bytes("cluster.gpu.memory");
  gpu.hbm_bandwidth = v.bandwidth("cluster.gpu.hbm_bandwidth");
  for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16, Precision::fp8}) {
    std::string key = "cluster.gpu.flops." + std::string(kPrecisionNames.name(p));
    if (v.given(key)) gpu.flops[p] = v.flops_rate(key);
  }
  if (gpu.flops.empty()) v.fail("cluster.gpu.flops", "is required: at least one of fp32, bf16, fp16, fp8");
  if (v.given("cluster.gpu.nvlink_bandwidth")) gpu.nvlink_bandwidth = v.bandwidth("cluster.gpu.nvlink_bandwidth");
  gpu.pcie_bandwidth = v.bandwidth("cluster.gpu.pcie_bandwidth");
  if (v.given("cluster.gpu.sms")) gpu.sms = v.int32("cluster.gpu.sms");
  if (v.given("cluster.gpu.generation")) gpu.generation = v.choice("cluster.gpu.generation", kGpuGenerationNames);
  if (v.given("cluster.gpu.price_per_hour")) gpu.price_per_hour = v.number("cluster.gpu.price_per_hour");
  gpu.source = v.text("cluster.gpu.source");
  return gpu;
}

namespace {

// NCCL's usable NVLink bandwidth per link (SM80_NVLINK_BW and its siblings in src/graph/topo.h)
// over the datasheet's per-link, per-direction figure; PCIe: NCCL's PCI_BW (12 GB/s for Gen3 x16)
// over 16 GB/s.
double nccl_intra_node_efficiency(const Cluster& c) {
  if (c.intra_node.fabric == Fabric::pcie) return 12.0 / 16.0;
  switch (*c.gpu.generation) {
    case GpuGeneration::hopper: return 20.6 / 25.0;
    case GpuGeneration::blackwell: return 40.1 / 50.0;
    default: return 20.0 / 25.0;
  }
}

CollectiveSettings build_collective_settings(const ParamValues& v, const Cluster& c) {
  CollectiveSettings s;
  const bool gpu_generation = c.gpu.generation && *c.gpu.generation != GpuGeneration::cpu;
  s.library = v.given("cluster.collectives.library") ? v.choice("cluster.collectives.library", kCollectiveLibraryNames)
              : gpu_generation                         ? CollectiveLibrary::nccl
                                                       : CollectiveLibrary::ring;
  if (s.library == CollectiveLibrary::nccl && !gpu_generation) {
    v.fail("cluster.collectives.library", "nccl needs the GPU's generation: set cluster.gpu.generation (" +
                                              std::string(c.gpu.generation ? "cpu is the host device" : "not known") + ")");
  }
  if (v.given("cluster.collectives.algorithms")) {
    for (const auto& name : v.items("cluster.collectives.algorithms"))
      s.algorithms.push_back(*kCollectiveAlgorithmNames.parse(name));
  }
  if (v.given("cluster.collectives.protocols")) {
    for (const auto& name : v.items("cluster.collectives.protocols"))
      s.protocols.push_back(*kCollectiveProtocolNames.parse(name));
  }
  s.channels = v.given("cluster.collectives.channels") ? v.int32("cluster.collectives.channels")
                                                       : std::clamp(2 * c.gpus_per_node, 2, 32);
  const bool nccl = s.library == CollectiveLibrary::nccl;
  s.intra_node_efficiency = v.given("cluster.collectives.intra_node_efficiency")
                                ? v.number("cluster.collectives.intra_node_efficiency")
                            : nccl ? nccl_intra_node_efficiency(c)
                                   : 1.0;
  s.inter_node_efficiency = v.given("cluster.collectives.inter_node_efficiency")
                                ? v.number("cluster.collectives.inter_node_efficiency")
                            : nccl ? 0.96
                                   : 1.0;
  s.net_overhead = v.duration("cluster.collectives.net_overhead");
  return s;
}

// What a node's links follow from its GPU where the scenario does not set them: NVSwitch at the
// GPU's NVLink bandwidth, else PCIe; the host link at the GPU's PCIe bandwidth.
void derive_node_links(const ParamValues& v, Cluster& c) {
  const bool has_nvlink = c.gpu.nvlink_bandwidth.has_value();
  c.intra_node.fabric = v.given("cluster.intra_node.fabric") ? v.choice("cluster.intra_node.fabric", kFabricNames)
                        : has_nvlink                          ? Fabric::nvswitch
                                                              : Fabric::pcie;
  if (c.intra_node.fabric != Fabric::pcie && !has_nvlink && !v.given("cluster.intra_node.bandwidth")) {
    v.fail("cluster.intra_node.fabric", "the GPU '" + c.gpu.name +
                                            "' has no NVLink; use fabric: pcie or give intra_node.bandwidth");
  }
  if (v.given("cluster.intra_node.bandwidth")) {
    c.intra_node.bandwidth = v.bandwidth("cluster.intra_node.bandwidth");
  } else {
    c.intra_node.bandwidth = c.intra_node.fabric == Fabric::pcie ? c.gpu.pcie_bandwidth : *c.gpu.nvlink_bandwidth;
  }
  c.host.pcie_bandwidth =
      v.given("cluster.host.pcie_bandwidth") ? v.bandwidth("cluster.host.pcie_bandwidth") : c.gpu.pcie_bandwidth;
}

// A software stack's efficiencies (cluster.efficiency.preset) were measured on one generation.
void refuse_efficiencies_of_another_generation(const ParamValues& v, const GpuSpec& gpu, const std::string& gpu_key) {
  if (!v.given("cluster.efficiency.generation")) return;
  const GpuGeneration measured_on = v.choice("cluster.efficiency.generation", kGpuGenerationNames);
  if (gpu.generation == measured_on) return;
  const std::string of =
      gpu.generation ? std::string(kGpuGenerationNames.name(*gpu.generation)) : std::string("of no known generation");
  const std::string on = std::string(kGpuGenerationNames.name(measured_on)) + " GPUs; " + gpu_key + " is " + of;
  // Located where the user chose them: the preset, else the generation key itself.
  if (v.given("cluster.efficiency.preset")) {
    v.fail("cluster.efficiency.preset", "'" + v.text("cluster.efficiency.preset") + "' was measured on " + on);
  }
  v.fail("cluster.efficiency.generation", "the efficiencies given are for " + on);
}

}  // namespace

Cluster build_cluster(const ParamValues& v) {
  if (!v.has_section("cluster")) v.fail("cluster", "is required");
  Cluster c;
  c.nodes = v.int32("cluster.nodes");
  c.gpus_per_node = v.int32("cluster.gpus_per_node");
  // Counts multiply into int32 GPU indices everywhere downstream: refuse a product past what is
  // modelled before it can wrap (a wrapped 0 divided the data-parallel size).
  constexpr std::int64_t kMaxGpus = std::int64_t{1} << 20;
  if (static_cast<std::int64_t>(c.nodes) * c.gpus_per_node > kMaxGpus) {
    v.fail("cluster.nodes", std::to_string(c.nodes) + " nodes x " + std::to_string(c.gpus_per_node) + " GPUs is " +
                                std::to_string(static_cast<std::int64_t>(c.nodes) * c.gpus_per_node) +
                                " GPUs: memtwin models clusters of up to 1,048,576 GPUs");
  }
  c.gpu = build_gpu(v);

  derive_node_links(v, c);
  c.intra_node.latency = v.duration("cluster.intra_node.latency");

  c.inter_node.nics_per_node =
      v.given("cluster.inter_node.nics_per_node") ? v.int32("cluster.inter_node.nics_per_node") : c.gpus_per_node;
  c.inter_node.nic_bandwidth = v.bandwidth("cluster.inter_node.nic_bandwidth");
  c.inter_node.latency = v.duration("cluster.inter_node.latency");
  c.inter_node.topology = v.choice("cluster.inter_node.topology", kTopologyNames);
  c.inter_node.oversubscription = v.number("cluster.inter_node.oversubscription");
  if (c.inter_node.leaf_spine()) {
    if (!v.given("cluster.inter_node.nodes_per_leaf")) {
      v.fail("cluster.inter_node.topology", "leaf-spine needs cluster.inter_node.nodes_per_leaf (nodes on each leaf switch)");
    }
    c.inter_node.nodes_per_leaf = v.int32("cluster.inter_node.nodes_per_leaf");
  } else if (v.given("cluster.inter_node.nodes_per_leaf")) {
    v.fail("cluster.inter_node.nodes_per_leaf", "applies to topology leaf-spine only (the topology is fat-tree)");
  }

  c.host.memory = v.bytes("cluster.host.memory");
  c.host.cpu_adam_params_per_s = v.number("cluster.host.cpu_adam_params_per_s");

  if (v.has_section("cluster.nvme")) {
    NvmeSpec nvme;
    nvme.capacity = v.bytes("cluster.nvme.capacity");
    nvme.read_bandwidth = v.bandwidth("cluster.nvme.read_bandwidth");
    nvme.write_bandwidth = v.bandwidth("cluster.nvme.write_bandwidth");
    nvme.latency = v.duration("cluster.nvme.latency");
    c.nvme = nvme;
  }
  c.runtime.cuda_context = v.bytes("cluster.runtime.cuda_context");
  c.runtime.nccl_buffers = v.bytes("cluster.runtime.nccl_buffers");
  c.runtime.framework_overhead = v.bytes("cluster.runtime.framework_overhead");
  c.runtime.cuda_graph_pool = v.bytes("cluster.runtime.cuda_graph_pool");
  c.runtime.allocator_waste = v.number("cluster.runtime.allocator_waste");
  c.runtime.eager_layer_overhead = v.duration("cluster.runtime.eager_layer_overhead");
  refuse_efficiencies_of_another_generation(v, c.gpu, "cluster.gpu");
  c.efficiency.gemm = v.number("cluster.efficiency.gemm");
  c.efficiency.attention = v.number("cluster.efficiency.attention");
  c.efficiency.memory = v.number("cluster.efficiency.memory");
  c.efficiency.tile_rows = v.int32("cluster.efficiency.gemm_tile_rows");
  c.efficiency.tile_columns = v.int32("cluster.efficiency.gemm_tile_columns");
  c.efficiency.gemm_overlap = v.number("cluster.efficiency.gemm_overlap");
  c.efficiency.collectives = v.number("cluster.efficiency.collectives");
  c.efficiency.gemm_memory =
      v.given("cluster.efficiency.gemm_memory") ? v.number("cluster.efficiency.gemm_memory") : c.efficiency.memory;
  for (const KvKernelFormat& format : kv_kernel_formats()) {
    const std::string key = "cluster.kernels.decode_attention." + format.name;
    if (v.given(key)) c.decode_attention_elements_per_s[format.name] = v.number(key);
    const std::string write = "cluster.kernels.kv_write." + format.name;
    if (format.write_kernel && v.given(write)) c.kv_write_elements_per_s[format.name] = v.number(write);
  }
  if (v.given("cluster.kernels.prompt_scoring")) c.prompt_scoring_pairs_per_s = v.number("cluster.kernels.prompt_scoring");
  c.collectives = build_collective_settings(v, c);
  if (v.given("cluster.calibration")) {
    c.calibration = v.text("cluster.calibration");
    apply_calibration(*c.calibration, v, c);
  }
  if (v.given("cluster.price_per_gpu_hour")) {
    c.price_per_gpu_hour = v.number("cluster.price_per_gpu_hour");
  } else {
    c.price_per_gpu_hour = c.gpu.price_per_hour;
  }
  return c;
}

Cluster cluster_on_gpu(const ParamValues& v, const Cluster& cluster, const GpuSpec& gpu, const std::string& key) {
  if (cluster.calibration) {
    v.fail(key, "'" + gpu.name + "' is not the GPU cluster.calibration measured (" + cluster.gpu.name +
                    "): a calibration describes cluster.gpu only; drop one of them");
  }
  refuse_efficiencies_of_another_generation(v, gpu, key);
  Cluster c = cluster;
  c.gpu = gpu;
  derive_node_links(v, c);
  c.collectives = build_collective_settings(v, c);
  c.price_per_gpu_hour = gpu.price_per_hour;  // cluster.price_per_gpu_hour prices cluster.gpu
  return c;
}

}  // namespace memtwin
