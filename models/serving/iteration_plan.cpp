#include "models/serving/iteration_plan.h"

#include "models/hash.h"
#include "models/serving/serving_gemms.h"

namespace memtwin {

std::string op_signature(IterationOp kind, const std::string& detail) {
  std::string s = kIterationOpNames[static_cast<std::size_t>(kind)];
  if (!detail.empty()) s.append(" ").append(detail);
  return s;
}

std::string collective_signature(const std::string& kind, const std::string& group) {
  return op_signature(IterationOp::collective, kind + " " + group);
}

IterationPlan::IterationPlan(const Scenario& s)
    : attention_format_(decode_kernel_format(s.inference->kv_cache)),
      selection_(kv_method(s.inference->kv_cache.compression.method).selection),
      method_(kv_method(s.inference->kv_cache.compression.method).name()),
      tensor_parallel_(s.inference->serving.tensor_parallel),
      expert_parallel_(s.inference->serving.expert_parallel_size()) {
  for (const ServingGemm& g : serving_weight_gemms(s.model, tensor_parallel_, expert_parallel_)) {
    gemms_.push_back(std::to_string(g.inner) + "x" + std::to_string(g.outputs));
  }
  // The collectives the iteration model runs (it decides their number and size).
  const IterationModel model(s);
  IterationLoad one_token;
  one_token.decode_sequences = 1;
  if (model.tp_all_reduces() > 0) {
    collectives_.push_back({"all_reduce", "tensor_parallel", model.tp_all_reduces(), model.tp_all_reduce_bytes(one_token)});
  }
  if (model.ep_collectives() > 0) {
    for (const char* kind : {"all_gather", "reduce_scatter"}) {
      collectives_.push_back({kind, "expert_parallel", model.ep_collectives(), model.ep_collective_bytes(1)});
    }
  }
}

IterationOpKinds IterationPlan::kinds(const IterationLoad& load) const {
  IterationOpKinds k = 0;
  const int tokens = load.prefill_tokens + load.decode_sequences;
  if (tokens == 0) return k;
  k |= op_bit(IterationOp::weight_gemm) | op_bit(IterationOp::elementwise) | op_bit(IterationOp::kv_write);
  if (load.prefill_tokens > 0) k |= op_bit(IterationOp::prefill_attention);
  if (load.decode_sequences > 0) k |= op_bit(IterationOp::decode_attention);
  if (selection_ == KvSelection::prompt_vote && load.completed_prompt_tokens > 0) k |= op_bit(IterationOp::kv_selection);
  if (!collectives_.empty()) k |= op_bit(IterationOp::collective);
  if (selection_ == KvSelection::accumulated_scores) {
    k |= op_bit(IterationOp::score_upkeep);
    if (load.prefill_tokens > 0) k |= op_bit(IterationOp::kv_selection);
  }
  return k;
}

std::set<std::string> IterationPlan::signatures(IterationOpKinds kinds) const {
  std::set<std::string> out;
  for (std::size_t i = 0; i < kIterationOps; ++i) {
    const auto op = static_cast<IterationOp>(i);
    if (!(kinds & op_bit(op)) || op == IterationOp::host) continue;
    switch (op) {
      case IterationOp::weight_gemm:
        for (const std::string& shape : gemms_) out.insert(op_signature(op, shape));
        break;
      case IterationOp::decode_attention:
      case IterationOp::kv_write: out.insert(op_signature(op, attention_format_)); break;
      case IterationOp::collective:
        for (const Collective& c : collectives_) out.insert(collective_signature(c.kind, c.group));
        break;
      default: out.insert(op_signature(op)); break;
    }
  }
  return out;
}

nlohmann::ordered_json IterationPlan::to_json() const {
  // When each kind runs: the rules kinds() applies.
  auto when = [&](IterationOp op) -> std::string {
    switch (op) {
      case IterationOp::weight_gemm:
      case IterationOp::elementwise:
      case IterationOp::kv_write: return "every iteration with a token to compute";
      case IterationOp::prefill_attention: return "iterations with prompt tokens";
      case IterationOp::decode_attention: return "iterations with decoding sequences";
      case IterationOp::kv_selection:
        return selection_ == KvSelection::prompt_vote ? "iterations in which a prompt's prefill completes"
                                                      : "iterations with prompt tokens (scoring them)";
      case IterationOp::score_upkeep: return "every iteration with a token to compute";
      case IterationOp::collective: return "every iteration with a token to compute (each replica of a lockstep group)";
      default: return "";
    }
  };
  IterationLoad busiest;  // prompt tokens that complete, and decodes: every kind the method has
  busiest.prefill_tokens = 1;
  busiest.decode_sequences = 1;
  busiest.completed_prompt_tokens = 1;
  const IterationOpKinds all = kinds(busiest);
  nlohmann::ordered_json ops = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < kIterationOps; ++i) {
    const auto op = static_cast<IterationOp>(i);
    if (!(all & op_bit(op))) continue;
    for (const std::string& signature : signatures(op_bit(op))) {
      ops.push_back({{"kind", kIterationOpNames[i]}, {"signature", signature}, {"runs_when", when(op)}});
    }
  }
  nlohmann::ordered_json collectives = nlohmann::ordered_json::array();
  for (const Collective& c : collectives_) {
    collectives.push_back({{"kind", c.kind}, {"group", c.group}, {"per_iteration", c.per_iteration}, {"bytes_per_token", c.bytes_per_token}});
  }
  return {{"schema", "memtwin.iteration_plan/1"},
          {"kv_method", method_},
          {"tensor_parallel", tensor_parallel_},
          {"expert_parallel", expert_parallel_},
          {"ops", ops},
          {"collectives", collectives}};
}

std::string iteration_plan_hash(const std::string& serving_hash, const std::set<std::string>& ops) {
  Fnv1a f;
  f.add(serving_hash);
  for (const std::string& op : ops) f.add(op);
  return f.hex();
}

}  // namespace memtwin
