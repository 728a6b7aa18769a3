#pragma once
// The host device's kernels: the plan's compute ops on the CPU, one core per rank.
//   gemm, attention   OpenBLAS sgemm over the op's own shapes (GemmShape), repeated so that the
//                     FLOPs executed equal the op's FLOPs (a backward runs its shapes twice)
//   elementwise       a memory stream moving the op's bytes (read + write)
//   cpu_optimizer     a real Adam update over the op's parameter count
//   copy              memcpy of the op's bytes (host memory is both sides of a "PCIe" copy); the
//                     NVMe tier's copies are file I/O on a scratch file (nvme_file.h)
// Operands live in a fixed workspace (the analogue of cuBLAS's workspace): GEMMs larger than it are
// tiled, so the process's memory does not depend on the model and `memtwin calibrate` measures it
// once as the runtime overhead. The calibration microbenchmarks call these same functions.
#include <cstdint>
#include <vector>

#include "hw/caching_allocator.h"
#include "hw/device.h"
#include "hw/host/nvme_file.h"

namespace memtwin::hw {

/// Switches the calling thread, and the threads it starts afterwards, to flush denormal floats to
/// zero (x86's FTZ and DAZ). A GPU computes on denormals at full speed; an Intel core takes a
/// microcode assist per denormal operand or result (measured here: Adam over the streaming
/// buffers' leftover bits at 4.5e6 instead of 5e8 updates per second; decode steps over
/// channel-key groups 15% slower).
/// The host device stands in for a GPU, so its times must not depend on how small its placeholder
/// values get, nor on the CPU's vendor (AMD's cores pay far less).
void flush_denormals_to_zero();

/// The host device's kernels. Constructing them calls flush_denormals_to_zero() (calibration and
/// the plan executor construct them before their threads start). The serving device does not
/// construct them and runs without FTZ/DAZ; turning it on there changed no TPOT median by more
/// than 3 points on 2026-12-02 (docs/hardware-backend.md, "Serving's TPOT on Intel hosts").
class HostKernels final : public DeviceKernels {
 public:
  HostKernels();
  void compute(const Op& op) override;
  void copy(const Op& op) override;

  /// C[m,n] = A[m,k] B[k,n], `count` times (tiled over the workspace when needed).
  void gemm(const GemmShape& shape);
  /// Moves `bytes` through memory: half read, half written.
  void stream(double bytes);
  /// Copies `bytes` from one buffer to another.
  void memcopy(double bytes);
  /// One Adam step over `parameters` fp32 parameters (parameter, gradient, two moments).
  void adam(double parameters);

  /// The first output element of the last GEMM: with the workspace's constant operands it is
  /// k x 0.01 x 0.01, which the calibration checks.
  [[nodiscard]] float last_gemm_output() const { return last_output_ ? *last_output_ : 0.0f; }
  /// FLOPs the GEMMs have performed so far (2 m n k per product, every tile and repeat).
  [[nodiscard]] double gemm_flops_done() const { return gemm_flops_done_; }

  /// Bytes the workspace holds (resident from construction).
  [[nodiscard]] std::int64_t workspace_bytes() const;

 private:
  NvmeTier nvme_;
  std::vector<float> operands_;  ///< A, B, C of a GEMM tile
  std::vector<char> from_, to_;  ///< streaming buffers
  const float* last_output_ = nullptr;
  double gemm_flops_done_ = 0;
};

/// One core per rank, as one GPU per rank: single-threaded BLAS and OpenMP.
void use_one_core();

/// The host device's memory for the caching allocator: aligned, and written once so that it is
/// resident (the OS would otherwise count untouched pages as free, and the process's peak would not
/// show them).
RawMemory host_device_memory();
/// That memory with its accounting: in use is the process's resident set, peak its VmHWM.
DeviceMemory host_memory();

}  // namespace memtwin::hw
