#pragma once
// Emits the program of one pipeline stage: its persistent state, the forward and backward of each
// micro-batch in the order the pipeline schedule gives, and the optimizer step. Internal to the
// training plan builder (training_plan.cpp), which owns the groups and the schedule.
#include <memory>
#include <string>
#include <vector>

#include "models/plan/pipeline_schedule.h"
#include "models/plan/plan.h"
#include "models/scenario.h"

namespace memtwin {

struct StageSpec {
  int stage = 0, stages = 1;
  /// Interleaved schedules give a stage several model chunks; each chunk is a virtual stage
  /// (chunk x stages + stage) that sends to the next virtual stage. Without interleaving the
  /// virtual stage is the stage.
  int virtual_stage = 0, virtual_stages = 1;
  int first_layer = 0, layers = 0;  ///< the blocks this chunk holds
  bool has_embedding = true, has_head = true;
  int microbatches = 1;
  int dp_ranks = 1;                 ///< size of the data-parallel group
  bool hybrid = false;              ///< FSDP hybrid shard across replica groups
  int shard_degree = 1;
};

class StageProgramBuilder {
 public:
  StageProgramBuilder(const Scenario& scenario, const StageSpec& spec, Program& program);
  /// The stage's persistent state; a stage's other chunks `attach` to the chunk that ran it.
  void prologue();
  void attach(const StageProgramBuilder& first);
  void forward(int microbatch);
  void backward(int microbatch);
  /// The optimizer step after every chunk's gradient reductions; `other_chunks` adds theirs and
  /// their blocks to the parameter all-gathers of ZeRO-1/2.
  void epilogue(const std::vector<const StageProgramBuilder*>& other_chunks = {});
  [[nodiscard]] Bytes persistent_bytes() const { return persistent_; }

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  Bytes persistent_;
};

}  // namespace memtwin
