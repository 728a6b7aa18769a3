#pragma once
// Disaggregated serving (inference.disaggregation): prefill instances and decode instances on
// separate GPUs, each an engine of its own under the rules the colocated engine follows. Each side
// is described by an instance scenario, the deployment's scenario with that side's replicas and
// tensor parallelism and its role; the memory model, the iteration model and the batch scheduler
// read it as they read any scenario. The prefill instances take the first GPUs in rank order, the
// decode instances the next.
#include "models/scenario.h"

namespace memtwin {

/// The deployment's `role` side as a scenario of its own (`role` is prefill or decode).
Scenario instance_scenario(const Scenario& deployment, InstanceRole role);

/// The first GPU (rank) of a side's instances.
int first_gpu_of(const Disaggregation& d, InstanceRole role);

}  // namespace memtwin
