// Eviction support on the GPU (eviction.h): H2O's score accumulation, SnapKV's pooled window
// votes, per-head attention entropy, the choice of tokens to keep, and in-place compaction of a
// head's paged vectors. Sums run in the CPU kernels' order (no fused multiply-add), so scores and
// votes are bit for bit the CPU's; entropy is a parallel reduction in double.
#include <cuda_runtime.h>
#include <thrust/device_ptr.h>
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/functional.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda/kv_cuda.h"

namespace memtwin::kernels::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

unsigned blocks_for(long threads, int per_block) { return static_cast<unsigned>((threads + per_block - 1) / per_block); }

__global__ void accumulate_kernel(const float* __restrict__ probs,  // [q_heads, tokens]
                                  float* __restrict__ scores,       // [kv_heads, tokens]
                                  int group, int kv_heads, int tokens) {
  const long index = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (index >= static_cast<long>(kv_heads) * tokens) return;
  const int t = index % tokens, kvh = index / tokens;
  float s = scores[index];
  for (int g = 0; g < group; ++g) s = __fadd_rn(s, probs[static_cast<long>(kvh * group + g) * tokens + t]);
  scores[index] = s;
}

__device__ float window_votes(const float* attention, int h, int window, int tokens, int t) {
  float v = 0.f;
  for (int w = 0; w < window; ++w) v = __fadd_rn(v, attention[(static_cast<long>(h) * window + w) * tokens + t]);
  return v;
}

__global__ void snapkv_kernel(const float* __restrict__ attention,  // [heads, window, tokens]
                              float* __restrict__ out,              // [heads, tokens]
                              int heads, int window, int tokens, int half) {
  const long index = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (index >= static_cast<long>(heads) * tokens) return;
  const int t = index % tokens, h = index / tokens;
  float best = window_votes(attention, h, window, tokens, t);
  for (int d = max(0, t - half); d <= min(tokens - 1, t + half); ++d) best = fmaxf(best, window_votes(attention, h, window, tokens, d));
  out[index] = best;
}

constexpr int kEntropyThreads = 256;

__global__ void entropy_kernel(const float* __restrict__ probs, float* __restrict__ out, int tokens) {
  __shared__ double partial[kEntropyThreads];
  const float* row = probs + static_cast<long>(blockIdx.x) * tokens;
  double sum = 0;
  for (int t = threadIdx.x; t < tokens; t += blockDim.x) {
    const double p = row[t];
    if (p > 0) sum -= p * log(p);
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<float>(partial[0]);
}

// One block: first every thread checks its pairs of kept positions (a descending pair moves
// nothing and is reported); then chunk by chunk all sources are staged in shared memory before
// any target is written. A later chunk's sources lie at or beyond their own targets, beyond this
// chunk's, so nothing is overwritten before it is read.
constexpr int kCompactChunk = 32;

__global__ void compact_kernel(std::uint8_t* __restrict__ cache, const std::int32_t* __restrict__ block_table,
                               const std::int32_t* __restrict__ kept, int count, int head, int block_size,
                               std::size_t token_stride, std::size_t vector_bytes, int* __restrict__ error) {
  extern __shared__ std::uint8_t staged[];  // [kCompactChunk, vector_bytes]
  __shared__ int bad;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  for (int i = 1 + threadIdx.x; i < count; i += blockDim.x) {
    if (kept[i] <= kept[i - 1]) bad = 1;
  }
  __syncthreads();
  if (bad) {
    if (threadIdx.x == 0) *error = 1;
    return;
  }
  auto at = [&](int logical) {
    return cache + static_cast<std::size_t>(block_table[logical / block_size]) * token_stride * block_size +
           static_cast<std::size_t>(logical % block_size) * token_stride + head * vector_bytes;
  };
  for (int first = 0; first < count; first += kCompactChunk) {
    const int n = min(kCompactChunk, count - first);
    const long bytes = static_cast<long>(n) * vector_bytes;
    for (long e = threadIdx.x; e < bytes; e += blockDim.x) {
      const int i = static_cast<int>(e / vector_bytes);
      staged[e] = at(kept[first + i])[e % vector_bytes];
    }
    __syncthreads();
    for (long e = threadIdx.x; e < bytes; e += blockDim.x) {
      const int i = static_cast<int>(e / vector_bytes);
      at(first + i)[e % vector_bytes] = staged[e];
    }
    __syncthreads();
  }
}

}  // namespace

void accumulate_attention(const float* probs, int q_heads, int kv_heads, int tokens, float* scores) {
  if (kv_heads <= 0 || q_heads % kv_heads != 0) {
    throw std::invalid_argument("accumulate_attention (CUDA): q_heads must be a multiple of kv_heads");
  }
  if (!probs || !scores) throw std::invalid_argument("accumulate_attention (CUDA): null pointer");
  const long threads = static_cast<long>(kv_heads) * tokens;
  if (threads <= 0) return;
  accumulate_kernel<<<blocks_for(threads, 256), 256>>>(probs, scores, q_heads / kv_heads, kv_heads, tokens);
  check(cudaGetLastError(), "accumulate_attention kernel launch");
}

void snapkv_scores(const float* attention, int heads, int window, int tokens, int kernel, float* out) {
  if (kernel < 1 || kernel % 2 == 0) throw std::invalid_argument("snapkv_scores (CUDA): the pooling kernel must be odd and positive");
  if (!attention || !out) throw std::invalid_argument("snapkv_scores (CUDA): null pointer");
  const long threads = static_cast<long>(heads) * tokens;
  if (threads <= 0) return;
  snapkv_kernel<<<blocks_for(threads, 256), 256>>>(attention, out, heads, window, tokens, kernel / 2);
  check(cudaGetLastError(), "snapkv_scores kernel launch");
}

void attention_entropy(const float* probs, int heads, int tokens, float* out) {
  if (!probs || !out) throw std::invalid_argument("attention_entropy (CUDA): null pointer");
  if (heads <= 0) return;
  entropy_kernel<<<heads, kEntropyThreads>>>(probs, out, tokens);
  check(cudaGetLastError(), "attention_entropy kernel launch");
}

int select_tokens(const float* scores, int tokens, int keep, int sinks, int recent, std::int32_t* kept) {
  if (!scores || !kept) throw std::invalid_argument("select_tokens (CUDA): null pointer");
  if (tokens < 0 || keep < 0 || sinks < 0 || recent < 0) throw std::invalid_argument("select_tokens (CUDA): negative count");
  thrust::device_ptr<std::int32_t> out(kept);
  if (tokens <= keep) {
    thrust::sequence(thrust::device, out, out + tokens);
    return tokens;
  }
  sinks = std::min(sinks, keep);
  recent = std::min(recent, keep - sinks);
  const int middle_begin = sinks, middle_end = tokens - recent, chosen = keep - sinks - recent;
  // The middle's indices by descending score; a stable sort keeps ties in index order (older first).
  thrust::device_vector<float> keys(thrust::device_ptr<const float>(scores) + middle_begin,
                                    thrust::device_ptr<const float>(scores) + middle_end);
  thrust::device_vector<std::int32_t> order(middle_end - middle_begin);
  thrust::sequence(order.begin(), order.end(), middle_begin);
  thrust::stable_sort_by_key(keys.begin(), keys.end(), order.begin(), thrust::greater<float>());
  thrust::sequence(thrust::device, out, out + sinks);
  thrust::copy(order.begin(), order.begin() + chosen, out + sinks);
  thrust::sequence(thrust::device, out + sinks + chosen, out + keep, middle_end);
  thrust::sort(thrust::device, out + sinks, out + sinks + chosen);
  check(cudaGetLastError(), "select_tokens");
  return keep;
}

void compact_head(std::uint8_t* cache, const PagedShape& shape, const std::int32_t* block_table, int head,
                  const std::int32_t* kept, int count) {
  shape.format.validate();
  if (!cache || !block_table || (!kept && count > 0)) throw std::invalid_argument("compact_head (CUDA): null pointer");
  if (head < 0 || head >= shape.kv_heads) throw std::invalid_argument("compact_head (CUDA): head out of range");
  if (count <= 0) return;
  // One flag for the process, not a cudaMalloc and cudaFree per call: compaction runs per head,
  // layer and prompt, and each cudaFree waits for the whole device.
  static int* error = [] {
    int* flag = nullptr;
    check(cudaMalloc(&flag, sizeof(int)), "compact_head: cudaMalloc");
    return flag;
  }();
  check(cudaMemsetAsync(error, 0, sizeof(int)), "compact_head: cudaMemsetAsync");
  const std::size_t vector_bytes = shape.format.vector_bytes();
  compact_kernel<<<1, 256, kCompactChunk * vector_bytes>>>(cache, block_table, kept, count, head, shape.block_size,
                                                          shape.token_stride(), vector_bytes, error);
  int flagged = 0;
  const cudaError_t launched = cudaGetLastError();
  const cudaError_t copied = cudaMemcpy(&flagged, error, sizeof(int), cudaMemcpyDeviceToHost);
  check(launched, "compact_head kernel launch");
  check(copied, "compact_head: reading the kernel's check");
  if (flagged) throw std::invalid_argument("compact_head (CUDA): kept tokens must ascend");
}

}  // namespace memtwin::kernels::cuda
