#pragma once
// Microbenchmarks of the host device, measured the nccl-tests way: every rank runs them at once
// (as every GPU of a node would), each with warm-up runs, then timed repeats for at least a minimum
// time, and a correctness count of results that differ from the expected value. They call the same
// kernels and collectives the plan executor uses (HostKernels, MpiCollectives), so the calibrated
// simulator and the measured run time the same code.
#include "hw/calibration.h"

namespace memtwin::hw {

/// Runs on every rank of MPI_COMM_WORLD (collective); the result is the same on every rank.
/// `min_seconds` is the least time each timed measurement runs.
DeviceCalibration calibrate_host(double min_seconds = 0.2);

}  // namespace memtwin::hw
