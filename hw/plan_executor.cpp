#include "hw/plan_executor.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

namespace memtwin::hw {

PlanExecutor::PlanExecutor(const Program& program, DeviceKernels& kernels, Collectives& collectives,
                           CachingAllocator& allocator)
    : program_(program), kernels_(kernels), collectives_(collectives), allocator_(allocator) {}

PlanExecutor::~PlanExecutor() {
  for (auto& [name, block] : resident_) allocator_.release(block);
}

StepExecution PlanExecutor::run_step() {
  using Clock = std::chrono::steady_clock;
  const auto& ops = program_.ops;
  StepExecution out;
  out.ops.assign(ops.size(), {});
  std::vector<char> done(ops.size(), 0);
  std::mutex mutex;
  std::condition_variable changed;
  std::atomic<bool> stop{false};
  std::exception_ptr failure;

  std::map<Stream, std::vector<std::uint32_t>> by_stream;
  for (std::uint32_t i = 0; i < ops.size(); ++i) by_stream[ops[i].stream].push_back(i);

  const auto t0 = Clock::now();
  const auto seconds = [&](Clock::time_point t) { return std::chrono::duration<double>(t - t0).count(); };
  auto halt = [&](std::unique_lock<std::mutex>&) {
    stop = true;
    changed.notify_all();
  };

  auto execute = [&](const Op& op) -> bool {
    switch (op.kind) {
      case OpKind::alloc: {
        if (op.tensor == "runtime") return true;
        {
          std::lock_guard lock(mutex);
          if (resident_.count(op.tensor)) return true;  // model states kept from the previous step
        }
        void* block = allocator_.allocate(op.size.count(), op.tensor);
        std::lock_guard lock(mutex);
        resident_[op.tensor] = block;
        return true;
      }
      case OpKind::free: {
        void* block = nullptr;
        {
          std::lock_guard lock(mutex);
          auto it = resident_.find(op.tensor);
          if (it == resident_.end()) return true;
          block = it->second;
          resident_.erase(it);
        }
        allocator_.release(block);
        return true;
      }
      case OpKind::compute: kernels_.compute(op); return true;
      case OpKind::copy: kernels_.copy(op); return true;
      case OpKind::collective: return collectives_.run(op, stop);
    }
    return true;
  };

  auto worker = [&](const std::vector<std::uint32_t>& mine) {
    for (std::uint32_t i : mine) {
      const Op& op = ops[i];
      {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] {
          if (stop) return true;
          for (auto d : op.deps)
            if (!done[d]) return false;
          return true;
        });
        if (stop) return;
      }
      const auto start = Clock::now();
      try {
        if (!execute(op)) return;
      } catch (const DeviceOutOfMemory& e) {
        std::unique_lock lock(mutex);
        if (!out.oom) {
          out.oom = e;
          out.oom_op = op.name;
        }
        halt(lock);
        return;
      } catch (...) {
        std::unique_lock lock(mutex);
        if (!failure) failure = std::current_exception();
        halt(lock);
        return;
      }
      const auto end = Clock::now();
      std::lock_guard lock(mutex);
      out.ops[i] = {seconds(start), seconds(end)};
      if (op.kind == OpKind::alloc || op.kind == OpKind::free) out.memory.emplace_back(seconds(end), allocator_.stats().allocated);
      done[i] = 1;
      changed.notify_all();
    }
  };

  std::vector<std::thread> threads;
  for (const auto& [stream, mine] : by_stream) threads.emplace_back(worker, std::cref(mine));
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);

  out.step_s = seconds(Clock::now());
  std::sort(out.memory.begin(), out.memory.end());
  for (std::uint32_t i = 0; i < ops.size(); ++i) {
    if (out.ops[i].start_s < 0) continue;
    const double busy = out.ops[i].end_s - out.ops[i].start_s;
    if (ops[i].kind == OpKind::compute && ops[i].stream == Stream::compute) out.compute_busy_s += busy;
    if (ops[i].stream == Stream::comm && ops[i].kind == OpKind::collective) out.comm_busy_s += busy;
  }
  return out;
}

}  // namespace memtwin::hw
