#pragma once
// Serving on SimGrid: a router actor releases requests at their arrival times to replica actors;
// each replica runs the shared continuous-batching scheduler (models/serving/batch_scheduler.h) on
// its GPUs of the cluster's platform (sim/platform.h): KV swaps and tier fetches cross each GPU's
// PCIe link (NVMe reads first) before the iteration, the iteration sleeps its kernels' roofline
// time (models/serving/iteration_cost.h), tensor parallelism's all-reduces run as ring flows over
// the replica's GPUs, and NVMe demotions and proactive offloads run in the background, contending
// with later transfers. Requests are data inside the actors, not actors.
#include "models/progress.h"
#include "models/scenario.h"
#include "models/serving/serving_run.h"

namespace memtwin::sim {

ServingRun simulate_serving(const Scenario& scenario, Progress* progress = nullptr);

}  // namespace memtwin::sim
