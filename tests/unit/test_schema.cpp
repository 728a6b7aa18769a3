#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sstream>

#include "models/schema.h"
#include "tests/test_support.h"

using namespace memtwin;

TEST_CASE("every parameter is declared once, with a description", "[unit]") {
  std::set<std::string> seen;
  for (const auto& p : schema_params()) {
    INFO(p.path);
    CHECK(seen.insert(p.path).second);
    CHECK_FALSE(p.doc.empty());
    if (p.kind == ValueKind::choice || p.kind == ValueKind::choice_list) CHECK_FALSE(p.choices.empty());
  }
  CHECK(seen.size() > 100);
}

TEST_CASE("the key names of SCENARIO.md are in the schema", "[unit]") {
  for (const char* path :
       {"name", "seed", "cluster.nodes", "cluster.gpus_per_node", "cluster.gpu.memory", "cluster.gpu.hbm_bandwidth",
        "cluster.gpu.flops.bf16", "cluster.intra_node.fabric", "cluster.intra_node.bandwidth",
        "cluster.inter_node.nics_per_node", "cluster.inter_node.nic_bandwidth", "cluster.inter_node.topology",
        "cluster.inter_node.oversubscription", "cluster.host.memory", "cluster.host.pcie_bandwidth",
        "cluster.nvme.capacity", "cluster.nvme.read_bandwidth", "cluster.calibration", "cluster.price_per_gpu_hour",
        "model.hf_config", "model.layers", "model.kv_heads", "model.head_dim", "model.intermediate", "model.mlp",
        "model.tied_embeddings", "model.parameters", "training.framework", "training.global_batch",
        "training.micro_batch", "training.seq_len", "training.precision", "training.optimizer",
        "training.parallelism.tensor", "training.parallelism.sequence_parallel", "training.parallelism.pipeline",
        "training.parallelism.pipeline_schedule", "training.parallelism.interleave", "training.sharding.strategy",
        "training.sharding.mode", "training.sharding.stage", "training.sharding.shard_group",
        "training.offload.optimizer", "training.offload.parameters", "training.activation_checkpointing",
        "training.attention", "inference.engine", "inference.serving.replicas", "inference.serving.max_num_seqs",
        "inference.serving.max_num_batched_tokens", "inference.serving.max_model_len", "inference.serving.block_size",
        "inference.serving.gpu_memory_utilization", "inference.serving.chunked_prefill",
        "inference.serving.prefix_caching", "inference.serving.preemption", "inference.weights.dtype",
        "inference.kv_cache.dtype", "inference.kv_cache.memory", "inference.kv_cache.compression.method",
        "inference.kv_cache.compression.bits", "inference.kv_cache.compression.heavy_ratio",
        "inference.kv_cache.compression.sinks", "inference.kv_cache.compression.budget", "inference.tiers.host_memory",
        "inference.tiers.nvme", "inference.tiers.policy", "inference.workload.arrival", "inference.workload.rate",
        "inference.workload.requests", "inference.workload.prompt_tokens.dist", "inference.workload.trace",
        "inference.slo.ttft_p99", "inference.slo.tpot_p99"}) {
    INFO(path);
    CHECK(find_param(path) != nullptr);
  }
}

TEST_CASE("scenarios/SCHEMA.md is the generated reference", "[unit]") {
  std::ifstream in(test::source_path("scenarios/SCHEMA.md"));
  REQUIRE(in.good());
  std::stringstream committed;
  committed << in.rdbuf();
  INFO("regenerate with: ./build/memtwin schema --markdown > scenarios/SCHEMA.md");
  CHECK(committed.str() == schema_markdown());
}
