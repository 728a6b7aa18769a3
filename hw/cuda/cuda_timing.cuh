#pragma once
// The calibration's timing of GPU work, shared by hw/cuda/cuda_calibration.cu and
// hw/cuda/cuda_kv_calibration.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "hw/cuda/cuda_check.h"

namespace memtwin::hw {

// Seconds per call of `run` (work enqueued on the default stream): two warm-up calls, then five
// windows of at least min_seconds / 5 each timed with events; the median window.
template <class F>
double seconds_per_call(F&& run, double min_seconds) {
  run();
  run();
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> windows;
  long calls = 1;
  for (int w = 0; w < 5; ++w) {
    for (;;) {
      check(cudaEventRecord(start), "cudaEventRecord");
      for (long i = 0; i < calls; ++i) run();
      check(cudaEventRecord(stop), "cudaEventRecord");
      check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      if (ms * 1e-3 >= min_seconds / 5 || calls > (1L << 24)) {
        windows.push_back(ms * 1e-3 / static_cast<double>(calls));
        break;
      }
      calls *= 2;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(windows.begin(), windows.end());
  return windows[windows.size() / 2];
}

}  // namespace memtwin::hw
