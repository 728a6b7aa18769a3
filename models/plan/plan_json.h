#pragma once
// The training Plan as a JSON document (`memtwin run --emit-plan FILE`, schema
// "memtwin.training_plan/1", docs/schema/training-plan.schema.json): every program's ops as both
// backends execute them, which ranks run which program, and the communicator groups, so that a
// user can inspect what will run (as ASTRA-sim's Chakra traces let one). Written op by op: a plan
// of millions of ops is streamed, never held as one JSON tree.
#include <iosfwd>

#include "models/plan/plan.h"

namespace memtwin {

inline constexpr const char* kTrainingPlanSchema = "memtwin.training_plan/1";

void write_training_plan_json(std::ostream& out, const Plan& plan);

}  // namespace memtwin
