#include "hw/serving_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <memory>
#include <optional>
#include <stdexcept>

#include "hw/block_pool.h"
#include "hw/device_model.h"
#include "hw/kv/channel_key_group_cache.h"
#include "hw/timed_serving_group.h"
#include "hw/timed_serving_kernels.h"
#include "models/backend.h"
#include "models/memory/serving_memory.h"
#include "models/serving/batch_scheduler.h"
#include "models/serving/request_stream.h"
#include "models/serving/router.h"
#include "models/serving/serving_run_merge.h"

namespace memtwin::hw {

void require_serving_support(const Scenario& s) {
  const Inference& inf = *s.inference;
  if (inf.disaggregation) throw Unsupported("disaggregated serving (inference.disaggregation) is simulated only");
  if (inf.serving.tensor_parallel != 1 || inf.serving.pipeline_parallel != 1) {
    throw Unsupported("the serving engine runs without tensor or pipeline parallelism");
  }
  if (inf.serving.replicas != 1 && inf.serving.expert_parallel_size() != inf.serving.replicas) {
    throw Unsupported("the serving engine runs one replica, or the replicas of an expert-parallel group "
                      "(inference.serving.expert_parallel: one rank each)");
  }
  if (inf.weight_dtype != WeightDtype::fp32) {
    throw Unsupported("the serving engine computes in fp32 (sgemm): set inference.weights.dtype: fp32");
  }
  if (inf.tiers.nvme) throw Unsupported("the NVMe tier (inference.tiers.nvme) is simulated only; the host tier runs");
  if (!s.model.architecture_known) throw Unsupported("serving on a device needs the model's architecture");
  kv_format(s);
  if (kv_method(inf.kv_cache.compression.method).storage == KvStorage::channel_key_groups) channel_key_group_shape(s, 1);
}

int serving_ranks(const Scenario& s) { return s.inference->serving.expert_parallel_size(); }

ServingMeasurement serve_on_device(const Scenario& s, ServingDevice& device, ServingGroup* group, const RealModelRun* real) {
  require_serving_support(s);
  if (real && (group || !real->weights || !real->tokens)) throw std::logic_error("a real model runs on one rank, with its weights and tokens");
  if ((group ? group->ranks() : 1) != serving_ranks(s)) {
    throw std::logic_error("a serving run of " + std::to_string(serving_ranks(s)) + " ranks in a group of " +
                           std::to_string(group ? group->ranks() : 1));
  }
  if (kv_method(s.inference->kv_cache.compression.method).scores_tokens() && !device.kernels->supports_score_eviction()) {
    std::string scored;
    for (const KvMethod* m : kv_methods())
      if (m->scores_tokens()) scored += (scored.empty() ? "" : ", ") + std::string(m->name());
    throw Unsupported("the score-based methods (" + scored +
                      ") run on --device host: this device has no attention-probability and eviction kernels yet");
  }
  using Clock = std::chrono::steady_clock;
  const Inference& inf = *s.inference;
  const ServingMemory memory = serving_memory(s);
  CachingAllocator allocator(s.cluster.gpu.memory.count(), device.memory.raw);
  ServingMeasurement out;
  out.runtime_bytes = device.memory.in_use();
  device.memory.reset_peak();
  out.run = start_serving_run(real ? real->requests : generate_requests(inf, s.seed));
  ServingRun& run = out.run;
  run.capacity_blocks = memory.capacity_blocks;
  const int me = group ? group->rank() : 0;
  const std::size_t replicas = group ? static_cast<std::size_t>(group->ranks()) : 1;
  // Every op is recorded (the plan hash says what ran); where the device's calls can be timed one by
  // one, each kind of work is (validate compares each with what the simulator priced), and the
  // host's share is what a forward pass spends outside them.
  TimedServingKernels timed(*device.kernels, run.op_seconds, run.executed_ops);
  ServingKernels& kernels = timed;
  std::optional<TimedServingGroup> timed_group;
  if (group) timed_group.emplace(*group, run.op_seconds, run.executed_ops);
  try {
    const auto kv = make_kv_compressor(inf.kv_cache.compression, serving_kv_shape(s));
    DeviceModel model(s, *kv, allocator, kernels, memory.capacity_blocks, memory.weights.count(),
                      memory.block_bytes.as_double(), timed_group ? &*timed_group : nullptr, real ? real->weights : nullptr);
    out.weights_bytes = memory.weights.count();
    out.kv_pool_bytes = model.pool_bytes();
    BatchScheduler scheduler(me, s, *kv, run, memory.capacity_blocks, memory.block_bytes.as_double());
    BlockPool blocks(memory.capacity_blocks, run);
    std::optional<LayerBlockPool> layer_blocks;  // per-layer budgets: each layer keeps its own number of tokens
    if (kv_method(inf.kv_cache.compression.method).per_layer_budgets) {
      layer_blocks.emplace(memory.capacity_blocks, s.model.layers, *kv, inf.serving.block_size);
    }

    const bool closed_loop = inf.workload.arrival == Arrival::closed_loop && inf.workload.trace.empty();
    const std::size_t total = run.requests.size();
    const std::size_t concurrency = std::min<std::size_t>(static_cast<std::size_t>(inf.workload.concurrency), total);
    std::size_t next = 0, finished = 0;
    // A group keeps one clock, rank 0's start on the machine's monotonic clock (its ranks share
    // the machine), and routes every arrival on every rank from the state all of them see.
    auto t0 = Clock::now();
    if (group) t0 = Clock::time_point(Clock::duration(group->all_gather({t0.time_since_epoch().count()}).front()));
    auto now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
    ReplicaRouter router(inf.serving.router, replicas);
    std::vector<std::int64_t> outstanding(replicas), used_blocks(replicas);  // at the iteration's start, plus routed since
    auto admit = [&](std::size_t record, double at) {
      RequestRecord& r = run.requests[record];
      r.arrival_s = at;
      std::size_t to = 0;
      if (group) {
        to = router.pick([&](std::size_t i) { return static_cast<std::size_t>(outstanding[i]); },
                         [&](std::size_t i) { return used_blocks[i]; });
        ++outstanding[to];
      }
      r.replica = static_cast<int>(to);
      if (to == static_cast<std::size_t>(me)) scheduler.enqueue(record, r.prompt_tokens);
    };
    scheduler.on_finish = [&](std::size_t) {
      ++finished;
      if (!group && closed_loop && next < total) admit(next++, now());
    };
    if (closed_loop) {
      while (next < concurrency) admit(next++, 0.0);
    }
    for (;;) {
      double at = now();
      std::size_t finished_everywhere = finished;
      if (group) {
        // Each rank's outstanding requests, KV blocks in use and finished requests; rank 0's clock
        // says what has arrived, and a closed loop issues as many requests as have finished.
        const std::vector<std::int64_t> state = group->all_gather(
            {static_cast<std::int64_t>(scheduler.outstanding()), scheduler.used_blocks(), static_cast<std::int64_t>(finished),
             static_cast<std::int64_t>(std::llround(at * 1e9))});
        finished_everywhere = 0;
        for (std::size_t r = 0; r < replicas; ++r) {
          outstanding[r] = state[4 * r];
          used_blocks[r] = state[4 * r + 1];
          finished_everywhere += static_cast<std::size_t>(state[4 * r + 2]);
        }
        at = static_cast<double>(state[3]) * 1e-9;
        if (closed_loop) {
          while (next < std::min(total, concurrency + finished_everywhere)) admit(next++, at);
        }
      }
      if (finished_everywhere >= total) break;
      if (!closed_loop) {
        // Release what has arrived, at its own arrival time: it waited from then.
        while (next < total && run.requests[next].arrival_s <= at) admit(next, run.requests[next].arrival_s), ++next;
      }
      auto it = scheduler.schedule();
      // A group steps together while any rank has a batch; a rank without one runs a dummy token.
      bool any = it.has_value();
      std::vector<int> group_rows;
      if (group) {
        const std::vector<std::int64_t> batch = group->all_gather({it ? 1 : 0, it ? iteration_tokens(*it) : 0});
        any = false;
        for (std::size_t r = 0; r < replicas; ++r) {
          any = any || batch[2 * r] != 0;
          group_rows.push_back(batch[2 * r] != 0 ? static_cast<int>(batch[2 * r + 1]) : 1);
        }
      }
      if (!any) {
        if (closed_loop || next >= total) throw std::logic_error("serving engine: requests outstanding but none can run");
        std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, run.requests[next].arrival_s - now())));
        continue;
      }
      if (!it) {
        model.idle_forward(group_rows);
        continue;
      }
      model.before_sync(*it, blocks);
      if (layer_blocks) layer_blocks->sync(scheduler.running());
      else blocks.sync(scheduler.running(), scheduler.cached_prefix_blocks());
      const double started = now();
      // Swaps and the host tier's prefix traffic cross the host link before the iteration.
      const double moved = it->swap_out_bytes + it->swap_in_bytes + it->tier.gpu_to_host + it->tier.host_to_gpu;
      if (moved > 0) device.kernels->swap(static_cast<std::int64_t>(moved));
      auto exchanged = [&] { return timed_group ? timed_group->seconds() : 0.0; };
      const double in_kernels = timed.kernel_seconds(), in_exchanges = exchanged(), forward_began = now();
      model.forward(*it, blocks, layer_blocks ? &*layer_blocks : nullptr, group_rows, real ? real->tokens : nullptr);
      if (timed.timing()) {
        run.op_seconds[IterationOp::host] +=
            (now() - forward_began) - (timed.kernel_seconds() - in_kernels) - (exchanged() - in_exchanges);
      }
      scheduler.complete(*it, started, now());
    }
    run.makespan_s = now();
    run.last_arrival_s = closed_loop || total == 0 ? run.makespan_s : run.requests.back().arrival_s;
  } catch (const DeviceOutOfMemory& e) {
    out.oom = e;
    out.iterations_done = run.iterations;
  }
  out.allocator = allocator.stats();
  out.peak_bytes = device.memory.peak();
  if (group && !out.oom) {
    // Rank 0 reports the group: every replica's requests, and the busiest rank's memory.
    const std::vector<std::string> shares = group->gather_to_first(replica_share(run, me));
    for (std::size_t r = 1; r < shares.size(); ++r) merge_replica_share(run, shares[r]);
    const std::vector<std::int64_t> peaks =
        group->all_gather({out.peak_bytes, out.allocator.peak_allocated, out.allocator.peak_reserved, out.runtime_bytes});
    for (std::size_t r = 0; r < replicas; ++r) {
      out.peak_bytes = std::max(out.peak_bytes, peaks[4 * r]);
      out.allocator.peak_allocated = std::max(out.allocator.peak_allocated, peaks[4 * r + 1]);
      out.allocator.peak_reserved = std::max(out.allocator.peak_reserved, peaks[4 * r + 2]);
      out.runtime_bytes = std::max(out.runtime_bytes, peaks[4 * r + 3]);
    }
  }
  return out;
}

}  // namespace memtwin::hw
