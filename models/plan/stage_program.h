#pragma once
// Emits the program of one pipeline stage: its persistent state, the forward and backward of each
// micro-batch in the order the pipeline schedule gives, and the optimizer step. Internal to the
// training plan builder (training_plan.cpp), which owns the groups and the schedule.
#include <memory>
#include <string>
#include <vector>

#include "models/plan/plan.h"
#include "models/scenario.h"

namespace memtwin {

struct StageSpec {
  int stage = 0, stages = 1;
  int first_layer = 0, layers = 0;  ///< the blocks this stage holds
  bool has_embedding = true, has_head = true;
  int microbatches = 1;
  int dp_ranks = 1;                 ///< size of the data-parallel group
  bool hybrid = false;              ///< FSDP hybrid shard across replica groups
  int shard_degree = 1;
};

class StageProgramBuilder {
 public:
  StageProgramBuilder(const Scenario& scenario, const StageSpec& spec, Program& program);
  void prologue();
  void forward(int microbatch);
  void backward(int microbatch);
  void epilogue();
  [[nodiscard]] Bytes persistent_bytes() const { return persistent_; }

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  Bytes persistent_;
};

/// The order of forward ('F') and backward ('B') passes of a stage: GPipe runs every forward
/// first; 1F1B runs (stages - stage - 1) warm-up forwards, then alternates, then drains.
std::vector<std::pair<char, int>> pipeline_schedule(PipelineSchedule kind, int stage, int stages, int microbatches);

}  // namespace memtwin
