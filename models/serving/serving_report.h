#pragma once
// The result fields of a serving run, simulated or measured (issue 5's output contract), its
// per-request CSV and its trace.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/scenario.h"
#include "models/serving/serving_run.h"

namespace memtwin {

/// latency_s, throughput, goodput, requests, kv_cache.peak_utilization, tier traffic; notes for
/// people (an unsustainable load, rejected requests).
void add_serving_results(nlohmann::ordered_json& metrics, std::vector<std::string>& notes, const Scenario& scenario,
                         const ServingRun& run);

/// Disaggregated serving (inference.disaggregation): each side's instances (GPUs, KV capacity
/// and peak use, iterations) and the KV transfers (requests, bytes, seconds), and where the time to
/// the first token went (to the end of the prefill, then the transfer). `run` holds every request
/// and the decode instances' counters, `prefill_run` the prefill instances'.
nlohmann::ordered_json disaggregation_report(const Scenario& deployment, const ServingRun& run, const ServingRun& prefill_run);

/// One row per request; a disaggregated run's rows add when its prefill ended and its KV transfer's
/// bytes and seconds (prefilled_s, kv_transfer_bytes, kv_transfer_s; `replica` is its decode instance).
std::string requests_csv(const ServingRun& run, bool disaggregated = false);

/// Perfetto trace of a serving run: a process per replica with its iterations (decode sequences
/// and prefill tokens in the args), KV occupancy of replica 0 as a counter track.
std::string serving_trace(const ServingRun& run);

}  // namespace memtwin
