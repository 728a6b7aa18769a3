#include "models/plan/pipeline_schedule.h"

#include <algorithm>

namespace memtwin {

std::vector<Pass> pipeline_schedule(PipelineSchedule kind, int stage, int stages, int microbatches, int chunks) {
  std::vector<Pass> order;
  if (stages == 1) {
    // Without a pipeline each micro-batch's backward follows its forward (gradient accumulation).
    for (int mb = 0; mb < microbatches; ++mb) {
      order.push_back({'F', mb, 0});
      order.push_back({'B', mb, 0});
    }
    return order;
  }
  if (kind == PipelineSchedule::gpipe) {
    for (int mb = 0; mb < microbatches; ++mb) order.push_back({'F', mb, 0});
    for (int mb = 0; mb < microbatches; ++mb) order.push_back({'B', mb, 0});
    return order;
  }
  // 1F1B is the interleaved schedule with one chunk.
  const int total = microbatches * chunks;
  const int group = stages * chunks;
  auto pass = [&](char k, int i) {
    const int c = (i % group) / stages;
    return Pass{k, (i / group) * stages + i % stages, k == 'F' ? c : chunks - 1 - c};
  };
  const int warmup = chunks == 1 ? std::min(stages - stage - 1, total)
                                 : std::min((stages - stage - 1) * 2 + (chunks - 1) * stages, total);
  for (int i = 0; i < warmup; ++i) order.push_back(pass('F', i));
  for (int i = 0; i < total - warmup; ++i) {
    order.push_back(pass('F', warmup + i));
    order.push_back(pass('B', i));
  }
  for (int i = total - warmup; i < total; ++i) order.push_back(pass('B', i));
  return order;
}

}  // namespace memtwin
