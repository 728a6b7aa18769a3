#pragma once
// The CUDA device of the hardware backend: the plan's compute ops as cuBLAS GEMMs of the op's
// shapes (bf16, fp16 or fp32 as the training precision says), memory-bound ops as device copies,
// PCIe copies to pinned host memory, device memory from cudaMalloc through the caching allocator,
// collectives over NCCL (one communicator per role group, bootstrapped over MPI). Plain C++ header:
// the implementation is CUDA (cuda_device.cu), built when nvcc is found, as a loadable module.
//
// Contract as hw/device.h: each call blocks until its op is done on this rank's GPU; every stream
// of the plan calls from its own thread, each with its own CUDA stream and cuBLAS handle.
#include <cstdint>
#include <functional>
#include <memory>

#include "hw/caching_allocator.h"
#include "hw/calibration.h"
#include "hw/device.h"
#include "hw/serving_kernels.h"
#include "models/enums.h"

namespace memtwin::hw {

/// The CUDA device's entry points. They live in a module of their own (libmemtwin_cuda.so, next to
/// the memtwin binary) loaded only when a run asks for --device cuda, so that every other run
/// neither loads the CUDA libraries nor pays their start-up time and resident memory.
struct CudaDeviceApi {
  /// The GPU this rank uses: the launcher's local rank modulo the visible devices.
  int (*select_device)();
  /// `cpu_adam(parameters)` runs an offloaded optimizer step on the host (the host device's Adam).
  std::unique_ptr<DeviceKernels> (*make_kernels)(int device, Precision precision, std::function<void(double)> cpu_adam);
  RawMemory (*memory)(int device);
  /// Device memory in use as the driver reports it (total - free), bytes.
  std::int64_t (*in_use)(int device);
  /// NCCL communicators for this rank's groups; throws when the module was built without NCCL
  /// and the plan has collectives between ranks.
  std::unique_ptr<Collectives> (*make_collectives)(const Plan& plan, int rank, int device);
  /// The serving engine's kernels on this GPU (hw/cuda/cuda_serving.cu).
  std::unique_ptr<ServingKernels> (*make_serving_kernels)(int device);
  /// `memtwin calibrate --device cuda`: this GPU's microbenchmarks (hw/cuda/cuda_calibration.cu),
  /// each timed measurement running at least `min_seconds`.
  DeviceCalibration (*calibrate)(int device, double min_seconds);
};

/// Defined in cuda_serving.cu and cuda_calibration.cu, part of the module.
std::unique_ptr<ServingKernels> make_cuda_serving_kernels(int device);
DeviceCalibration calibrate_cuda(int device, double min_seconds);

/// Loads the module on first use. Throws Unsupported when it is not there (built without nvcc) or
/// cannot be loaded (no CUDA libraries on this machine), naming why.
const CudaDeviceApi& cuda_device();

}  // namespace memtwin::hw

/// Exported by the module.
extern "C" const memtwin::hw::CudaDeviceApi* memtwin_cuda_device_api();
