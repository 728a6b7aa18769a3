#pragma once
// "Will it fit?" for training: the per-GPU breakdown, host and NVMe use, and what to change when
// it does not fit. Closed forms only; the simulator's memory timeline must agree with `peak`.
#include <string>
#include <vector>

#include "models/memory/activations.h"
#include "models/memory/model_states.h"
#include "models/scenario.h"
#include "models/units.h"

namespace memtwin {

struct TrainingMemory {
  // Per GPU (the heaviest pipeline stage).
  Bytes parameters, gradients, optimizer_states, activations, buffers, runtime, fragmentation;
  Bytes peak;
  Bytes capacity;
  bool gpu_fits = true;
  // Per node.
  Bytes host_pinned, host_pageable, host_peak, host_capacity;
  bool host_fits = true;
  Bytes nvme, nvme_capacity;
  bool nvme_fits = true;
  // Context for the report.
  double trainable_parameters = 0;  ///< per GPU, before data-parallel sharding
  double bytes_per_param_gpu = 0;
  int data_parallel = 1;
  int shard_degree = 1;
  int in_flight_microbatches = 1;
  int gradient_accumulation = 1;
  bool architecture_known = true;

  [[nodiscard]] Bytes model_states() const { return parameters + gradients + optimizer_states; }
  [[nodiscard]] bool fits() const { return gpu_fits && host_fits && nvme_fits; }
};

TrainingMemory training_memory(const Scenario& scenario);

/// What would make a non-fitting job fit, most effective first ("full recompute would save ...").
std::vector<std::string> training_fit_hints(const Scenario& scenario, const TrainingMemory& memory);

}  // namespace memtwin
