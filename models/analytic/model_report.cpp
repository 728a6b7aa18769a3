#include "models/analytic/model_report.h"

#include "models/model_facts.h"

#include <cmath>

namespace memtwin {

nlohmann::ordered_json model_report(const Scenario& s) {
  const ModelSpec& m = s.model;
  const ParameterCount count = count_parameters(m);
  nlohmann::ordered_json out;
  out["name"] = m.name;
  out["parameters"] = std::llround(count.total);
  if (!m.architecture_known) {
    out["architecture_known"] = false;
    return out;
  }
  out["active_parameters"] = std::llround(count.active);
  out["parameters_per_layer"] = std::llround(count.per_layer);
  out["embedding_parameters"] = std::llround(count.embedding + count.position + count.lm_head);
  const int context = s.training ? s.training->seq_len : s.inference->serving.max_model_len;
  out["context_tokens"] = context;
  const double forward = forward_flops_per_token(m, context).value();
  out["forward_flops_per_token"] = forward;
  out["training_flops_per_token"] = 3 * forward;
  // KV bytes per token in 16-bit, for the whole model (one GPU, no parallelism).
  out["kv_bytes_per_token_16bit"] = kv_bytes_per_token(m, 2.0).count();
  return out;
}

}  // namespace memtwin
