#include "hw/hw_backend.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "hw/caching_allocator.h"
#include "hw/cuda/cuda_device.h"
#include "hw/host/host_kernels.h"
#include "hw/host/host_serving_kernels.h"
#include "hw/serving_engine.h"
#include "hw/host/mpi_collectives.h"
#include "hw/host/mpi_serving_group.h"
#include "hw/plan_executor.h"
#include "hw/process_memory.h"
#include "models/analytic/memory_report.h"
#include "models/analytic/model_report.h"
#include "models/memory/out_of_memory.h"
#include "models/memory/serving_memory.h"
#include "models/serving/batch_scheduler.h"
#include "models/serving/iteration_plan.h"
#include "models/serving/serving_report.h"
#include "models/plan/step_trace.h"
#include "models/plan/training_plan.h"

namespace memtwin {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// A GPU's memory: cudaMalloc, and what the driver reports in use. The caching allocator never
// hands memory back during a run, so what is in use at the end is its peak (plus the context and
// libraries).
hw::DeviceMemory gpu_memory(const hw::CudaDeviceApi& cuda, int gpu) {
  auto in_use = [f = cuda.in_use, gpu] { return f(gpu); };
  return {cuda.memory(gpu), in_use, in_use, [] {}, "device memory in use as the driver reports it (cudaMemGetInfo)"};
}

// What a training step runs on: kernels, collectives and memory.
struct Device {
  std::unique_ptr<hw::DeviceKernels> kernels;
  std::unique_ptr<hw::Collectives> collectives;
  hw::DeviceMemory memory;
  std::string description;
};

Device open_device(const std::string& name, const Scenario& s, const Plan& plan, int rank) {
  Device d;
  if (name == "host") {
    d.kernels = std::make_unique<hw::HostKernels>();
    d.collectives = std::make_unique<hw::MpiCollectives>(plan, rank);
    d.memory = hw::host_memory();
    d.description = "the host device (one core and one OpenBLAS thread per rank)";
    return d;
  }
  const hw::CudaDeviceApi& cuda = hw::cuda_device();
  const int gpu = cuda.select_device();
  auto host = std::make_shared<hw::HostKernels>();  // an offloaded optimizer runs on the CPU
  d.kernels = cuda.make_kernels(gpu, s.training->precision, [host](double params) { host->adam(params); });
  d.collectives = cuda.make_collectives(plan, rank, gpu);
  d.memory = gpu_memory(cuda, gpu);
  d.description = "CUDA device " + std::to_string(gpu) + " (cuBLAS, NCCL)";
  return d;
}

// What a serving run executes on: one process, one device.
hw::ServingDevice open_serving_device(const std::string& name) {
  hw::ServingDevice d;
  if (name == "host") {
    hw::use_one_core();
    d.kernels = std::make_unique<hw::HostServingKernels>();
    d.memory = hw::host_memory();
    d.description = "the host device: one process, one core";
    return d;
  }
  const hw::CudaDeviceApi& cuda = hw::cuda_device();
  const int gpu = cuda.select_device();
  d.kernels = cuda.make_serving_kernels(gpu);
  d.memory = gpu_memory(cuda, gpu);
  d.description = "CUDA device " + std::to_string(gpu) + " (cuBLAS fp32, the CUDA KV kernels)";
  return d;
}

class HwBackend final : public Backend {
 public:
  explicit HwBackend(HwOptions o) : options_(std::move(o)) {}
  std::string name() const override { return "hw"; }
  std::string summary() const override {
    return "hardware: executes the plan on a device (--device host: CPU ranks under MPI) and measures it";
  }

  RunResult run(const Scenario& s) override {
    if (options_.device != "host" && options_.device != "cuda") {
      throw Unsupported("unknown device '" + options_.device + "'; devices: " + kHwDevices);
    }
    return s.training ? run_training(s) : run_serving(s);
  }

 private:
  RunResult run_serving(const Scenario& s) {
    RunResult r;
    r.backend = name();
    r.metrics["model"] = model_report(s);
    hw::require_serving_support(s);
    r.primary = hw::MpiSession::get().rank == 0;  // a group's rank 0 reports
    const ServingMemory memory = serving_memory(s);
    if (!memory.fits) {
      // Nothing to serve: the engine would refuse to start, as vLLM does; the memory model says why.
      add_serving_memory(r.metrics, r.notes, s, memory);
      r.fits = false;
      return r;
    }
    hw::MpiSession& mpi = hw::MpiSession::get();
    const int ranks = hw::serving_ranks(s);
    if (mpi.size != ranks) {
      throw Unsupported(ranks == 1 ? std::string("a serving run without expert parallelism is one process; run it without mpirun")
                                   : "an expert-parallel serving run takes one process per replica: run `mpirun -np " +
                                         std::to_string(ranks) + " memtwin run ... --backend hw`, or `memtwin validate`, which starts them");
    }
    if (ranks > 1 && options_.device != "host") {
      throw Unsupported("expert-parallel serving runs on --device host (the group exchanges host memory over MPI)");
    }
    std::optional<hw::MpiServingGroup> group;
    if (ranks > 1) {
      mpi.prepare_report_claim();
      group.emplace();
    }
    hw::ServingDevice device = open_serving_device(options_.device);
    hw::ServingMeasurement served = hw::serve_on_device(s, device, group ? &*group : nullptr);
    if (served.oom) {
      // Out of device memory is a result: what was being allocated, how much was free.
      const hw::DeviceOutOfMemory& o = *served.oom;
      r.fits = false;
      if (group) {  // the rank that ran out reports (the first to claim it) and stops the others
        r.primary = mpi.claim_report();
        r.abort_others = true;
      }
      r.metrics["memory"]["gpu"] = {{"peak_bytes", served.peak_bytes},
                                    {"capacity_bytes", s.cluster.gpu.memory.count()},
                                    {"fits", false},
                                    {"reserved_peak_bytes", served.allocator.peak_reserved},
                                    {"runtime_bytes", served.runtime_bytes},
                                    {"out_of_memory", OutOfMemoryReport{0, "serving iteration", o.tensor, o.requested,
                                                                        o.reserved, o.capacity, std::nullopt,
                                                                        served.iterations_done}.to_json()}};
      r.metrics["memory"]["fits"] = false;
      r.metrics["executed"] = {{"device", options_.device}, {"iterations", served.iterations_done}};
      r.notes.push_back("ran out of device memory after " + std::to_string(served.iterations_done) + " iteration(s): " + o.what());
      return r;
    }
    nlohmann::ordered_json gpu;
    gpu["peak_bytes"] = served.peak_bytes;
    gpu["capacity_bytes"] = s.cluster.gpu.memory.count();
    gpu["fits"] = true;
    gpu["allocated_peak_bytes"] = served.allocator.peak_allocated;
    gpu["reserved_peak_bytes"] = served.allocator.peak_reserved;
    gpu["runtime_bytes"] = served.runtime_bytes;
    gpu["weights_bytes"] = served.weights_bytes;
    gpu["kv_pool_bytes"] = served.kv_pool_bytes;
    gpu["measured_by"] = device.memory.measured_by + "; allocated/reserved from the caching allocator";
    r.metrics["memory"]["gpu"] = gpu;
    r.metrics["memory"]["fits"] = true;
    r.metrics["kv_cache"] = {{"capacity_blocks", memory.capacity_blocks}, {"block_bytes", memory.block_bytes.count()}};
    add_serving_results(r.metrics, r.notes, s, served.run);
    r.metrics["executed"] = {{"device", options_.device},
                             {"replicas", ranks},
                             {"iterations", served.run.iterations},
                             {"requests", static_cast<std::int64_t>(served.run.requests.size())},
                             {"plan_hash", iteration_plan_hash(serving_plan_hash(s, generate_requests(*s.inference, s.seed),
                                                                                 memory.capacity_blocks,
                                                                                 memory.block_bytes.as_double()),
                                                               served.run.executed_ops)},
                             {"iteration_ops", served.run.executed_ops}};
    r.notes.push_back("measured on " + device.description + "; requests released at their arrival times on the wall clock");
    const auto run = std::make_shared<const ServingRun>(std::move(served.run));
    r.files["requests.csv"] = [run] { return requests_csv(*run); };
    r.files["trace.json"] = [run] { return serving_trace(*run); };
    return r;
  }

  // One plan measured on a fresh device and allocator: a warm-up step, then `steps` timed ones.
  struct Measured {
    std::string description, measured_by;
    std::vector<double> step_times;
    hw::StepExecution last;
    std::int64_t peak = 0, allocated_peak = 0, reserved_peak = 0, runtime = 0;  // the busiest rank's
  };

  // Fills `m`; running out of device memory returns the report instead.
  std::optional<RunResult> measure(const Scenario& s, const Plan& plan, Measured& m, RunResult& r) {
    hw::MpiSession& mpi = hw::MpiSession::get();
    const Program& program = plan.programs[static_cast<std::size_t>(plan.program_of_rank[static_cast<std::size_t>(mpi.rank)])];
    Device device = open_device(options_.device, s, plan, mpi.rank);
    m.description = device.description;
    m.measured_by = device.memory.measured_by;
    hw::CachingAllocator allocator(s.cluster.gpu.memory.count(), device.memory.raw);
    const std::int64_t baseline = device.memory.in_use();  // the runtime: process or context, libraries, workspaces
    device.memory.reset_peak();
    mpi.prepare_report_claim();
    hw::CachingAllocator::Stats first_step{};
    {
      hw::PlanExecutor executor(program, *device.kernels, *device.collectives, allocator);
      for (int step = 0; step <= options_.steps; ++step) {
        hw::check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        m.last = executor.run_step();
        if (m.last.oom) return out_of_memory(s, plan, r, m.last, allocator, baseline, device.memory.peak(), mpi);
        double slowest = m.last.step_s;
        hw::check_mpi(MPI_Allreduce(MPI_IN_PLACE, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
        if (step == 0) first_step = allocator.stats();
        else m.step_times.push_back(slowest);
      }
    }
    // Peaks over the ranks: the most loaded rank is the one that would run out first.
    std::int64_t peaks[4] = {device.memory.peak(), first_step.peak_allocated, first_step.peak_reserved, baseline};
    hw::check_mpi(MPI_Allreduce(MPI_IN_PLACE, peaks, 4, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
    m.peak = peaks[0], m.allocated_peak = peaks[1], m.reserved_peak = peaks[2], m.runtime = peaks[3];
    return std::nullopt;
  }

  RunResult run_training(const Scenario& s) {
    const Plan plan = build_training_plan(s);
    hw::MpiSession& mpi = hw::MpiSession::get();
    if (mpi.size != plan.ranks()) {
      throw Unsupported("the plan has " + std::to_string(plan.ranks()) + " ranks but " + std::to_string(mpi.size) +
                        " processes were started; run `mpirun -np " + std::to_string(plan.ranks()) +
                        " memtwin run ... --backend hw`, or `memtwin validate`, which starts them");
    }
    hw::use_one_core();
    const Program& program = plan.programs[static_cast<std::size_t>(plan.program_of_rank[static_cast<std::size_t>(mpi.rank)])];
    RunResult r;
    r.backend = name();
    r.primary = mpi.rank == 0;
    Measured m;
    if (auto oom = measure(s, plan, m, r)) return *oom;

    r.metrics["model"] = model_report(s);
    nlohmann::ordered_json gpu;
    gpu["peak_bytes"] = m.peak;
    gpu["capacity_bytes"] = s.cluster.gpu.memory.count();
    gpu["fits"] = true;
    gpu["allocated_peak_bytes"] = m.allocated_peak;
    gpu["reserved_peak_bytes"] = m.reserved_peak;
    gpu["runtime_bytes"] = m.runtime;
    gpu["measured_by"] = m.measured_by + " of the busiest rank; allocated/reserved from the caching allocator";
    r.metrics["memory"]["gpu"] = gpu;
    r.metrics["memory"]["fits"] = true;

    const Training& t = *s.training;
    const double step_s = median(m.step_times);
    const double model_flops = model_flops_per_gpu_step(s);
    const auto& peak = s.cluster.gpu.flops.count(t.precision) ? s.cluster.gpu.flops.at(t.precision)
                                                               : s.cluster.gpu.flops.begin()->second;
    nlohmann::ordered_json time;
    time["step_s"] = step_s;
    time["tokens_per_s"] = static_cast<double>(t.global_batch) * t.seq_len / step_s;
    time["tflops_per_gpu"] = model_flops / step_s / 1e12;
    time["mfu"] = model_flops / step_s / peak.value();
    time["compute_s"] = m.last.compute_busy_s;
    time["exposed_comm_s"] = std::max(0.0, m.last.step_s - m.last.compute_busy_s);
    time["comm_busy_s"] = m.last.comm_busy_s;
    time["step_samples_s"] = m.step_times;
    r.metrics["time"] = time;
    r.metrics["executed"] = {{"device", options_.device},
                             {"ranks", plan.ranks()},
                             {"steps", options_.steps},
                             {"warmup_steps", 1},
                             {"plan_hash", plan.hash_hex()},
                             {"plan", plan.description}};
    r.notes.push_back("measured on " + m.description + ": " + std::to_string(plan.ranks()) +
                      " MPI rank(s); time is the median of " + std::to_string(options_.steps) + " steps after a warm-up step");
    if (options_.shallower) scale_to_full_depth(s, m, r);
    r.files["op_times.csv"] = [csv = op_times_csv(program, m.last)] { return csv; };
    // The same trace and timeline files as the simulator's, rank 0's last step; the timeline counts
    // the runtime (the process before the plan's tensors) as the simulator counts its tensor.
    std::vector<StepTraceEvent> events;
    for (std::size_t i = 0; i < program.ops.size(); ++i) {
      const Op& op = program.ops[i];
      if (m.last.ops[i].start_s < 0 || op.kind == OpKind::alloc || op.kind == OpKind::free) continue;
      events.push_back({0, op.stream, op.name, m.last.ops[i].start_s, m.last.ops[i].end_s});
    }
    MemoryTimeline memory;
    for (const auto& [at, bytes] : m.last.memory) memory.emplace_back(at, bytes + m.runtime);
    r.files["trace.json"] = [trace = perfetto_step_trace(events, memory)] { return trace; };
    r.files["timeline.csv"] = [csv = memory_timeline_csv(memory)] { return csv; };
    return r;
  }

  // --layers: the same step with fewer layers measured too, and both extrapolated linearly in
  // depth to the model's full depth (the blocks are identical; what is not a block does not grow).
  void scale_to_full_depth(const Scenario& s, const Measured& deep, RunResult& r) {
    const Scenario& s0 = *options_.shallower;
    const Plan plan0 = build_training_plan(s0);
    Measured shallow;
    RunResult r0;
    if (measure(s0, plan0, shallow, r0)) {
      r.notes.push_back("the " + std::to_string(s0.model.layers) + "-layer step ran out of memory: no extrapolation to " +
                        std::to_string(options_.full_layers) + " layers");
      return;
    }
    const double n = s.model.layers, n0 = s0.model.layers, full = options_.full_layers;
    auto extrapolate = [&](double at_n0, double at_n) { return at_n + (full - n) * (at_n - at_n0) / (n - n0); };
    const double t0 = median(shallow.step_times), t = median(deep.step_times);
    nlohmann::ordered_json d;
    d["layers"] = options_.full_layers;
    d["measured_layers"] = {s0.model.layers, s.model.layers};
    d["step_s"] = extrapolate(t0, t);
    d["peak_bytes"] = extrapolate(static_cast<double>(shallow.peak), static_cast<double>(deep.peak));
    d["allocated_peak_bytes"] = extrapolate(static_cast<double>(shallow.allocated_peak), static_cast<double>(deep.allocated_peak));
    d["measured_step_s"] = {t0, t};
    d["measured_peak_bytes"] = {shallow.peak, deep.peak};
    d["method"] = "linear in depth through the two measured depths: full = at N + (L - N) x (at N - at N0) / (N - N0)";
    r.metrics["depth_scaling"] = d;
    r.notes.push_back("extrapolated to the model's " + std::to_string(options_.full_layers) + " layers from steps of " +
                      std::to_string(s0.model.layers) + " and " + std::to_string(s.model.layers) + " layers (depth_scaling)");
  }

  static std::string op_times_csv(const Program& program, const hw::StepExecution& step) {
    std::ostringstream csv;
    csv.precision(9);
    csv << "op,name,stream,start_s,end_s\n";
    for (std::size_t i = 0; i < program.ops.size(); ++i) {
      if (step.ops[i].start_s < 0) continue;
      csv << i << "," << program.ops[i].name << "," << stream_name(program.ops[i].stream) << "," << step.ops[i].start_s
          << "," << step.ops[i].end_s << "\n";
    }
    return csv.str();
  }

  // The rank that ran out reports it and stops the others, which would otherwise wait for it.
  RunResult out_of_memory(const Scenario& s, const Plan& plan, RunResult& r, const hw::StepExecution& step,
                          const hw::CachingAllocator& allocator, std::int64_t baseline, std::int64_t peak,
                          hw::MpiSession& mpi) {
    const auto& o = *step.oom;
    // Every rank that ran out stops the others; only the first to claim it reports.
    r.primary = mpi.claim_report();
    r.fits = false;
    r.metrics["model"] = model_report(s);
    r.metrics["memory"]["gpu"] = {{"peak_bytes", peak},
                                  {"capacity_bytes", s.cluster.gpu.memory.count()},
                                  {"fits", false},
                                  {"reserved_peak_bytes", allocator.stats().peak_reserved},
                                  {"runtime_bytes", baseline},
                                  {"out_of_memory", OutOfMemoryReport{mpi.rank, step.oom_op, o.tensor, o.requested, o.reserved,
                                                                      o.capacity, std::nullopt, std::nullopt}.to_json()}};
    r.metrics["memory"]["fits"] = false;
    r.metrics["executed"] = {{"device", options_.device}, {"ranks", plan.ranks()}, {"plan_hash", plan.hash_hex()}};
    r.notes.push_back(std::string("ran out of device memory at ") + step.oom_op + ": " + o.what());
    r.abort_others = plan.ranks() > 1;
    return r;
  }

  HwOptions options_;
};

}  // namespace

std::unique_ptr<Backend> make_hw_backend(const HwOptions& options) { return std::make_unique<HwBackend>(options); }

}  // namespace memtwin
