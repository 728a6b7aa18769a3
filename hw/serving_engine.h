#pragma once
// A serving engine on a device: the scenario's model with real (fp32) weights and a real paged KV
// cache in device memory, driven by the same continuous-batching scheduler the simulator runs
// (models/serving/batch_scheduler.h), with requests released at their arrival times on the wall
// clock. Each iteration runs, per layer, the batch's GEMMs (the model's shapes), writes the new
// tokens' K and V into the paged cache in the compressor's format, decode attention over the paged
// cache (kernels/, fp16, fp8 or int8/int4/int2 group quantisation), prefill attention's per-head
// products over the chunk and its prefix; then the output head for the sequences producing a
// token; each block has its norms, rotary embedding, residual adds and gated activation. Swap
// preemption moves the blocks' bytes over the host link. What the result reports is measured:
// token times from the wall clock, memory from the allocator and the device.
//
// The device is a ServingKernels (hw/serving_kernels.h: the host's OpenBLAS and CPU kernels, or
// CUDA's cuBLAS and kernels/cuda) with its raw memory and its own view of memory in use.
// Shared prefixes (inference.serving.prefix_caching) live in blocks of their own that the
// sequences of a prefix group read through their block tables, as in vLLM; prefixes evicted to the
// host tier and fetched back cross the host link before the iteration (proactive copies, which run
// in the background, are not made).
// Methods that keep fewer tokens than they see keep them as hw/kv/kv_eviction.h says (those that
// score tokens on devices with the score kernels: the host, and CUDA's); the layers of a method with
// per-layer budgets have block tables of their own (hw/block_pool.h); keys grouped per channel live
// in hw/kv/channel_key_group_cache.h. What a method stores and keeps is its descriptor's to say
// (models/kv/kv_method.h).
// A mixture-of-experts layer runs its router's GEMM, then each expert's GEMMs over the tokens routed
// to it (balanced routing: the weights are synthetic), skipping experts without tokens.
// Expert parallelism (inference.serving.expert_parallel) runs one process per replica, each holding
// its share of the experts, in a ServingGroup (hw/serving_group.h): the ranks route every arrival
// alike, step in lockstep (a rank without a batch runs a one-token dummy, as vLLM's data-parallel
// ranks do), exchange each MoE layer's tokens, and rank 0 reports the merged run.
// Supported: one replica or an expert-parallel group of them, no tensor or pipeline parallelism,
// fp32 weights, every KV method whose descriptor runs on devices (16-bit or fp8 vectors, or integer
// groups at head_dim 64, 128 or 256), no NVMe tier. Anything else throws Unsupported naming it.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "hw/caching_allocator.h"
#include "hw/real_weights.h"
#include "hw/serving_group.h"
#include "hw/serving_kernels.h"
#include "models/scenario.h"
#include "models/serving/request_stream.h"
#include "models/serving/serving_run.h"

namespace memtwin::hw {

/// What a serving run executes on.
struct ServingDevice {
  std::unique_ptr<ServingKernels> kernels;
  DeviceMemory memory;
  std::string description;
};

struct ServingMeasurement {
  ServingRun run;
  CachingAllocator::Stats allocator;
  std::int64_t peak_bytes = 0;     ///< the device's peak in use (the process's VmHWM on the host)
  std::int64_t runtime_bytes = 0;  ///< in use before the model's tensors
  std::int64_t weights_bytes = 0, kv_pool_bytes = 0;
  /// The run stopped here: a tensor the device could not hold (after `iterations_done`).
  std::optional<DeviceOutOfMemory> oom;
  std::int64_t iterations_done = 0;
};

/// A real model served instead of the scenario's synthetic weights (hw/real_weights.h): its
/// weights (the scenario's model must have their shape), the requests to run in place of the
/// scenario's workload (each prompt prefilled in one chunk), and their tokens and logits.
struct RealModelRun {
  const RealWeights* weights = nullptr;
  std::vector<Request> requests;
  TokenStream* tokens = nullptr;
};

/// Throws Unsupported naming what the serving engine cannot run in this scenario.
void require_serving_support(const Scenario& scenario);

/// The processes a serving run takes: one, or one per replica of an expert-parallel group.
int serving_ranks(const Scenario& scenario);

/// Serves the scenario's workload on the device. The scenario must fit in memory
/// (serving_memory(scenario).fits); the caller reports it otherwise. Running out of device memory
/// anyway stops the run and is returned in `oom`, with what was measured until then (in a group,
/// the other ranks are left waiting: the caller stops them). `group`: this rank's expert-parallel
/// group, of serving_ranks(scenario) ranks, when that is more than one; on rank 0 the result is the
/// whole group's, with the busiest rank's memory.
/// `real`: a real model and its requests instead (one rank, no group).
ServingMeasurement serve_on_device(const Scenario& scenario, ServingDevice& device, ServingGroup* group = nullptr,
                                   const RealModelRun* real = nullptr);

}  // namespace memtwin::hw
