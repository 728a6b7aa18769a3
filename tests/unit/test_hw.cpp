// The hardware backend's parts that need no device: the caching allocator's books, the plan
// executor's ordering and out-of-memory handling (on a recording fake device), the host kernels'
// results, and the calibration file's new keys.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "hw/caching_allocator.h"
#include "hw/host/host_kernels.h"
#include "hw/host/host_serving_kernels.h"
#include "hw/host/nvme_file.h"
#include "hw/serving_engine.h"
#include "models/memory/serving_memory.h"
#include "hw/plan_executor.h"
#include "models/scenario/scenario_error.h"
#include "models/scenario_loader.h"
#include "tests/test_support.h"

using namespace memtwin;
using namespace memtwin::hw;

namespace {

RawMemory counted_malloc(std::int64_t& live) {
  return {[&live](std::int64_t n) -> void* {
            live += n;
            return std::malloc(static_cast<std::size_t>(n));
          },
          [](void* p) { std::free(p); }};
}

// Records the order ops ran in and how many ran at once; compute ops take a little time. Ops
// named in `meet` wait inside for each other (up to 10 s): if the executor runs them concurrently
// they are inside together whatever the machine's load, and if it serialised them the first would
// time out alone, so that most_at_once says which it did without depending on timing.
struct RecordingDevice final : DeviceKernels, Collectives {
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<std::string> order;
  std::set<std::string> meet;
  int met = 0;
  std::atomic<int> running{0};
  int most_at_once = 0;
  void note(const Op& op) {
    const int now = ++running;
    {
      std::unique_lock lock(mutex);
      order.push_back(op.name);
      most_at_once = std::max(most_at_once, now);
      if (meet.count(op.name)) {
        ++met;
        arrived.notify_all();
        arrived.wait_for(lock, std::chrono::seconds(10), [&] { return met >= static_cast<int>(meet.size()); });
        most_at_once = std::max(most_at_once, running.load());
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    --running;
  }
  void compute(const Op& op) override { note(op); }
  void copy(const Op& op) override { note(op); }
  bool run(const Op& op, const std::atomic<bool>&) override {
    note(op);
    return true;
  }
};

Op make_op(OpKind kind, Stream stream, std::string name, std::vector<std::uint32_t> deps, std::string tensor = {},
           std::int64_t bytes = 0) {
  Op op;
  op.kind = kind;
  op.stream = stream;
  op.name = std::move(name);
  op.deps = std::move(deps);
  op.tensor = std::move(tensor);
  op.size = Bytes(bytes);
  return op;
}

}  // namespace

TEST_CASE("the caching allocator rounds, reuses freed blocks and keeps allocated and reserved books", "[unit]") {
  std::int64_t from_device = 0;
  CachingAllocator a(64 << 20, counted_malloc(from_device));
  CHECK(CachingAllocator::rounded(1) == 512);
  CHECK(CachingAllocator::rounded(1000) == 1024);
  CHECK(CachingAllocator::rounded((1 << 20) + 1) == 2 << 20);  // large blocks round to 2 MiB

  void* x = a.allocate(3 << 20, "x");  // 4 MiB held
  void* y = a.allocate(1000, "y");
  CHECK(a.stats().allocated == (4 << 20) + 1024);
  a.release(x);
  CHECK(a.stats().allocated == 1024);
  CHECK(a.stats().reserved == (4 << 20) + 1024);  // kept in the cache
  void* z = a.allocate(3 << 20, "z");             // the cached block comes back
  CHECK(z == x);
  CHECK(a.stats().cache_hits == 1);
  CHECK(from_device == (4 << 20) + 1024);
  CHECK(a.stats().peak_allocated == (4 << 20) + 1024);
  a.release(z);
  a.release(y);
  CHECK_THROWS_AS(a.release(y), std::logic_error);  // not handed out any more
}

TEST_CASE("the caching allocator empties its cache before running out, then reports what did not fit", "[unit]") {
  std::int64_t from_device = 0;
  CachingAllocator a(8 << 20, counted_malloc(from_device));
  void* big = a.allocate(6 << 20, "big");
  a.release(big);                        // 6 MiB cached, nothing allocated
  void* other = a.allocate(4 << 20, "other");  // does not reuse a block half again as large: cache emptied, retried
  CHECK(a.stats().reserved == 4 << 20);
  try {
    a.allocate(6 << 20, "activations");
    FAIL("expected out of memory");
  } catch (const DeviceOutOfMemory& e) {
    CHECK(e.tensor == "activations");
    CHECK(e.requested == 6 << 20);
    CHECK(e.capacity - e.reserved == 4 << 20);
    CHECK_THAT(e.what(), Catch::Contains("activations") && Catch::Contains("4194304 of 8388608 bytes free"));
  }
  a.release(other);
}

TEST_CASE("the plan executor runs streams concurrently, in dependency order, and keeps model states across steps",
          "[unit]") {
  Program p;
  p.ops.push_back(make_op(OpKind::alloc, Stream::compute, "alloc.parameters", {}, "parameters", 1 << 20));  // 0
  p.ops.push_back(make_op(OpKind::alloc, Stream::compute, "alloc.runtime", {}, "runtime", std::int64_t{1} << 40));  // 1: not allocated
  p.ops.push_back(make_op(OpKind::alloc, Stream::comm, "alloc.gathered", {0}, "gathered", 2 << 20));        // 2
  p.ops.push_back(make_op(OpKind::collective, Stream::comm, "gather", {2}));                                 // 3
  p.ops.push_back(make_op(OpKind::compute, Stream::compute, "independent", {0}));                            // 4
  p.ops.push_back(make_op(OpKind::compute, Stream::compute, "uses_gathered", {3, 4}));                       // 5
  p.ops.push_back(make_op(OpKind::free, Stream::compute, "free.gathered", {5}, "gathered", 2 << 20));         // 6
  std::int64_t from_device = 0;
  CachingAllocator allocator(16 << 20, counted_malloc(from_device));
  RecordingDevice device;
  device.meet = {"gather", "independent"};
  {
    PlanExecutor executor(p, device, device, allocator);
    const StepExecution first = executor.run_step();
    REQUIRE_FALSE(first.oom);
    CHECK(device.most_at_once == 2);  // the gather overlapped the independent compute
    device.meet.clear();  // later steps need not meet again
    const auto pos = [&](const std::string& n) { return std::find(device.order.begin(), device.order.end(), n) - device.order.begin(); };
    CHECK(pos("uses_gathered") > pos("gather"));
    CHECK(pos("uses_gathered") > pos("independent"));
    CHECK(first.ops[5].start_s >= first.ops[3].end_s);
    CHECK(first.compute_busy_s > 0.009);
    CHECK(allocator.stats().allocated == 1 << 20);       // parameters stay; the gathered buffer was freed
    CHECK(allocator.stats().peak_allocated == 3 << 20);  // the runtime tensor was never allocated
    executor.run_step();
    CHECK(allocator.stats().allocated == 1 << 20);       // not allocated twice
  }
  CHECK(allocator.stats().allocated == 0);  // the executor hands its resident tensors back
}

TEST_CASE("the plan executor stops a step that runs out of device memory and says where", "[unit]") {
  Program p;
  p.ops.push_back(make_op(OpKind::alloc, Stream::compute, "alloc.parameters", {}, "parameters", 6 << 20));
  p.ops.push_back(make_op(OpKind::alloc, Stream::compute, "alloc.block0.activations", {0}, "block0.activations", 4 << 20));
  p.ops.push_back(make_op(OpKind::compute, Stream::compute, "never", {1}));
  std::int64_t from_device = 0;
  CachingAllocator allocator(8 << 20, counted_malloc(from_device));
  RecordingDevice device;
  PlanExecutor executor(p, device, device, allocator);
  const StepExecution step = executor.run_step();
  REQUIRE(step.oom);
  CHECK(step.oom_op == "alloc.block0.activations");
  CHECK(step.oom->tensor == "block0.activations");
  CHECK(step.ops[2].start_s < 0);
  CHECK(device.order.empty());
}

TEST_CASE("host kernels compute real GEMMs of the op's shapes, repeated to the op's FLOPs", "[unit]") {
  use_one_core();
  HostKernels k;
  k.gemm({64, 96, 200, 1});
  CHECK(k.last_gemm_output() == Approx(200 * 0.01f * 0.01f).epsilon(1e-4));
  k.gemm({3000, 3000, 1000, 1});  // larger than the workspace: tiled, same values
  CHECK(k.last_gemm_output() == Approx(1000 * 0.01f * 0.01f).epsilon(1e-4));

  // An op runs its shapes repeated to its FLOPs: a backward pass over the forward's shapes (twice
  // the FLOPs) performs exactly twice the forward's. (Counted, not timed: a shared machine's clock
  // made the timed version of this check flaky.)
  Op forward;
  forward.compute_class = ComputeClass::gemm;
  forward.gemms = {{256, 512, 512, 4}};
  forward.flops = forward.gemms[0].flops();
  Op backward = forward;
  backward.flops *= 2;
  auto performed = [&](const Op& op) {
    const double before = k.gemm_flops_done();
    k.compute(op);
    return k.gemm_flops_done() - before;
  };
  CHECK(performed(forward) == forward.flops);
  CHECK(performed(backward) == backward.flops);
}

TEST_CASE("a calibration file sets measured device figures over the catalog's, never over the scenario's", "[unit]") {
  const auto dir = std::filesystem::temp_directory_path() / "memtwin-calibration-test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir / "host.yaml");
    f << "device: test host\n"
         "gpu:\n  flops: {fp32: 61.5GFLOPS}\n  hbm_bandwidth: 9.5GB/s\n"
         "efficiency: {gemm: 0.9, memory: 1, gemm_memory: 0.3}\n"
         "intra_node: {bandwidth: 3GB/s, latency: 40us}\n"
         "host: {cpu_adam_params_per_s: 2e8}\n"
         "runtime: {cuda_context: 200MiB, nccl_buffers: 0B}\n";
  }
  const std::string scenario = memtwin::test::source_path("scenarios/host/train-zero3-2ranks.yaml");
  const auto calibrated = load_scenario_file(scenario, {"cluster.calibration=" + (dir / "host.yaml").string()}).scenario.cluster;
  CHECK(calibrated.gpu.flops.at(Precision::fp32).value() == Approx(61.5e9));  // the catalog said 96
  CHECK(calibrated.gpu.hbm_bandwidth.value() == Approx(9.5e9));
  CHECK(calibrated.efficiency.gemm_memory == Approx(0.3));
  CHECK(calibrated.intra_node.bandwidth.value() == Approx(3e9));
  CHECK(calibrated.intra_node.latency.value() == Approx(40e-6));
  CHECK(calibrated.host.cpu_adam_params_per_s == Approx(2e8));
  CHECK(calibrated.runtime.cuda_context.count() == 200 << 20);
  const auto mine = load_scenario_file(scenario, {"cluster.calibration=" + (dir / "host.yaml").string(),
                                                  "cluster.gpu.flops.fp32=50GFLOPS", "cluster.efficiency.gemm=0.7"})
                        .scenario.cluster;
  CHECK(mine.gpu.flops.at(Precision::fp32).value() == Approx(50e9));
  CHECK(mine.efficiency.gemm == Approx(0.7));
  // Unset, the memory-bound GEMM efficiency is the memory efficiency.
  const auto plain = load_scenario_file(scenario, {"cluster.efficiency.memory=0.5"}).scenario.cluster;
  CHECK(plain.efficiency.gemm_memory == Approx(0.5));

  {
    std::ofstream f(dir / "bad.yaml");
    f << "gpu:\n  flops: {fp32: fast}\n";
  }
  try {
    load_scenario_file(scenario, {"cluster.calibration=" + (dir / "bad.yaml").string()});
    FAIL("expected a calibration error");
  } catch (const ScenarioError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("bad.yaml:2") && Catch::Contains("gpu.flops.fp32"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a serving run that runs out of device memory stops and says which tensor, after how many iterations", "[unit]") {
  const Scenario s = load_scenario_file(test::source_path("scenarios/host/serve-fp16-kv.yaml"), {"inference.workload.requests=4"}).scenario;
  const ServingMemory memory = serving_memory(s);
  // A device that holds the weights and the KV pool and not a byte of activations.
  std::int64_t left = memory.weights.count() + memory.kv_pool.count() + (std::int64_t{4} << 20);
  ServingDevice device;
  device.kernels = std::make_unique<HostServingKernels>();
  device.memory.raw = {[&left](std::int64_t n) -> void* {
                         if (n > left) return nullptr;
                         left -= n;
                         return std::malloc(static_cast<std::size_t>(n));
                       },
                       [](void* p) { std::free(p); }};
  device.memory.in_use = device.memory.peak = [] { return std::int64_t{0}; };
  device.memory.reset_peak = [] {};
  const ServingMeasurement measured = serve_on_device(s, device);
  REQUIRE(measured.oom.has_value());
  CHECK_THAT(measured.oom->tensor, Catch::StartsWith("activations."));
  CHECK(measured.iterations_done == 0);
}

TEST_CASE("the host device's NVMe tier is a scratch file written and read back, removed afterwards", "[unit]") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "memtwin-test-nvme";
  std::filesystem::create_directories(dir);
  setenv("MEMTWIN_NVME_DIR", dir.c_str(), 1);
  std::string path;
  {
    NvmeFile file;
    path = file.path();
    CHECK(path.rfind(dir.string(), 0) == 0);
    file.write(10'000);  // rounded up to whole 4 KiB blocks
    CHECK(std::filesystem::file_size(path) == 12'288);
    file.write(std::int64_t{20} << 20);  // over two system calls' chunks
    CHECK(std::filesystem::file_size(path) == 12'288 + (std::int64_t{20} << 20));
    file.read(std::int64_t{30} << 20);  // more than was written: reads wrap around
  }
  CHECK_FALSE(std::filesystem::exists(path));
  unsetenv("MEMTWIN_NVME_DIR");
}

