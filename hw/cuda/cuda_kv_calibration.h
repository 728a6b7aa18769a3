#pragma once
// `memtwin calibrate --device cuda`'s measurements of memtwin's CUDA KV kernels (part of
// hw/cuda/cuda_calibration.cu's run): decode attention per KV format by working set and the paged
// writes; KIVI's decode attention over its groups and over its residual, and its append.
#include "hw/calibration.h"

namespace memtwin::hw {

void measure_kv_kernels(DeviceCalibration& c, double min_seconds);
void measure_kivi_kernels(DeviceCalibration& c, double min_seconds);

}  // namespace memtwin::hw
