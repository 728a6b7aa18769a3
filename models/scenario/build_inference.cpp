#include "models/scenario/builders.h"

#include <algorithm>
#include <string>

#include "models/kv/kv_method.h"
#include "models/memory/serving_memory.h"
#include "models/scenario/kv_quality_file.h"
#include "models/scenario/did_you_mean.h"
#include "models/scenario_loader.h"
#include "models/serving/disaggregation.h"

namespace memtwin {
namespace {

std::string str(long long n) { return std::to_string(n); }

ServingSpec build_serving(const ParamValues& v, const Cluster& cluster, const ModelSpec& model) {
  ServingSpec s;
  s.replicas = v.int32("inference.serving.replicas");
  s.tensor_parallel = v.int32("inference.serving.tensor_parallel");
  s.pipeline_parallel = v.int32("inference.serving.pipeline_parallel");
  const long long needed = 1LL * s.replicas * s.tensor_parallel * s.pipeline_parallel;
  if (needed > cluster.total_gpus()) {
    v.fail("inference.serving.replicas", str(s.replicas) + " replicas x tensor " + str(s.tensor_parallel) +
                                             " x pipeline " + str(s.pipeline_parallel) + " need " + str(needed) +
                                             " GPUs; the cluster has " + str(cluster.total_gpus()));
  }
  if (model.heads % s.tensor_parallel != 0) {
    v.fail("inference.serving.tensor_parallel", "tensor parallel " + str(s.tensor_parallel) +
                                                    " does not divide the model's " + str(model.heads) + " attention heads");
  }
  if (model.layers < s.pipeline_parallel) {
    v.fail("inference.serving.pipeline_parallel", str(s.pipeline_parallel) + " stages for " + str(model.layers) + " layers");
  }
  s.expert_parallel = v.flag("inference.serving.expert_parallel");
  if (s.expert_parallel) {
    const std::string key = "inference.serving.expert_parallel";
    if (model.experts == 1) v.fail(key, "the model has no experts (a dense model)");
    if (s.pipeline_parallel > 1) v.fail(key, "expert parallelism together with pipeline stages is not modelled yet");
    if (model.experts % s.expert_parallel_size() != 0) {
      v.fail(key, "its size, " + str(s.replicas) + " replicas x tensor " + str(s.tensor_parallel) + " = " +
                      str(s.expert_parallel_size()) + " GPUs, does not divide the model's " + str(model.experts) + " experts");
    }
  }
  s.max_num_seqs = v.int32("inference.serving.max_num_seqs");
  s.max_num_batched_tokens = v.int32("inference.serving.max_num_batched_tokens");
  if (v.given("inference.serving.max_model_len")) {
    s.max_model_len = v.int32("inference.serving.max_model_len");
    if (model.max_position_embeddings > 0 && s.max_model_len > model.max_position_embeddings) {
      v.fail("inference.serving.max_model_len", str(s.max_model_len) + " is longer than the model's " +
                                                    str(model.max_position_embeddings) + " positions");
    }
  } else {
    s.max_model_len = model.max_position_embeddings > 0 ? model.max_position_embeddings : 4096;
  }
  s.block_size = v.int32("inference.serving.block_size");
  s.gpu_memory_utilization = v.number("inference.serving.gpu_memory_utilization");
  s.chunked_prefill = v.flag("inference.serving.chunked_prefill");
  if (!s.chunked_prefill && s.max_num_batched_tokens < s.max_model_len) {
    v.fail("inference.serving.max_num_batched_tokens",
           str(s.max_num_batched_tokens) + " is smaller than max_model_len " + str(s.max_model_len) +
               ": without chunked prefill a long prompt could never be scheduled (vLLM refuses this too)");
  }
  if (s.max_num_seqs > s.max_num_batched_tokens) {
    v.fail("inference.serving.max_num_seqs", str(s.max_num_seqs) + " sequences cannot fit in max_num_batched_tokens " +
                                                 str(s.max_num_batched_tokens));
  }
  s.prefix_caching = v.flag("inference.serving.prefix_caching");
  s.preemption = v.choice("inference.serving.preemption", kPreemptionNames);
  s.cuda_graphs = v.flag("inference.serving.cuda_graphs");
  s.swap_space = v.bytes("inference.serving.swap_space");
  s.router = v.choice("inference.serving.router", kRouterNames);
  return s;
}

Disaggregation build_disaggregation(const ParamValues& v, const Cluster& cluster, const ModelSpec& model,
                                   const ServingSpec& serving) {
  const std::string key = "inference.disaggregation";
  // The colocated engine's own layout may be written only as its neutral values (as the resolved
  // scenario echoes them): the instances say theirs.
  const std::pair<const char*, bool> own[] = {{"replicas", serving.replicas != 1},
                                              {"tensor_parallel", serving.tensor_parallel != 1},
                                              {"pipeline_parallel", serving.pipeline_parallel != 1},
                                              {"expert_parallel", serving.expert_parallel}};
  for (const auto& [name, set] : own) {
    if (!set) continue;
    const bool unmodelled = std::string(name) == "pipeline_parallel" || std::string(name) == "expert_parallel";
    v.fail(std::string("inference.serving.") + name,
           "is set per instance with disaggregation (inference.disaggregation.prefill / .decode)" +
               std::string(unmodelled ? "; pipeline and expert parallelism of disaggregated instances are not modelled yet" : ""));
  }
  if (serving.prefix_caching) v.fail("inference.serving.prefix_caching", "with disaggregation is not modelled yet");
  Disaggregation d;
  d.prefill_replicas = v.int32(key + ".prefill.replicas");
  d.prefill_tensor_parallel = v.int32(key + ".prefill.tensor_parallel");
  d.decode_replicas = v.int32(key + ".decode.replicas");
  d.decode_tensor_parallel = v.int32(key + ".decode.tensor_parallel");
  d.layerwise_transfer = v.flag(key + ".layerwise_transfer");
  for (const auto& [side, side_cluster] : {std::pair{"prefill", &d.prefill_cluster}, std::pair{"decode", &d.decode_cluster}}) {
    const std::string gpu_key = key + "." + side + ".gpu";
    if (!v.given(gpu_key)) continue;
    const std::string name = v.text(gpu_key);
    const std::vector<std::string> known = catalog_gpu_names();
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      v.fail(gpu_key, "unknown GPU '" + name + "'" + did_you_mean(name, known) + " (list them with `memtwin gpus`)");
    }
    if (name != cluster.gpu.name) *side_cluster = cluster_on_gpu(v, cluster, catalog_gpu(name), gpu_key);
  }
  for (const auto& [side, tp] : {std::pair{"prefill", d.prefill_tensor_parallel}, std::pair{"decode", d.decode_tensor_parallel}}) {
    if (model.heads % tp != 0) {
      v.fail(key + "." + side + ".tensor_parallel",
             "tensor parallel " + str(tp) + " does not divide the model's " + str(model.heads) + " attention heads");
    }
  }
  const int needed = first_gpu_of(d, cluster, InstanceRole::decode) + d.decode_gpus();
  if (needed > cluster.total_gpus()) {
    const bool own_nodes = needed > d.gpus();
    v.fail(key, str(d.prefill_replicas) + " prefill instances x " + str(d.prefill_tensor_parallel) + " GPUs and " +
                    str(d.decode_replicas) + " decode instances x " + str(d.decode_tensor_parallel) + " GPUs need " +
                    str(needed) + " GPUs" + (own_nodes ? " (the sides' GPU types differ, so each side has nodes of its own)" : "") +
                    "; the cluster has " + str(cluster.total_gpus()));
  }
  // A side's explicit KV pool must fit its own GPUs too.
  for (const auto& side_cluster : {d.prefill_cluster, d.decode_cluster}) {
    if (side_cluster && v.given("inference.kv_cache.memory") && v.bytes("inference.kv_cache.memory") >= side_cluster->gpu.memory) {
      v.fail("inference.kv_cache.memory", "is not smaller than the " + side_cluster->gpu.name + "'s memory");
    }
  }
  return d;
}

LengthDistribution build_length(const ParamValues& v, const std::string& prefix) {
  LengthDistribution d;
  d.dist = v.choice(prefix + ".dist", kLengthDistNames);
  auto require = [&](const char* key) {
    if (!v.given(prefix + "." + key)) {
      v.fail(prefix + "." + key, std::string("is required with dist: ") + std::string(kLengthDistNames.name(d.dist)));
    }
  };
  switch (d.dist) {
    case LengthDist::fixed: require("value"); break;
    case LengthDist::uniform: require("max"); break;
    case LengthDist::normal:
    case LengthDist::lognormal: require("mean"); require("std"); break;
    case LengthDist::empirical: require("file"); break;
  }
  if (v.given(prefix + ".value") && d.dist != LengthDist::fixed) {
    v.fail(prefix + ".value", "is only meaningful with dist: fixed");
  }
  d.value = v.given(prefix + ".value") ? v.number(prefix + ".value") : 0;
  d.mean = v.given(prefix + ".mean") ? v.number(prefix + ".mean") : 0;
  d.std = v.given(prefix + ".std") ? v.number(prefix + ".std") : 0;
  d.min = v.number(prefix + ".min");
  d.max = v.given(prefix + ".max") ? v.number(prefix + ".max") : 0;
  if (d.max > 0 && d.max < d.min) v.fail(prefix + ".max", "is smaller than min");
  if (v.given(prefix + ".file")) d.file = v.text(prefix + ".file");
  return d;
}

WorkloadSpec build_workload(const ParamValues& v) {
  const std::string w = "inference.workload.";
  WorkloadSpec s;
  s.arrival = v.choice(w + "arrival", kArrivalNames);
  if (v.given(w + "trace")) {
    s.trace = v.text(w + "trace");
    for (const char* key : {"requests", "prompt_tokens", "output_tokens", "lengths", "arrival"}) {
      if (v.given(w + key) || v.has_section(w + key)) {
        v.fail(w + key, "conflicts with workload.trace, which gives arrivals and lengths itself");
      }
    }
    // A rate replays the trace at that mean rate: its arrival times scaled, its bursts kept.
    if (v.given(w + "rate")) s.rate_per_s = v.number(w + "rate");
    return s;
  }
  if (s.arrival == Arrival::closed_loop) {
    if (!v.given(w + "concurrency")) v.fail(w + "concurrency", "is required with arrival: closed_loop");
    if (v.given(w + "rate")) v.fail(w + "rate", "is not used with arrival: closed_loop (concurrency sets the load)");
    s.concurrency = v.int32(w + "concurrency");
  } else {
    if (!v.given(w + "rate")) v.fail(w + "rate", "is required with arrival: " + std::string(kArrivalNames.name(s.arrival)));
    s.rate_per_s = v.number(w + "rate");
    if (v.given(w + "concurrency")) v.fail(w + "concurrency", "is only meaningful with arrival: closed_loop");
  }
  if (v.given(w + "cv") && s.arrival != Arrival::gamma) v.fail(w + "cv", "is only meaningful with arrival: gamma");
  if (s.arrival == Arrival::gamma) s.cv = v.number(w + "cv");
  s.requests = v.integer(w + "requests");
  if (v.given(w + "lengths")) {
    // Pairs drawn together: the two distributions would be drawn apart.
    for (const char* key : {"prompt_tokens", "output_tokens"}) {
      if (v.given(w + key) || v.has_section(w + key)) v.fail(w + key, "conflicts with workload.lengths, which gives both lengths as pairs");
    }
    s.length_pairs = v.text(w + "lengths");
  } else {
    if (!v.has_section(w + "prompt_tokens")) v.fail(w + "prompt_tokens", "is required (or give workload.lengths or workload.trace)");
    if (!v.has_section(w + "output_tokens")) v.fail(w + "output_tokens", "is required (or give workload.lengths or workload.trace)");
    s.prompt_tokens = build_length(v, w + "prompt_tokens");
    s.output_tokens = build_length(v, w + "output_tokens");
  }
  s.shared_prefix_groups = v.int32(w + "shared_prefix.groups");
  s.shared_prefix_tokens = v.int32(w + "shared_prefix.tokens");
  if ((s.shared_prefix_groups > 0) != (s.shared_prefix_tokens > 0)) {
    v.fail(w + "shared_prefix", "give both groups and tokens, or neither");
  }
  return s;
}

}  // namespace

Inference build_inference(const ParamValues& v, const Cluster& cluster, const ModelSpec& model) {
  if (!model.architecture_known) {
    v.fail("model.parameters", "serving needs the model's architecture (layers, heads, ...) for its KV cache");
  }
  Inference inf;
  inf.engine = v.choice("inference.engine", kEngineNames);
  inf.serving = build_serving(v, cluster, model);
  if (v.has_section("inference.disaggregation")) inf.disaggregation = build_disaggregation(v, cluster, model, inf.serving);
  inf.weight_dtype = v.choice("inference.weights.dtype", kWeightDtypeNames);
  if (v.given("inference.weights.group_size") && inf.weight_dtype != WeightDtype::awq_int4) {
    v.fail("inference.weights.group_size", "is only meaningful with dtype: awq_int4");
  }
  if (inf.weight_dtype == WeightDtype::awq_int4) inf.weight_group_size = v.int32("inference.weights.group_size");
  if (inf.weight_dtype == WeightDtype::awq_int4 && model.hidden % inf.weight_group_size != 0) {
    v.fail("inference.weights.group_size", "group " + str(inf.weight_group_size) + " does not divide hidden " +
                                               str(model.hidden));
  }
  inf.kv_cache.dtype = v.choice("inference.kv_cache.dtype", kKvDtypeNames);
  if (v.given("inference.kv_cache.memory")) {
    inf.kv_cache.memory = v.bytes("inference.kv_cache.memory");
    if (*inf.kv_cache.memory >= cluster.gpu.memory) {
      v.fail("inference.kv_cache.memory", "is not smaller than the GPU's memory");
    }
  }
  inf.kv_cache.compression = read_kv_compression(v);
  if (v.given("inference.tiers.host_memory")) {
    inf.tiers.host_memory = v.bytes("inference.tiers.host_memory");
    if (*inf.tiers.host_memory > cluster.host.memory) {
      v.fail("inference.tiers.host_memory", "is more than the node's host memory (cluster.host.memory)");
    }
  }
  if (v.given("inference.tiers.nvme")) {
    if (!cluster.nvme) v.fail("inference.tiers.nvme", "an NVMe tier needs a cluster.nvme section");
    inf.tiers.nvme = v.bytes("inference.tiers.nvme");
    if (*inf.tiers.nvme > cluster.nvme->capacity) v.fail("inference.tiers.nvme", "is more than cluster.nvme.capacity");
  }
  inf.tiers.policy = v.choice("inference.tiers.policy", kTierPolicyNames);
  inf.tiers.proactive_offload = v.flag("inference.tiers.proactive_offload");
  if (inf.tiers.proactive_offload && !inf.tiers.host_memory) {
    v.fail("inference.tiers.proactive_offload", "copies idle prefixes to host memory: it needs inference.tiers.host_memory");
  }
  inf.workload = build_workload(v);
  if (v.given("inference.slo.ttft_p99")) inf.slo.ttft_p99 = v.duration("inference.slo.ttft_p99");
  if (v.given("inference.slo.tpot_p99")) inf.slo.tpot_p99 = v.duration("inference.slo.tpot_p99");
  if (v.given("inference.slo.e2e_p99")) inf.slo.e2e_p99 = v.duration("inference.slo.e2e_p99");
  if (v.given("inference.kv_cache.quality")) {
    // The share of a typical prompt the method keeps: what an evicting method's measurement is
    // matched on.
    double share = 1;
    if (kv_method(inf.kv_cache.compression.method).selection != KvSelection::all) {
      const double prompt = std::max(1.0, mean_length(inf.workload.prompt_tokens, inf.serving.max_model_len / 2.0));
      const KvShape shape{model.layers, model.kv_heads, model.head_dim, 2, 0};
      const auto kept = make_kv_compressor(inf.kv_cache.compression, shape)->kept_tokens(static_cast<std::int64_t>(prompt), 0);
      share = std::min(1.0, static_cast<double>(kept) / prompt);
    }
    inf.kv_cache.quality = read_kv_quality(v.text("inference.kv_cache.quality"), inf.kv_cache, share, v);
  }
  return inf;
}

}  // namespace memtwin
