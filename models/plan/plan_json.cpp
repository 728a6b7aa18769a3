#include "models/plan/plan_json.h"

#include <ostream>

#include <nlohmann/json.hpp>

namespace memtwin {
namespace {

// One op with the fields its kind uses.
nlohmann::ordered_json op_json(const Op& op) {
  nlohmann::ordered_json j = {{"kind", op_kind_name(op.kind)}, {"stream", stream_name(op.stream)}, {"name", op.name}, {"deps", op.deps}};
  switch (op.kind) {
    case OpKind::compute: {
      j["compute_class"] = compute_class_name(op.compute_class);
      j["flops"] = op.flops;
      j["bytes"] = op.bytes;
      nlohmann::ordered_json gemms = nlohmann::ordered_json::array();
      for (const GemmShape& g : op.gemms) gemms.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"count", g.count}});
      j["gemms"] = gemms;
      break;
    }
    case OpKind::collective:
      j["collective"] = op.collective == Collective::p2p_forward    ? "p2p_forward"
                        : op.collective == Collective::p2p_backward ? "p2p_backward"
                                                                    : collective_name(op.collective);
      j["role"] = op.role;
      j["bytes_total"] = op.bytes_total;
      if (!op.tag.empty()) j["tag"] = op.tag;
      break;
    case OpKind::alloc:
    case OpKind::free:
      j["tensor"] = op.tensor;
      j["size_bytes"] = op.size.count();
      break;
    case OpKind::copy:
      j["direction"] = copy_direction_name(op.direction);
      j["bytes"] = op.bytes;
      break;
  }
  return j;
}

}  // namespace

void write_training_plan_json(std::ostream& out, const Plan& plan) {
  nlohmann::ordered_json head = {{"schema", kTrainingPlanSchema},
                                 {"plan_hash", plan.hash_hex()},
                                 {"description", plan.description},
                                 {"ranks", plan.ranks()},
                                 {"persistent_bytes", plan.persistent_bytes.count()},
                                 {"program_of_rank", plan.program_of_rank},
                                 {"groups", plan.groups}};
  // The head's members, then the programs streamed into the same object.
  const std::string text = head.dump();
  out << text.substr(0, text.size() - 1) << ",\"programs\":[";
  for (std::size_t p = 0; p < plan.programs.size(); ++p) {
    const Program& program = plan.programs[p];
    out << (p ? "," : "") << "{\"name\":" << nlohmann::json(program.name).dump() << ",\"ops\":[";
    for (std::size_t i = 0; i < program.ops.size(); ++i) out << (i ? ",\n" : "\n") << op_json(program.ops[i]).dump();
    out << "]}";
  }
  out << "]}\n";
}

}  // namespace memtwin
