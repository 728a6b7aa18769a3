#pragma once
// A serving engine on the host device: the scenario's model with real (fp32) weights and a real
// paged KV cache in device memory, driven by the same continuous-batching scheduler the simulator
// runs (models/serving/batch_scheduler.h), with requests released at their arrival times on the
// wall clock. Each iteration runs, per layer, the batch's GEMMs (OpenBLAS, the model's shapes),
// writes the new tokens' K and V into the paged cache in the compressor's format, decode attention
// over the paged cache (kernels/, fp16 or int8/int4/int2 group quantisation), prefill attention as
// per-head GEMMs over the chunk and its prefix; then the output head for the sequences producing a
// token; each block has its norms, rotary embedding, residual adds and gated activation. Swap
// preemption copies the blocks' bytes. What the result reports is measured: token
// times from the wall clock, memory from the allocator and the process.
//
// Supported: one replica, no tensor or pipeline parallelism, fp32 weights, KV compression none or
// int8/int4/int2 (head_dim 64, 128 or 256). Anything else throws Unsupported naming it.
#include <cstdint>

#include "hw/caching_allocator.h"
#include "models/scenario.h"
#include "models/serving/serving_run.h"

namespace memtwin::hw {

struct HostServing {
  ServingRun run;
  CachingAllocator::Stats allocator;
  std::int64_t peak_resident_bytes = 0;  ///< the process's peak (VmHWM)
  std::int64_t runtime_bytes = 0;        ///< resident before the model's tensors
  std::int64_t weights_bytes = 0, kv_pool_bytes = 0;
};

/// Throws Unsupported naming what the host engine cannot run in this scenario.
void require_host_serving_support(const Scenario& scenario);

/// Serves the scenario's workload on this process's CPU core. The scenario must fit in memory
/// (serving_memory(scenario).fits); the caller reports it otherwise.
HostServing serve_on_host(const Scenario& scenario);

}  // namespace memtwin::hw
