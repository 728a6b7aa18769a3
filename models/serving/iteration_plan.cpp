#include "models/serving/iteration_plan.h"

#include "models/hash.h"
#include "models/serving/serving_gemms.h"

namespace memtwin {

std::string op_signature(IterationOp kind, const std::string& detail) {
  std::string s = kIterationOpNames[static_cast<std::size_t>(kind)];
  if (!detail.empty()) s.append(" ").append(detail);
  return s;
}

IterationPlan::IterationPlan(const Scenario& s)
    : attention_format_(decode_kernel_format(s.inference->kv_cache)),
      selection_(kv_method(s.inference->kv_cache.compression.method).selection) {
  for (const ServingGemm& g : serving_weight_gemms(s.model, s.inference->serving.tensor_parallel)) {
    gemms_.push_back(std::to_string(g.inner) + "x" + std::to_string(g.outputs));
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
      default: out.insert(op_signature(op)); break;
    }
  }
  return out;
}

std::string iteration_plan_hash(const std::string& serving_hash, const std::set<std::string>& ops) {
  Fnv1a f;
  f.add(serving_hash);
  for (const std::string& op : ops) f.add(op);
  return f.hex();
}

}  // namespace memtwin
