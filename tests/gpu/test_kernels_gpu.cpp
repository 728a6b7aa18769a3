// [gpu] tests: the CUDA KV kernels against the CPU ones on the same bytes. Without a CUDA device
// the binary prints that it skipped and exits 77, which ctest reports as "Skipped".
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/kv_cuda.h"
#include "kernels/kv_kernels.h"
#include "tests/gpu/gpu_check.h"

using namespace memtwin::kernels;
namespace gpu_test = memtwin::gpu_test;

namespace {

using gpu_test::expect;
using gpu_test::to_device;

void decode_matches_cpu(KvElement element, int head_dim) {
  const int seqs = 4, kv_heads = 2, q_heads = 8, block_size = 16, max_blocks = 80;
  const int max_context = max_blocks * block_size;
  const std::vector<std::int32_t> context = {1, 130, 700, 1280};
  KvFormat f;
  f.element = element;
  f.head_dim = head_dim;
  if (element == KvElement::fp8) f.fp8_scale = 0.05f;  // normal(0, 1) / 0.05 spans most of e4m3's range
  PagedShape shape{seqs * max_blocks, block_size, kv_heads, f};
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> q(static_cast<std::size_t>(seqs) * q_heads * head_dim);
  std::vector<float> kv(static_cast<std::size_t>(max_context) * kv_heads * head_dim);
  for (auto& x : q) x = normal(rng);
  std::vector<std::uint8_t> kc(shape.bytes()), vc(shape.bytes());
  std::vector<std::int32_t> table(seqs * max_blocks);
  for (int i = 0; i < seqs * max_blocks; ++i) table[i] = (i * 13) % (seqs * max_blocks);
  for (int s = 0; s < seqs; ++s) {
    std::vector<std::int64_t> slots(max_context);
    for (int t = 0; t < max_context; ++t) slots[t] = table[s * max_blocks + t / block_size] * block_size + t % block_size;
    for (auto& x : kv) x = normal(rng);
    write_paged(kv.data(), slots.data(), max_context, shape, kc.data());
    for (auto& x : kv) x = normal(rng);
    write_paged(kv.data(), slots.data(), max_context, shape, vc.data());
  }
  std::vector<float> cpu(q.size()), gpu(q.size());
  const DecodeAttentionArgs a = make_decode_args(q.data(), kc.data(), vc.data(), table.data(), context.data(), cpu.data(),
                                                 seqs, q_heads, max_blocks, shape);
  // The AVX-512 kernel at most: at the VNNI level the CPU scores integer keys against a rounded
  // query, which the CUDA kernel does not.
  decode_attention(a, SimdLevel::avx512);

  DecodeAttentionArgs d = a;
  d.query = to_device(q);
  d.k_cache = to_device(kc);
  d.v_cache = to_device(vc);
  d.block_tables = to_device(table);
  d.context_lens = to_device(context);
  float* out = nullptr;
  cudaMalloc(&out, gpu.size() * sizeof(float));
  d.out = out;
  void* ws = nullptr;
  cudaMalloc(&ws, cuda::workspace_bytes(d, 256));
  cuda::decode_attention(d, ws, 256);
  cudaMemcpy(gpu.data(), out, gpu.size() * sizeof(float), cudaMemcpyDeviceToHost);
  double worst = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(cpu[i] - gpu[i])));
  expect(worst < 2e-3, "decode attention bits " + std::to_string(f.bits()) + " head_dim " + std::to_string(head_dim) +
                           ": max |cuda - cpu| = " + std::to_string(worst));
  for (const void* p : {static_cast<const void*>(d.query), static_cast<const void*>(d.k_cache),
                        static_cast<const void*>(d.v_cache), static_cast<const void*>(d.block_tables),
                        static_cast<const void*>(d.context_lens), static_cast<const void*>(out), static_cast<const void*>(ws)}) {
    cudaFree(const_cast<void*>(p));
  }
}

void write_matches_cpu(KvElement element) {
  KvFormat f;
  f.element = element;
  PagedShape shape{8, 16, 4, f};
  const int tokens = 100;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<float> x(static_cast<std::size_t>(tokens) * 4 * 128);
  for (auto& v : x) v = normal(rng);
  std::vector<std::int64_t> slots(tokens);
  for (int t = 0; t < tokens; ++t) slots[t] = (t * 5) % (8 * 16);
  std::vector<std::uint8_t> cpu(shape.bytes(), 0), gpu(shape.bytes(), 0);
  write_paged(x.data(), slots.data(), tokens, shape, cpu.data());
  float* dx = to_device(x);
  std::int64_t* ds = to_device(slots);
  std::uint8_t* dc = to_device(gpu);
  cuda::write_paged(dx, ds, tokens, shape, dc);
  cudaMemcpy(gpu.data(), dc, gpu.size(), cudaMemcpyDeviceToHost);
  // Codes may differ by one step where float rounding lands differently; compare dequantised.
  std::vector<float> a(128), b(128);
  double worst = 0;
  for (int t = 0; t < tokens; ++t) {
    const int block = static_cast<int>(slots[t] / 16), slot = static_cast<int>(slots[t] % 16);
    for (int h = 0; h < 4; ++h) {
      dequantize_vector(cpu.data() + shape.offset(block, slot, h), f, a.data());
      dequantize_vector(gpu.data() + shape.offset(block, slot, h), f, b.data());
      for (int i = 0; i < 128; ++i) worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
    }
  }
  // fp8: one e4m3 step (an eighth of the value's power of two) where the division rounds
  // differently; the values are normal(0, 3), so under 16 in magnitude: a step of at most 2.
  const double step = element == KvElement::fp16 ? 0.0 : element == KvElement::fp8 ? 2.0 : 24.0 / ((1 << f.bits()) - 1);
  expect(worst <= step * 1.01 + 1e-6, "write_paged " + std::string(element == KvElement::fp8 ? "fp8" : "bits " + std::to_string(f.bits())) +
                                          ": max difference " + std::to_string(worst));
  cudaFree(dx);
  cudaFree(ds);
  cudaFree(dc);
}

}  // namespace

int main() {
  if (!cuda::device_available()) {
    std::printf("skipped: no CUDA device (the [gpu] kernel tests need one)\n");
    return 77;
  }
  for (KvElement e : {KvElement::fp16, KvElement::fp8, KvElement::int8, KvElement::int4, KvElement::int2}) {
    for (int hd : {64, 128, 256}) decode_matches_cpu(e, hd);
    write_matches_cpu(e);
  }
  gpu_test::compression_kernels_match_cpu();
  gpu_test::score_kernels_match_cpu();
  gpu_test::kivi_kernels_match_cpu();
  std::printf("%d passed, %d failed\n", gpu_test::checks - gpu_test::failures, gpu_test::failures);
  return gpu_test::failures == 0 ? 0 : 1;
}
