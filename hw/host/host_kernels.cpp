#include "hw/host/host_kernels.h"
#include "hw/process_memory.h"
#include "kernels/host_pages.h"

#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace memtwin::hw {
namespace {
constexpr std::size_t kOperandFloats = std::size_t{6} << 20;  // 24 MiB of GEMM operands
// Two 64 MiB streaming buffers: past the last-level cache of most CPUs, so that memory-bound ops
// move their bytes through DRAM, as a GPU's move them through HBM.
constexpr std::size_t kStreamBytes = std::size_t{64} << 20;
}  // namespace

RawMemory host_device_memory() {
  // Zeroed pages, huge ones for the large segments (the KV pool's), as the CPU kernels read best
  // (kernels/host_pages.h).
  return {[](std::int64_t size) { return kernels::allocate_host_pages(static_cast<std::size_t>(size)); },
          [](void* p) { kernels::release_host_pages(p); }};
}

DeviceMemory host_memory() {
  return {host_device_memory(), resident_bytes, peak_resident_bytes, [] { reset_peak_resident(); },
          "process peak resident set (VmHWM)"};
}

void use_one_core() {
  openblas_set_num_threads(1);
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
}

void flush_denormals_to_zero() {
#if defined(__SSE__)
  _mm_setcsr(_mm_getcsr() | 0x8040);  // FTZ (bit 15) | DAZ (bit 6)
#endif
}

HostKernels::HostKernels() : operands_(kOperandFloats, 0.01f), from_(kStreamBytes, 1), to_(kStreamBytes, 0) {
  flush_denormals_to_zero();
}

std::int64_t HostKernels::workspace_bytes() const {
  return static_cast<std::int64_t>(operands_.size() * sizeof(float) + from_.size() + to_.size());
}

void HostKernels::gemm(const GemmShape& g) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0 || g.count <= 0) return;
  // Tile the output until A and B of one tile fit the first two thirds of the workspace and C the
  // last third: outputs never overwrite the operands of a later GEMM.
  const auto cap = static_cast<std::int64_t>(operands_.size());
  const std::int64_t inputs = cap / 3 * 2, outputs = cap - inputs;
  std::int64_t mt = g.m, nt = g.n;
  auto fits = [&] { return mt * g.k + g.k * nt <= inputs && mt * nt <= outputs; };
  while (!fits()) {
    if (nt >= mt && nt > 1) nt = (nt + 1) / 2; else if (mt > 1) mt = (mt + 1) / 2; else break;
  }
  if (!fits()) {
    throw std::runtime_error("host device: a GEMM with inner dimension " + std::to_string(g.k) +
                             " does not fit the kernels' workspace even as one row and column");
  }
  float* a = operands_.data();
  float* b = a + mt * g.k;
  float* c = operands_.data() + inputs;
  last_output_ = c;
  for (std::int64_t rep = 0; rep < g.count; ++rep) {
    for (std::int64_t m0 = 0; m0 < g.m; m0 += mt) {
      for (std::int64_t n0 = 0; n0 < g.n; n0 += nt) {
        const auto mm = static_cast<int>(std::min(mt, g.m - m0));
        const auto nn = static_cast<int>(std::min(nt, g.n - n0));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mm, nn, static_cast<int>(g.k), 1.0f, a,
                    static_cast<int>(g.k), b, nn, 0.0f, c, nn);
        gemm_flops_done_ += 2.0 * mm * nn * static_cast<double>(g.k);
      }
    }
  }
}

void HostKernels::stream(double bytes) { memcopy(bytes / 2); }

void HostKernels::memcopy(double bytes) {
  auto left = static_cast<std::int64_t>(bytes);
  while (left > 0) {
    const auto n = static_cast<std::size_t>(std::min<std::int64_t>(left, static_cast<std::int64_t>(kStreamBytes)));
    std::memcpy(to_.data(), from_.data(), n);
    std::swap(from_, to_);
    left -= static_cast<std::int64_t>(n);
  }
}

void HostKernels::adam(double parameters) {
  // Parameter, gradient and both moments side by side in the streaming buffers: the traffic of a
  // fused CPU Adam (DeepSpeed's), 16 bytes read and 12 written per parameter.
  constexpr float lr = 1e-4f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  const std::size_t per_pass = kStreamBytes * 2 / (4 * sizeof(float));
  auto* p = reinterpret_cast<float*>(from_.data());
  auto* g = p + per_pass / 2;
  auto* m = reinterpret_cast<float*>(to_.data());
  auto* v = m + per_pass / 2;
  auto left = static_cast<std::int64_t>(parameters);
  while (left > 0) {
    const auto n = static_cast<std::size_t>(std::min<std::int64_t>(left, static_cast<std::int64_t>(per_pass / 2)));
    for (std::size_t i = 0; i < n; ++i) {
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
      p[i] -= lr * m[i] / (std::sqrt(v[i]) + eps);
    }
    left -= static_cast<std::int64_t>(n);
  }
}

void HostKernels::compute(const Op& op) {
  switch (op.compute_class) {
    case ComputeClass::gemm:
    case ComputeClass::attention: {
      const auto gemms = gemms_for_op_flops(op);
      if (gemms.empty()) stream(op.bytes);  // no shapes: a memory-bound op
      for (const auto& g : gemms) gemm(g);
      return;
    }
    case ComputeClass::elementwise: stream(op.bytes); return;
    case ComputeClass::cpu_optimizer: adam(op.flops); return;
  }
}

void HostKernels::copy(const Op& op) {
  if (NvmeTier::serves(op.direction)) return nvme_.copy(op.direction, op.bytes);
  memcopy(op.bytes);
}

}  // namespace memtwin::hw
