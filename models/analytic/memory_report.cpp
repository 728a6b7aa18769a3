#include "models/analytic/memory_report.h"

#include <algorithm>
#include <cmath>

#include "models/unit_parse.h"

namespace memtwin {
namespace {

std::string percent(double part, double whole) {
  return std::to_string(static_cast<int>(std::lround(100.0 * part / whole))) + "%";
}

}  // namespace

void add_training_memory(nlohmann::ordered_json& metrics, std::vector<std::string>& notes, const Scenario& s,
                         const TrainingMemory& m) {
  nlohmann::ordered_json gpu;
  gpu["peak_bytes"] = m.peak.count();
  gpu["capacity_bytes"] = m.capacity.count();
  gpu["fits"] = m.gpu_fits;
  gpu["headroom_bytes"] = (m.capacity - m.peak).count();
  gpu["model_states_bytes"] = m.model_states().count();
  const std::vector<std::pair<std::string, Bytes>> parts = {
      {"parameters", m.parameters}, {"gradients", m.gradients}, {"optimizer_states", m.optimizer_states},
      {"activations", m.activations}, {"buffers", m.buffers}, {"runtime", m.runtime},
      {"fragmentation", m.fragmentation}};
  for (const auto& [name, bytes] : parts) gpu["breakdown_bytes"][name] = bytes.count();
  gpu["bytes_per_trainable_parameter"] = m.bytes_per_param_gpu;
  gpu["data_parallel"] = m.data_parallel;
  gpu["shard_degree"] = m.shard_degree;
  gpu["gradient_accumulation_steps"] = m.gradient_accumulation;
  gpu["in_flight_microbatches"] = m.in_flight_microbatches;
  metrics["memory"]["gpu"] = gpu;
  metrics["memory"]["host"] = {{"peak_bytes", m.host_peak.count()},
                               {"pinned_bytes", m.host_pinned.count()},
                               {"pageable_bytes", m.host_pageable.count()},
                               {"capacity_bytes", m.host_capacity.count()},
                               {"fits", m.host_fits}};
  metrics["memory"]["nvme"] = {{"bytes", m.nvme.count()}, {"capacity_bytes", m.nvme_capacity.count()}, {"fits", m.nvme_fits}};
  metrics["memory"]["fits"] = m.fits();
  metrics["model"]["trainable_parameters_per_gpu"] = std::llround(m.trainable_parameters);

  if (!m.architecture_known) {
    metrics["memory"]["gpu"]["not_modelled"] = {"activations", "buffers"};
    notes.push_back("the model is a bare parameter count: activations and gathered-parameter buffers need an "
                    "architecture and are not included");
  }
  if (!m.fits()) {
    auto sorted = parts;
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    std::string top = "does not fit: needs " + human_bytes(m.peak) + " per GPU of " + human_bytes(m.capacity) +
                      "; largest: ";
    for (int i = 0; i < 3; ++i) {
      top += (i ? ", " : "") + sorted[i].first + " " + human_bytes(sorted[i].second) + " (" +
             percent(sorted[i].second.as_double(), m.peak.as_double()) + ")";
    }
    notes.push_back(top);
    for (const auto& hint : training_fit_hints(s, m)) notes.push_back("try " + hint);
  }
}

void add_serving_memory(nlohmann::ordered_json& metrics, std::vector<std::string>& notes, const Scenario& s,
                        const ServingMemory& m) {
  nlohmann::ordered_json gpu;
  gpu["peak_bytes"] = m.peak.count();
  gpu["capacity_bytes"] = m.capacity.count();
  gpu["budget_bytes"] = m.budget.count();
  gpu["fits"] = m.fits;
  gpu["weights_bytes"] = m.weights.count();
  gpu["breakdown_bytes"] = {{"weights", m.weights.count()},
                            {"kv_cache", m.kv_pool.count()},
                            {"activations", m.activations.count()},
                            {"runtime", m.runtime.count()},
                            {"cuda_graphs", m.cuda_graphs.count()}};
  metrics["memory"]["gpu"] = gpu;
  metrics["memory"]["fits"] = m.fits;

  nlohmann::ordered_json kv;
  kv["method"] = std::string(kKvCompressionNames.name(s.inference->kv_cache.compression.method));
  kv["bytes_per_token"] = m.kv_bytes_per_token;
  kv["bytes_per_token_uncompressed"] = m.kv_bytes_per_token_uncompressed;
  kv["bytes_per_stored_token"] = m.kv_bytes_per_stored_token;
  kv["compression_ratio"] = m.kv_bytes_per_token_uncompressed / m.kv_bytes_per_token;
  kv["memory_bytes"] = m.kv_pool.count();
  kv["block_bytes"] = m.block_bytes.count();
  kv["capacity_blocks"] = m.capacity_blocks;
  kv["capacity_tokens"] = m.capacity_tokens;
  kv["max_context_tokens"] = m.max_context_tokens;
  kv["max_len_sequences"] = m.max_len_sequences;
  kv["typical_request_tokens"] = {{"prompt", m.typical_prompt}, {"output", m.typical_output}};
  kv["typical_concurrent_sequences"] = m.typical_sequences;
  metrics["kv_cache"] = kv;

  if (!m.fits) {
    notes.push_back("does not fit: " + m.why_not);
    for (const auto& hint : serving_fit_hints(s, m)) notes.push_back("try " + hint);
  }
}

}  // namespace memtwin
