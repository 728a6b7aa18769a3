#pragma once
// The hardware backend (`memtwin run --backend hw`): executes the scenario's Plan, the same op
// graph the simulator runs, on a real device, and reports the same result fields, measured.
//   host   training: one MPI rank per plan rank on this machine's CPUs: OpenBLAS GEMMs, memory
//          streams, MPI collectives, page-touched host memory through the caching allocator;
//          serving: one process running the shared scheduler over a real model and paged KV cache
//          (hw/serving_engine.h) on OpenBLAS and the CPU KV kernels
//   cuda   training: one MPI rank per GPU, cuBLAS GEMMs of the plan's shapes, cudaMalloc through the
//          caching allocator, NCCL collectives (hw/cuda/cuda_device.h); serving: the same engine
//          on cuBLAS and the CUDA KV kernels (hw/cuda/cuda_serving.cu). Built when nvcc is found,
//          not yet run on a GPU.
// A plan with several ranks runs under an MPI launcher with that many processes (`memtwin validate`
// starts them itself); rank 0 reports, the other ranks print nothing.
#include <memory>
#include <string>

#include "models/backend.h"

namespace memtwin {

struct HwOptions {
  std::string device = "host";
  int steps = 3;  ///< timed steps after one warm-up step; the median is reported
  /// --layers: the scenario runs with fewer layers than its model's `full_layers`; a training step
  /// is measured at `shallower`'s depth too, and step time and peak memory are extrapolated
  /// linearly in depth to the full model (result: depth_scaling).
  std::shared_ptr<const Scenario> shallower;
  int full_layers = 0;
};

std::unique_ptr<Backend> make_hw_backend(const HwOptions& options);

/// The device names `--device` accepts.
inline const char* const kHwDevices = "host, cuda";

}  // namespace memtwin
