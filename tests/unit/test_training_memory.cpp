#include <catch2/catch.hpp>

#include <cmath>

#include "models/memory/activations.h"
#include "models/memory/communication.h"
#include "models/memory/model_states.h"
#include "models/memory/training_memory.h"
#include "models/scenario_loader.h"

using namespace memtwin;

namespace {

// A scenario from YAML text plus overrides: every number below is computed from a scenario.
Scenario scenario(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return load_scenario_text(text, "<test>", "", overrides).scenario;
}

const std::string kZeroPaper = R"(
name: zero-paper-7.5b
cluster: {nodes: 8, gpus_per_node: 8, gpu: a100-80gb}
model: {parameters: 7.5e9}
training: {framework: ideal, precision: fp16, optimizer: adam, micro_batch: 1}
)";

double states(const Scenario& s) { return training_memory(s).model_states().as_double(); }

}  // namespace

TEST_CASE("ZeRO paper: model states of a 7.5B model on 64 GPUs (Table 1)", "[validation]") {
  // Rajbhandari et al. SC'20: baseline 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.9 GB (1 GB = 1e9 B).
  CHECK(states(scenario(kZeroPaper)) / 1e9 == Approx(120.0).epsilon(0.001));
  CHECK(states(scenario(kZeroPaper, {"training.sharding.strategy=zero", "training.sharding.stage=1"})) / 1e9 ==
        Approx(31.4).epsilon(0.002));
  CHECK(states(scenario(kZeroPaper, {"training.sharding.strategy=zero", "training.sharding.stage=2"})) / 1e9 ==
        Approx(16.6).epsilon(0.003));  // 16.64 exactly; the paper rounds
  CHECK(states(scenario(kZeroPaper, {"training.sharding.strategy=zero", "training.sharding.stage=3"})) / 1e9 ==
        Approx(1.875).epsilon(0.002));
}

TEST_CASE("ZeRO formulas hold across stages and data-parallel degrees", "[unit]") {
  const double psi = 7.5e9, K = 12;
  for (int nodes : {1, 2, 16, 128}) {
    const double n = nodes * 8.0;
    const std::string set_nodes = "cluster.nodes=" + std::to_string(nodes);
    INFO("N_d = " << n);
    auto at_stage = [&](int stage) {
      return states(scenario(kZeroPaper, {set_nodes, "training.sharding.strategy=zero",
                                          "training.sharding.stage=" + std::to_string(stage)}));
    };
    CHECK(at_stage(0) == Approx((4 + K) * psi));
    CHECK(at_stage(1) == Approx(4 * psi + K * psi / n));
    CHECK(at_stage(2) == Approx(2 * psi + (2 + K) * psi / n));
    CHECK(at_stage(3) == Approx((4 + K) * psi / n));
  }
}

TEST_CASE("framework conventions: DeepSpeed, Megatron and FSDP byte counts", "[unit]") {
  const double psi = 7.5e9, n = 64;
  auto with = [&](std::vector<std::string> o) {
    o.push_back("training.precision=bf16");
    return states(scenario(kZeroPaper, o));
  };
  // DeepSpeed's estimators: ZeRO-3 18 B/param over N; ZeRO-2 4 + 16/N.
  CHECK(with({"training.framework=deepspeed", "training.sharding.strategy=zero", "training.sharding.stage=3"}) ==
        Approx(18 * psi / n));
  CHECK(with({"training.framework=deepspeed", "training.sharding.strategy=zero", "training.sharding.stage=2"}) ==
        Approx(4 * psi + 16 * psi / n));
  // Megatron: 18 B/param, or 6 + 12/DP with the distributed optimizer.
  CHECK(with({"training.framework=megatron"}) == Approx(18 * psi));
  CHECK(with({"training.framework=megatron", "training.sharding.strategy=zero", "training.sharding.stage=1"}) ==
        Approx(6 * psi + 12 * psi / n));
  // FSDP full shard: fp32 flat parameters, fp32 gradients, Adam moments, all over W; hybrid over the group.
  CHECK(with({"training.framework=fsdp", "training.sharding.strategy=fsdp"}) == Approx(16 * psi / n));
  CHECK(with({"training.framework=fsdp", "training.sharding.strategy=fsdp", "training.sharding.mode=hybrid_shard",
              "training.sharding.shard_group=8"}) == Approx(16 * psi / 8));
}

TEST_CASE("offloading moves optimizer states and parameters to host memory or NVMe", "[unit]") {
  const std::string base = R"(
name: offload
cluster: {nodes: 1, gpus_per_node: 8, gpu: h100-sxm, nvme: {capacity: 30TB}}
model: llama-2-70b
training: {framework: ideal, micro_batch: 1, seq_len: 4096, activation_checkpointing: full,
           sharding: {strategy: zero, stage: 3}}
)";
  TrainingMemory none = training_memory(scenario(base));
  TrainingMemory cpu = training_memory(scenario(base, {"training.offload.optimizer=cpu"}));
  CHECK(cpu.optimizer_states.count() == 0);
  CHECK(cpu.host_peak.count() == none.optimizer_states.count() * 8);  // per node: eight GPUs' shards
  TrainingMemory infinity = training_memory(
      scenario(base, {"training.offload.optimizer=nvme", "training.offload.parameters=nvme"}));
  CHECK(infinity.parameters.count() == 0);
  CHECK(infinity.nvme.count() == (none.optimizer_states + none.parameters).count() * 8);
  CHECK(infinity.nvme_fits);
}

TEST_CASE("FSDP paper: per-GPU traffic of replication, full sharding and hybrid sharding", "[validation]") {
  // Zhao et al. VLDB'23: model size M on W GPUs in hosts of G: replication 2M(W-1)/W, full
  // sharding 3M(W-1)/W; hybrid (shard inside a host) crosses hosts with 2M(W-1)/(GW) in the paper's
  // approximation; a ring all-reduce among the W/G replicas gives exactly 2M(W/G-1)/W.
  const std::string base = R"(
name: fsdp-traffic
cluster: {nodes: 8, gpus_per_node: 8, gpu: h100-sxm}
model: llama-2-7b
training: {micro_batch: 1, global_batch: 64, sharding: {strategy: fsdp, mode: no_shard}}
)";
  const double W = 64, G = 8;
  const double M = 6'738'415'616.0 * 2;  // bf16 gradients of Llama-2-7B
  DataParallelTraffic replication = data_parallel_traffic(scenario(base));
  CHECK(replication.total() == Approx(2 * M * (W - 1) / W));
  DataParallelTraffic full = data_parallel_traffic(scenario(base, {"training.sharding.mode=full_shard"}));
  CHECK(full.total() == Approx(3 * M * (W - 1) / W));
  CHECK(full.total() / replication.total() == Approx(1.5));  // ZeRO §7: 1.5x data parallelism
  DataParallelTraffic hybrid = data_parallel_traffic(scenario(base, {"training.sharding.mode=hybrid_shard"}));
  CHECK(hybrid.cross_host_bytes == Approx(2 * M * (W / G - 1) / W));
  CHECK(hybrid.cross_host_bytes == Approx(2 * M * (W - 1) / (G * W)).epsilon(0.15));
  CHECK(hybrid.cross_host_bytes < full.cross_host_bytes / 10);
}

TEST_CASE("ZeRO communication: 2 Psi for DDP and ZeRO-1/2, 3 Psi for ZeRO-3", "[unit]") {
  const std::string base = R"(
name: zero-traffic
cluster: {nodes: 4, gpus_per_node: 8, gpu: h100-sxm}
model: llama-2-13b
training: {micro_batch: 1, global_batch: 32}
)";
  const double psi_bytes = 13'015'864'320.0 * 2, ring = 31.0 / 32;
  CHECK(data_parallel_traffic(scenario(base)).total() == Approx(2 * psi_bytes * ring));
  for (int stage : {1, 2}) {
    auto s = scenario(base, {"training.sharding.strategy=zero", "training.sharding.stage=" + std::to_string(stage)});
    CHECK(data_parallel_traffic(s).total() == Approx(2 * psi_bytes * ring));
  }
  auto z3 = scenario(base, {"training.sharding.strategy=zero", "training.sharding.stage=3"});
  CHECK(data_parallel_traffic(z3).total() == Approx(3 * psi_bytes * ring));
}

namespace {
const std::string kGpt = R"(
name: korthikanti
cluster: {nodes: 1, gpus_per_node: 8, gpu: a100-80gb}
model: gpt3-175b
training: {micro_batch: 1, seq_len: 2048, attention: explicit}
)";

double per_layer(const Scenario& s) {
  const Training& t = *s.training;
  return block_activation_bytes_per_token(s.model, t.seq_len, t.parallelism.tensor, t.parallelism.sequence_parallel,
                                          t.recompute, t.attention) *
         t.seq_len * t.micro_batch;
}
}  // namespace

TEST_CASE("Korthikanti et al. Table 2: activation bytes per layer", "[validation]") {
  const double s = 2048, b = 1, h = 12288, a = 96, t = 8;
  const double sbh = s * b * h;
  CHECK(per_layer(scenario(kGpt)) == Approx(sbh * (34 + 5 * a * s / h)));
  CHECK(per_layer(scenario(kGpt, {"training.parallelism.tensor=8"})) == Approx(sbh * (10 + 24 / t + 5 * a * s / (h * t))));
  CHECK(per_layer(scenario(kGpt, {"training.parallelism.tensor=8", "training.parallelism.sequence_parallel=true"})) ==
        Approx(sbh * (34 / t + 5 * a * s / (h * t))));
  CHECK(per_layer(scenario(kGpt, {"training.parallelism.tensor=8", "training.activation_checkpointing=selective"})) ==
        Approx(sbh * (10 + 24 / t)));
  CHECK(per_layer(scenario(kGpt, {"training.parallelism.tensor=8", "training.parallelism.sequence_parallel=true",
                                  "training.activation_checkpointing=selective"})) == Approx(34 * sbh / t));
  CHECK(per_layer(scenario(kGpt, {"training.activation_checkpointing=full"})) == Approx(2 * sbh));
  // FlashAttention drops the 5as^2b score term, as selective recompute does.
  CHECK(per_layer(scenario(kGpt, {"training.attention=flash"})) == Approx(34 * sbh));
}

TEST_CASE("1F1B: the first stage holds the whole model's layers of activations, interleaving more", "[validation]") {
  const std::string base = R"(
name: pipeline
cluster: {nodes: 8, gpus_per_node: 8, gpu: a100-80gb}
model: gpt3-175b
training: {micro_batch: 1, global_batch: 64, seq_len: 2048, attention: flash,
           parallelism: {tensor: 8, sequence_parallel: true, pipeline: 8}}
)";
  Scenario s = scenario(base);
  const double layer = per_layer(s);
  const RankShare share = rank_share(s.model, *s.training);
  CHECK(training_activations(s, share).stored.as_double() == Approx(96 * layer));  // L layers' worth
  Scenario inter = scenario(base, {"training.parallelism.pipeline_schedule=interleaved", "training.parallelism.interleave=2"});
  const double factor = 1 + 7.0 / (8 * 2);
  CHECK(training_activations(inter, rank_share(inter.model, *inter.training)).stored.as_double() ==
        Approx(96 * layer * factor).epsilon(1e-9));
}

TEST_CASE("QLoRA fine-tunes a 70B model on one 80 GB GPU - full fine-tuning does not fit", "[unit]") {
  const std::string base = R"(
name: qlora-70b
cluster: {nodes: 1, gpus_per_node: 1, gpu: h100-sxm}
model: llama-2-70b
training: {micro_batch: 1, seq_len: 2048, activation_checkpointing: full,
           fine_tuning: {method: qlora, lora_rank: 64, lora_targets: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]}}
)";
  Scenario s = scenario(base);
  TrainingMemory qlora = training_memory(s);
  CHECK(qlora.fits());
  // NF4 with double quantisation: 4.127 bits per frozen linear weight (Dettmers et al. 2023).
  CHECK(nf4_bytes_per_param(true) * 8 == Approx(4.127).epsilon(0.001));
  CHECK(nf4_bytes_per_param(false) * 8 == Approx(4.5));
  const RankShare share = rank_share(s.model, *s.training);
  CHECK(qlora.parameters.as_double() ==
        Approx(share.frozen_linear * nf4_bytes_per_param(true) + share.frozen_other * 2 + share.trainable * 2).margin(1));
  CHECK(qlora.optimizer_states.as_double() == Approx(share.trainable * 12).margin(1));  // adapters only
  Scenario full = scenario(
      "name: full-70b\ncluster: {nodes: 1, gpus_per_node: 1, gpu: h100-sxm}\nmodel: llama-2-70b\n"
      "training: {micro_batch: 1, seq_len: 2048, activation_checkpointing: full}\n");
  TrainingMemory f = training_memory(full);
  CHECK_FALSE(f.fits());
  CHECK_FALSE(training_fit_hints(full, f).empty());
}

TEST_CASE("a parameter count alone still gives model states", "[unit]") {
  TrainingMemory m = training_memory(scenario(kZeroPaper));
  CHECK(m.model_states().as_double() == Approx(16 * 7.5e9));
  CHECK(m.activations.count() == 0);
  CHECK_FALSE(m.architecture_known);
}

TEST_CASE("the breakdown adds up to the peak", "[unit]") {
  Scenario s = load_quickstart_scenario().scenario;
  TrainingMemory m = training_memory(s);
  CHECK((m.parameters + m.gradients + m.optimizer_states + m.activations + m.buffers + m.runtime + m.fragmentation) ==
        m.peak);
  CHECK(m.fits());
}

TEST_CASE("a 70B full fine-tune on one node is told that offloading parameters and optimizer fits, if host memory holds them", "[unit]") {
  const std::string text =
      "name: ft-70b\ncluster: {nodes: 1, gpus_per_node: 8, gpu: h100-sxm}\nmodel: llama-3-70b\n"
      "training: {framework: fsdp, global_batch: 8, micro_batch: 1, seq_len: 4096, activation_checkpointing: full,\n"
      "           sharding: {strategy: fsdp, mode: full_shard}}\n";
  auto offload_hint = [](const Scenario& s) {
    for (const std::string& h : training_fit_hints(s, training_memory(s)))
      if (h.rfind("training.offload={optimizer: cpu, parameters: cpu}", 0) == 0) return h;
    return std::string();
  };
  const Scenario s = scenario(text);
  CHECK_FALSE(training_memory(s).fits());
  CHECK_THAT(offload_hint(s), Catch::EndsWith(" - fits"));
  // With too little host memory the offload fits the GPU and says what the host lacks.
  Scenario small_host = s;
  small_host.cluster.host.memory = Bytes(512LL << 30);
  CHECK_THAT(offload_hint(small_host), Catch::Contains("fits the GPU, but the offloaded states need") && Catch::Contains("of 512 GiB"));
}
