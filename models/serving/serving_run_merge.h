#pragma once
// A serving run executed by several processes, one per replica (the hardware engine's expert-
// parallel ranks): each fills the records of the requests routed to it and its own counters; the
// first rank merges the others' shares into its run, which then reads as one run of every replica,
// as the simulator fills it. Shares travel as JSON text.
#include <string>

#include "models/serving/serving_run.h"

namespace memtwin {

/// What replica `replica` contributed to `run`: its requests' records, its inter-token gaps, its
/// iterations, counters, peaks, op times and executed ops.
std::string replica_share(const ServingRun& run, int replica);

/// Adds a share from replica_share (another replica's) to `run`: its requests' records replace
/// those entries, counters add, peaks take the larger, gaps, iterations and ops join. Throws
/// std::invalid_argument when the share does not fit the run (another request stream).
void merge_replica_share(ServingRun& run, const std::string& share);

}  // namespace memtwin
