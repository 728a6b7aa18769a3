#pragma once
// Executes one rank's Program on a device, as the simulator does in simulated time: one thread per
// stream runs that stream's ops in order, each op first waiting for its dependencies; alloc and free
// ops go through the caching allocator (the books the simulator keeps), compute and copy ops to the
// device's kernels, collectives to its communicator. Times are wall-clock from the step's start.
//
// The "runtime" tensor is not allocated: on a real device the runtime is the process itself
// (context, libraries, communicator buffers), measured from outside. Tensors never freed in the
// program (model states) stay resident from one step to the next, as a training loop keeps them.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hw/caching_allocator.h"
#include "hw/device.h"
#include "models/plan/plan.h"
#include "models/plan/step_trace.h"

namespace memtwin::hw {

struct OpTime {
  double start_s = -1, end_s = -1;  ///< -1: the op did not run (the step stopped first)
};

struct StepExecution {
  double step_s = 0;
  double compute_busy_s = 0;  ///< the compute stream's busy time
  double comm_busy_s = 0;     ///< the communication stream's busy time
  std::vector<OpTime> ops;    ///< by op index
  MemoryTimeline memory;      ///< bytes the allocator has handed out, after each alloc and free
  std::optional<DeviceOutOfMemory> oom;  ///< the step stopped here
  std::string oom_op;
};

class PlanExecutor {
 public:
  PlanExecutor(const Program& program, DeviceKernels& kernels, Collectives& collectives, CachingAllocator& allocator);
  ~PlanExecutor();
  PlanExecutor(const PlanExecutor&) = delete;
  PlanExecutor& operator=(const PlanExecutor&) = delete;

  /// Runs the whole program once. Out of memory stops the step and is reported, not thrown;
  /// a failed collective or kernel throws.
  StepExecution run_step();

 private:
  const Program& program_;
  DeviceKernels& kernels_;
  Collectives& collectives_;
  CachingAllocator& allocator_;
  std::map<std::string, void*> resident_;  ///< live tensors by name
};

}  // namespace memtwin::hw
