// [gpu] tests of KIVI's paged cache (kernels/kivi_paged.h): the CUDA append, staging and decode
// attention against the CPU kernels on the same cache. The append does the CPU's arithmetic in its
// order, so the caches' bytes must be equal; attention within float rounding.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/kv_cuda.h"
#include "kernels/kivi_paged.h"
#include "tests/gpu/gpu_check.h"

namespace memtwin::gpu_test {
namespace {

using namespace memtwin::kernels;

// Three sequences appended in chunks through both implementations (staging the residual of
// every quantising sequence, as the engine does), their caches compared after each round, then
// decode attention over them.
void kivi_matches_cpu(int bits, int head_dim) {
  KiviPagedShape s;
  s.block_size = 32;
  s.kv_heads = 2;
  s.head_dim = head_dim;
  s.bits = bits;
  s.residual = 64;
  const int seqs = 3, per_seq = 40, q_heads = 4;
  s.num_blocks = seqs * per_seq;
  const std::string name = "KIVI-" + std::to_string(bits) + " hd" + std::to_string(head_dim);
  std::vector<std::int32_t> tables(static_cast<std::size_t>(s.num_blocks));
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), std::mt19937(9));
  std::vector<std::uint8_t> cpu(s.bytes(), 0);
  std::uint8_t* gpu = to_device(cpu);
  std::int32_t* d_tables = to_device(tables);
  const std::size_t row = static_cast<std::size_t>(s.kv_heads) * head_dim;
  std::vector<std::int32_t> held(seqs, 0);
  const std::int32_t chunks[][seqs] = {{100, 1, 37}, {1, 1, 1}, {40, 30, 1}, {1, 64, 90}, {1, 1, 1}};
  unsigned seed = 1;
  for (const auto& chunk : chunks) {
    std::vector<std::int32_t> first(seqs), added(chunk, chunk + seqs);
    int rows = 0;
    for (int q = 0; q < seqs; ++q) first[q] = rows, rows += chunk[q];
    const auto k = random_floats(rows * row, seed++), v = random_floats(rows * row, seed++);
    // Stage every quantising sequence's residual, from both caches.
    std::vector<std::vector<std::uint16_t>> staged_cpu(seqs);
    std::vector<std::uint16_t*> staged_gpu(seqs, nullptr);
    std::vector<const std::uint16_t*> staged_cpu_ptrs(seqs, nullptr);
    for (int q = 0; q < seqs; ++q) {
      const std::int64_t r0 = held[q] - s.quantized_tokens(held[q]);
      if (s.quantized_tokens(held[q] + chunk[q]) == s.quantized_tokens(held[q]) || r0 == 0) continue;
      staged_cpu[q].resize(static_cast<std::size_t>(r0) * s.residual_token_bytes() / 2);
      kivi_stage_residual(cpu.data(), &tables[q * per_seq], held[q], s, staged_cpu[q].data());
      staged_cpu_ptrs[q] = staged_cpu[q].data();
      staged_gpu[q] = to_device(std::vector<std::uint16_t>(staged_cpu[q].size()));
      cuda::kivi_stage_residual(gpu, d_tables + q * per_seq, held[q], s, staged_gpu[q]);
      expect(to_host(staged_gpu[q], staged_cpu[q].size()) == staged_cpu[q], name + ": the staged residual equals the CPU's");
    }
    auto a = make_kivi_append_args(k.data(), v.data(), seqs, first.data(), added.data(), held.data(), tables.data(), per_seq, s,
                                   cpu.data());
    a.staged = staged_cpu_ptrs.data();
    kivi_append(a);
    KiviAppendArgs d = a;
    d.keys = to_device(k);
    d.values = to_device(v);
    d.first_row = to_device(first);
    d.new_tokens = to_device(added);
    d.cached = to_device(held);
    d.staged = to_device(std::vector<const std::uint16_t*>(staged_gpu.begin(), staged_gpu.end()));
    d.block_tables = d_tables;
    d.cache = gpu;
    cuda::kivi_append(d);
    cudaDeviceSynchronize();
    for (int q = 0; q < seqs; ++q) held[q] += chunk[q];
    expect(to_host(gpu, cpu.size()) == cpu, name + ": the appended cache's bytes equal the CPU's (" + std::to_string(held[0]) + ", " +
                                                std::to_string(held[1]) + ", " + std::to_string(held[2]) + " tokens)");
    cudaFree(const_cast<float*>(d.keys));
    cudaFree(const_cast<float*>(d.values));
    cudaFree(const_cast<std::int32_t*>(d.first_row));
    cudaFree(const_cast<std::int32_t*>(d.new_tokens));
    cudaFree(const_cast<std::int32_t*>(d.cached));
    cudaFree(const_cast<const std::uint16_t**>(d.staged));
    for (auto* p : staged_gpu) cudaFree(p);
  }
  // Decode attention over the same caches.
  const auto query = random_floats(static_cast<std::size_t>(seqs) * q_heads * head_dim, 99);
  std::vector<float> expected(query.size());
  const auto a = make_kivi_decode_args(query.data(), cpu.data(), tables.data(), held.data(), expected.data(), seqs, q_heads, per_seq, s);
  kivi_decode_attention(a, SimdLevel::avx512);  // the CPU's floating-point kernel (not the integer V pass), as the CUDA one
  KiviDecodeArgs d = a;
  d.query = to_device(query);
  d.cache = gpu;
  d.block_tables = d_tables;
  d.context_lens = to_device(held);
  float* out = to_device(std::vector<float>(query.size()));
  d.out = out;
  const int max_context = *std::max_element(held.begin(), held.end());
  float* workspace = to_device(std::vector<float>(cuda::kivi_workspace_bytes(d, max_context) / sizeof(float)));
  cuda::kivi_decode_attention(d, workspace, max_context);
  const auto got = to_host(out, query.size());
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, static_cast<double>(std::fabs(got[i] - expected[i])));
    norm = std::max(norm, static_cast<double>(std::fabs(expected[i])));
  }
  expect(err <= 1e-3 * norm, name + ": decode attention within 1e-3 of the CPU's (max error " + std::to_string(err) + " of " +
                                 std::to_string(norm) + ")");
  for (const void* p : {static_cast<const void*>(gpu), static_cast<const void*>(d_tables), static_cast<const void*>(d.query),
                        static_cast<const void*>(d.context_lens), static_cast<const void*>(out), static_cast<const void*>(workspace)})
    cudaFree(const_cast<void*>(p));
}

}  // namespace

void kivi_kernels_match_cpu() {
  for (int bits : {2, 4})
    for (int head_dim : {64, 128}) kivi_matches_cpu(bits, head_dim);
}

}  // namespace memtwin::gpu_test
