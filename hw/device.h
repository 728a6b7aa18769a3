#pragma once
// What the plan executor needs from a device: run a compute or copy op to completion on the calling
// thread, and run a collective among the ranks of an op's group. The host device implements these
// with OpenBLAS, memory streams and MPI (hw/host/); a CUDA device would with cuBLAS, the kernels of
// kernels/cuda and NCCL. Contract: every method may be called from several threads at once (one per
// stream of the plan), and blocks until the op is done on this rank.
#include <atomic>

#include "models/plan/plan.h"

namespace memtwin::hw {

class DeviceKernels {
 public:
  virtual ~DeviceKernels() = default;
  virtual void compute(const Op& op) = 0;
  virtual void copy(const Op& op) = 0;
};

class Collectives {
 public:
  virtual ~Collectives() = default;
  /// Runs the op's collective (or pipeline send/receive) with the other members of this rank's
  /// group for the op's role. A failed call throws, naming the call and the error. Returns false
  /// when `stop` was raised while it waited (the step is being abandoned).
  virtual bool run(const Op& op, const std::atomic<bool>& stop) = 0;
};

}  // namespace memtwin::hw
