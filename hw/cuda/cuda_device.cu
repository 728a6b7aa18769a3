#include "hw/cuda/cuda_check.h"
#include "hw/cuda/cuda_device.h"
#include "hw/host/nvme_file.h"

#include "models/backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <mpi.h>
#ifdef MEMTWIN_HAVE_NCCL
#include <nccl.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>


namespace memtwin::hw {
namespace {


constexpr std::size_t kWorkspaceBytes = std::size_t{512} << 20;  // GEMM operands and copy buffers
constexpr std::size_t kPinnedBytes = std::size_t{64} << 20;

class CudaKernels final : public DeviceKernels {
 public:
  CudaKernels(int device, Precision precision, std::function<void(double)> cpu_adam)
      : device_(device), precision_(precision), cpu_adam_(std::move(cpu_adam)) {
    check(cudaSetDevice(device_), "cudaSetDevice");
    check(cudaMalloc(&workspace_, kWorkspaceBytes), "cudaMalloc (kernel workspace)");
    check(cudaMemset(workspace_, 0, kWorkspaceBytes), "cudaMemset");
    check(cudaMallocHost(&pinned_, kPinnedBytes), "cudaMallocHost");
  }
  ~CudaKernels() override {
    for (auto& [id, t] : threads_) {
      cublasDestroy(t.handle);
      cudaStreamDestroy(t.stream);
    }
    cudaFreeHost(pinned_);
    cudaFree(workspace_);
  }

  void compute(const Op& op) override {
    Thread& t = mine();
    switch (op.compute_class) {
      case ComputeClass::gemm:
      case ComputeClass::attention: {
        const auto gemms = gemms_for_op_flops(op);
        if (gemms.empty()) device_copy(t, op.bytes / 2);  // no shapes: a memory-bound op
        for (const auto& g : gemms) gemm(t, g);
        break;
      }
      case ComputeClass::elementwise: device_copy(t, op.bytes / 2); break;
      case ComputeClass::cpu_optimizer: cpu_adam_(op.flops); return;
    }
    check(cudaStreamSynchronize(t.stream), "cudaStreamSynchronize");
  }

  void copy(const Op& op) override {
    if (NvmeTier::serves(op.direction)) return nvme_.copy(op.direction, op.bytes);  // below host memory: file I/O
    Thread& t = mine();
    auto left = static_cast<std::int64_t>(op.bytes);
    while (left > 0) {
      const auto n = static_cast<std::size_t>(std::min<std::int64_t>(left, kPinnedBytes));
      if (op.direction == CopyDirection::device_to_host) {
        check(cudaMemcpyAsync(pinned_, workspace_, n, cudaMemcpyDeviceToHost, t.stream), "cudaMemcpyAsync (to host)");
      } else {
        check(cudaMemcpyAsync(workspace_, pinned_, n, cudaMemcpyHostToDevice, t.stream), "cudaMemcpyAsync (to device)");
      }
      left -= static_cast<std::int64_t>(n);
    }
    check(cudaStreamSynchronize(t.stream), "cudaStreamSynchronize");
  }

 private:
  struct Thread {
    cudaStream_t stream = nullptr;
    cublasHandle_t handle = nullptr;
  };

  Thread& mine() {
    std::lock_guard lock(mutex_);
    check(cudaSetDevice(device_), "cudaSetDevice");
    auto [it, fresh] = threads_.try_emplace(std::this_thread::get_id());
    if (fresh) {
      check(cudaStreamCreateWithFlags(&it->second.stream, cudaStreamNonBlocking), "cudaStreamCreate");
      check(cublasCreate(&it->second.handle), "cublasCreate");
      check(cublasSetStream(it->second.handle, it->second.stream), "cublasSetStream");
    }
    return it->second;
  }

  // C[m,n] = A[m,k] B[k,n] in the training precision, tiled over the workspace (inputs in its
  // first two thirds, outputs in the last), as the host device does. Every operand starts on a
  // 256-byte boundary: cuBLAS takes its tensor-core kernels only for 16-byte-aligned operands, and
  // an output at two thirds of the workspace (4 bytes off) held bf16 GEMMs to about 250 TFLOP/s on
  // an H200 against the 800 that the calibration's aligned ones reach. The `count` repeats of a
  // shape (attention's per-head products) are one strided-batched call, as a fused attention
  // kernel is one launch, when their outputs fit side by side.
  void gemm(Thread& t, const GemmShape& g) {
    if (g.m <= 0 || g.n <= 0 || g.k <= 0 || g.count <= 0) return;
    const bool fp32 = precision_ == Precision::fp32;
    const std::int64_t element = fp32 ? 4 : 2;
    const cudaDataType type = fp32 ? CUDA_R_32F : precision_ == Precision::fp16 ? CUDA_R_16F : CUDA_R_16BF;
    constexpr std::int64_t kAlign = 256;
    const std::int64_t align = kAlign / element;  // elements per boundary
    auto aligned = [&](std::int64_t elements) { return (elements + align - 1) / align * align; };
    const std::int64_t cap = static_cast<std::int64_t>(kWorkspaceBytes) / element;
    const std::int64_t inputs = cap / 3 * 2 / align * align, outputs = cap - inputs;
    std::int64_t mt = g.m, nt = g.n;
    auto fits = [&] { return aligned(mt * g.k) + g.k * nt <= inputs && mt * nt <= outputs; };
    while (!fits()) {
      if (nt >= mt && nt > 1) nt = (nt + 1) / 2; else if (mt > 1) mt = (mt + 1) / 2; else break;
    }
    if (!fits()) throw std::runtime_error("cuda device: a GEMM inner dimension of " + std::to_string(g.k) + " does not fit the workspace");
    auto* base = static_cast<char*>(workspace_);
    const void* a = base;
    const void* b = base + aligned(mt * g.k) * element;
    void* c = base + inputs * element;
    const float alpha = 1.0f, beta = 0.0f;
    for (std::int64_t m0 = 0; m0 < g.m; m0 += mt)
      for (std::int64_t n0 = 0; n0 < g.n; n0 += nt) {
        const auto mm = static_cast<int>(std::min(mt, g.m - m0));
        const auto nn = static_cast<int>(std::min(nt, g.n - n0));
        const std::int64_t out = aligned(static_cast<std::int64_t>(mm) * nn);
        // Row-major C = A B is column-major C^T = B^T A^T; the batch reads the same operands.
        const std::int64_t batch = std::clamp<std::int64_t>(outputs / out, 1, g.count);
        for (std::int64_t done = 0; done < g.count; done += batch) {
          const auto n = static_cast<int>(std::min(batch, g.count - done));
          if (n == 1) {
            check(cublasGemmEx(t.handle, CUBLAS_OP_N, CUBLAS_OP_N, nn, mm, static_cast<int>(g.k), &alpha, b, type, nn, a, type,
                               static_cast<int>(g.k), &beta, c, type, nn, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  "cublasGemmEx");
          } else {
            check(cublasGemmStridedBatchedEx(t.handle, CUBLAS_OP_N, CUBLAS_OP_N, nn, mm, static_cast<int>(g.k), &alpha, b, type,
                                             nn, 0, a, type, static_cast<int>(g.k), 0, &beta, c, type, nn, out, n,
                                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  "cublasGemmStridedBatchedEx");
          }
        }
      }
  }

  // Moves `bytes` device to device (read and write), as memory-bound kernels do.
  void device_copy(Thread& t, double bytes) {
    const std::size_t half = kWorkspaceBytes / 2;
    auto left = static_cast<std::int64_t>(bytes);
    auto* base = static_cast<char*>(workspace_);
    while (left > 0) {
      const auto n = static_cast<std::size_t>(std::min<std::int64_t>(left, half));
      check(cudaMemcpyAsync(base + half, base, n, cudaMemcpyDeviceToDevice, t.stream), "cudaMemcpyAsync (device)");
      left -= static_cast<std::int64_t>(n);
    }
  }

  int device_;
  Precision precision_;
  void* workspace_ = nullptr;
  void* pinned_ = nullptr;
  std::function<void(double)> cpu_adam_;  // the offloaded optimizer runs on the CPU
  NvmeTier nvme_;
  std::mutex mutex_;
  std::map<std::thread::id, Thread> threads_;
};

#ifdef MEMTWIN_HAVE_NCCL
using hw::check;  // the CUDA and cuBLAS overloads (cuda_check.h), next to NCCL's
void check(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(call) + " failed: " + ncclGetErrorString(r));
}

// One communicator per group this rank is in: the group's first member makes the unique id and
// MPI hands it to the others.
class NcclCollectives final : public Collectives {
 public:
  NcclCollectives(const Plan& plan, int rank, int device) : plan_(plan), rank_(rank), device_(device) {
    check(cudaSetDevice(device_), "cudaSetDevice");
    for (const auto& [role, groups] : plan.groups) {
      const bool pairs = role == "pp_next" || role == "pp_prev";
      if (role == "pp_prev") continue;  // the same pairs as pp_next
      for (std::size_t g = 0; g < groups.size(); ++g) {
        const auto& members = groups[g];
        const auto at = std::find(members.begin(), members.end(), rank);
        int color = at == members.end() ? MPI_UNDEFINED : static_cast<int>(g);
        MPI_Comm mpi = MPI_COMM_NULL;
        // Every rank takes part in each split; only the group's members get a communicator.
        if (MPI_Comm_split(MPI_COMM_WORLD, color, at == members.end() ? 0 : static_cast<int>(at - members.begin()), &mpi) !=
            MPI_SUCCESS)
          throw std::runtime_error("MPI_Comm_split failed");
        if (mpi == MPI_COMM_NULL) continue;
        ncclUniqueId id;
        if (at == members.begin()) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
        MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi);
        MPI_Comm_free(&mpi);
        ncclComm_t comm;
        check(ncclCommInitRank(&comm, static_cast<int>(members.size()), id, static_cast<int>(at - members.begin())),
              "ncclCommInitRank");
        comms_[{pairs ? "pp" : role, static_cast<int>(g)}] = comm;
      }
    }
  }
  ~NcclCollectives() override {
    for (auto& [key, comm] : comms_) ncclCommDestroy(comm);
    for (auto& [stream, buffer] : staging_) cudaFree(buffer.data);
  }

  bool run(const Op& op, const std::atomic<bool>&) override {
    check(cudaSetDevice(device_), "cudaSetDevice");
    Staging& s = staging(op.stream);
    const bool p2p = op.collective == Collective::p2p_forward || op.collective == Collective::p2p_backward;
    const int group = plan_.group_of_rank.at(static_cast<std::size_t>(rank_)).at(op.role);
    const ncclComm_t comm = comms_.at({p2p ? "pp" : op.role, group});
    int n = 1;
    check(ncclCommCount(comm, &n), "ncclCommCount");
    const auto total = static_cast<std::int64_t>(op.bytes_total);
    if (total <= 0 || (n == 1 && !p2p)) return true;
    auto* data = static_cast<char*>(s.data);
    const std::int64_t chunk = static_cast<std::int64_t>(kStaging) / (n + 1);
    switch (op.collective) {
      case Collective::all_gather:
        for (std::int64_t done = 0, share = (total + n - 1) / n; done < share; done += chunk) {
          const auto c = static_cast<std::size_t>(std::min(chunk, share - done));
          check(ncclAllGather(data, data + c, c, ncclInt8, comm, s.stream), "ncclAllGather");
        }
        break;
      case Collective::reduce_scatter:
        for (std::int64_t done = 0, share = (total / 2 + n - 1) / n; done < share; done += chunk / 2) {
          const auto c = static_cast<std::size_t>(std::min(chunk / 2, share - done));
          check(ncclReduceScatter(data + 2 * c, data, c, ncclBfloat16, ncclSum, comm, s.stream), "ncclReduceScatter");
        }
        break;
      case Collective::all_reduce:
        for (std::int64_t done = 0, count = total / 2; done < count; done += static_cast<std::int64_t>(kStaging) / 2) {
          const auto c = static_cast<std::size_t>(std::min<std::int64_t>(static_cast<std::int64_t>(kStaging) / 2, count - done));
          check(ncclAllReduce(data, data, c, ncclBfloat16, ncclSum, comm, s.stream), "ncclAllReduce");
        }
        break;
      case Collective::all_to_all: {
        // Expert parallelism's exchange: total / n to every other member, as grouped sends and
        // receives (NCCL's all-to-all), chunked so that both sides fit the staging buffer.
        int me = 0;
        check(ncclCommUserRank(comm, &me), "ncclCommUserRank");
        const std::int64_t share = (total + n - 1) / n;
        const std::int64_t piece = static_cast<std::int64_t>(kStaging) / (2 * n);
        for (std::int64_t done = 0; done < share; done += piece) {
          const auto c = static_cast<std::size_t>(std::min(piece, share - done));
          check(ncclGroupStart(), "ncclGroupStart");
          for (int peer = 0; peer < n; ++peer) {
            if (peer == me) continue;
            check(ncclSend(data + peer * c, c, ncclInt8, peer, comm, s.stream), "ncclSend");
            check(ncclRecv(data + (n + peer) * c, c, ncclInt8, peer, comm, s.stream), "ncclRecv");
          }
          check(ncclGroupEnd(), "ncclGroupEnd");
        }
        break;
      }
      case Collective::p2p_forward:
      case Collective::p2p_backward: {
        const auto& pair = plan_.groups.at(op.role).at(static_cast<std::size_t>(group));
        const int from = op.collective == Collective::p2p_forward ? pair[0] : pair[1];
        const int peer = rank_ == pair[0] ? 1 : 0;
        for (std::int64_t done = 0; done < total; done += static_cast<std::int64_t>(kStaging)) {
          const auto c = static_cast<std::size_t>(std::min<std::int64_t>(static_cast<std::int64_t>(kStaging), total - done));
          if (rank_ == from) check(ncclSend(data, c, ncclInt8, peer, comm, s.stream), "ncclSend");
          else check(ncclRecv(data, c, ncclInt8, peer, comm, s.stream), "ncclRecv");
        }
        break;
      }
    }
    check(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");
    return true;
  }

 private:
  static constexpr std::size_t kStaging = std::size_t{64} << 20;
  struct Staging {
    void* data = nullptr;
    cudaStream_t stream = nullptr;
  };
  Staging& staging(Stream s) {
    std::lock_guard lock(mutex_);
    auto [it, fresh] = staging_.try_emplace(s);
    if (fresh) {
      check(cudaMalloc(&it->second.data, kStaging), "cudaMalloc (NCCL staging)");
      check(cudaStreamCreateWithFlags(&it->second.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    return it->second;
  }
  const Plan& plan_;
  int rank_, device_;
  std::map<std::pair<std::string, int>, ncclComm_t> comms_;
  std::mutex mutex_;
  std::map<Stream, Staging> staging_;
};
#endif

int select_cuda_device() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) throw Unsupported(std::string("--device cuda: no usable CUDA device (") + cudaGetErrorString(e) + ")");
  if (count == 0) throw Unsupported("--device cuda: no CUDA device is visible");
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  return local ? std::atoi(local) % count : 0;
}

std::unique_ptr<DeviceKernels> make_cuda_kernels(int device, Precision precision, std::function<void(double)> cpu_adam) {
  return std::make_unique<CudaKernels>(device, precision, std::move(cpu_adam));
}

RawMemory cuda_memory(int device) {
  return {[device](std::int64_t size) -> void* {
            cudaSetDevice(device);
            void* p = nullptr;
            if (cudaMalloc(&p, static_cast<std::size_t>(size)) != cudaSuccess) {
              cudaGetLastError();  // clear the error: out of memory is reported by the allocator
              return nullptr;
            }
            return p;
          },
          [device](void* p) {
            cudaSetDevice(device);
            cudaFree(p);
          }};
}

std::int64_t cuda_memory_in_use(int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return static_cast<std::int64_t>(total - free);
}

std::unique_ptr<Collectives> make_nccl_collectives(const Plan& plan, int rank, int device) {
#ifdef MEMTWIN_HAVE_NCCL
  return std::make_unique<NcclCollectives>(plan, rank, device);
#else
  (void)device;
  for (const auto& [role, groups] : plan.groups)
    for (const auto& g : groups)
      if (g.size() > 1 && std::find(g.begin(), g.end(), rank) != g.end())
        throw std::runtime_error("this build has no NCCL (nccl.h was not found), so ranks cannot communicate on --device cuda");
  struct Alone final : Collectives {
    bool run(const Op&, const std::atomic<bool>&) override { return true; }
  };
  return std::make_unique<Alone>();
#endif
}

}  // namespace
}  // namespace memtwin::hw

extern "C" const memtwin::hw::CudaDeviceApi* memtwin_cuda_device_api() {
  using namespace memtwin::hw;
  static const CudaDeviceApi api{select_cuda_device, make_cuda_kernels, cuda_memory, cuda_memory_in_use,
                                 make_nccl_collectives, make_cuda_serving_kernels, calibrate_cuda};
  return &api;
}
