#pragma once
// The order in which a pipeline stage runs its micro-batches' forward and backward passes.
#include <vector>

#include "models/scenario.h"

namespace memtwin {

/// One pass of a stage's schedule: forward or backward of a micro-batch through one model chunk.
struct Pass {
  char kind = 'F';  ///< 'F' or 'B'
  int microbatch = 0;
  int chunk = 0;
};

/// The order of passes of a stage: GPipe runs every forward first; 1F1B runs
/// (stages - stage - 1) warm-up forwards, then alternates, then drains; the interleaved schedule
/// (Megatron-LM) runs (stages - stage - 1) x 2 + (chunks - 1) x stages warm-up forwards over
/// groups of `stages` micro-batches per chunk, then alternates, then drains.
std::vector<Pass> pipeline_schedule(PipelineSchedule kind, int stage, int stages, int microbatches, int chunks = 1);

}  // namespace memtwin
