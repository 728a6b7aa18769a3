#pragma once
// The result fields of a simulated serving run (issue 5's output contract) and its per-request CSV.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/scenario.h"
#include "sim/serving_simulation.h"

namespace memtwin::sim {

/// latency_s, throughput, goodput, requests, kv_cache.peak_utilization, tier traffic; notes for
/// people (an unsustainable load, rejected requests).
void add_serving_results(nlohmann::ordered_json& metrics, std::vector<std::string>& notes, const Scenario& scenario,
                         const ServingSimulation& run);

std::string requests_csv(const ServingSimulation& run);

/// Perfetto trace of a serving run: a process per replica with its iterations (decode sequences
/// and prefill tokens in the args), KV occupancy of replica 0 as a counter track.
std::string serving_trace(const ServingSimulation& run);

}  // namespace memtwin::sim
