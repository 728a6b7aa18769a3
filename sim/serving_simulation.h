#pragma once
// Serving on SimGrid: a router actor releases requests at their arrival times to replica actors;
// each replica runs the shared continuous-batching scheduler (models/serving/batch_scheduler.h) and
// sleeps each iteration's roofline time (models/serving/iteration_cost.h) plus its swap transfers
// over PCIe. Requests are data inside the actors, not actors.
#include "models/scenario.h"
#include "models/serving/serving_run.h"

namespace memtwin::sim {

ServingRun simulate_serving(const Scenario& scenario);

}  // namespace memtwin::sim
