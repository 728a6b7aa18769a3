// The serving engine's score-based eviction on the GPU (kv_cuda.h; the CPU kernels of eviction.h
// and decode attention's probabilities): paged scores, selection and compaction, H2O's per-step
// eviction, and the parts of H2O's prompt scores around its QK^T product. Scores accumulate with
// atomics (sums in any order); everything runs on the legacy default stream.
#include "kernels/cuda/kv_cuda.h"

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/block_best.cuh"

namespace memtwin::kernels::cuda {
namespace {

constexpr int kThreads = 256;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

void launched(const char* what) { check(cudaGetLastError(), what); }

unsigned blocks_for(long threads, int per_block) { return static_cast<unsigned>((threads + per_block - 1) / per_block); }

// Where (logical token, head) lives: byte offset of its vector in a paged K or V cache, index of
// its score in a paged score array.
__device__ long vector_offset(const std::int32_t* table, int t, int head, int block_size, int kv_heads, long vector_bytes) {
  return ((static_cast<long>(table[t / block_size]) * block_size + t % block_size) * kv_heads + head) * vector_bytes;
}
__device__ long score_index(const std::int32_t* table, int t, int head, int block_size, int kv_heads) {
  return (static_cast<long>(table[t / block_size]) * block_size + t % block_size) * kv_heads + head;
}

__device__ float element(const std::uint8_t* vector, int i, bool fp8, float fp8_scale) {
  if (fp8) return static_cast<float>(__half(__nv_cvt_fp8_to_halfraw(vector[i], __NV_E4M3))) * fp8_scale;
  return __half2float(reinterpret_cast<const __half*>(vector)[i]);
}

// Block-wide reduction of one float per thread (max or sum); every thread gets the result.
template <bool Max>
__device__ float block_reduce(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const float o = shared[threadIdx.x + stride];
      shared[threadIdx.x] = Max ? fmaxf(shared[threadIdx.x], o) : shared[threadIdx.x] + o;
    }
    __syncthreads();
  }
  const float r = shared[0];
  __syncthreads();
  return r;
}

// One block per (sequence, query head): scaled dot products with every cached key, then the
// softmax in place in the probabilities row.
__global__ void probabilities_kernel(const float* __restrict__ query, const std::uint8_t* __restrict__ k_cache,
                                     const std::int32_t* __restrict__ tables, const std::int32_t* __restrict__ context,
                                     float* __restrict__ probs, int probs_stride, int q_heads, int kv_heads, int head_dim,
                                     int block_size, int max_blocks, long vector_bytes, float scale, bool fp8,
                                     float fp8_scale) {
  __shared__ float q[256];
  __shared__ float reduce[kThreads];
  const int seq = blockIdx.x, h = blockIdx.y, kvh = h / (q_heads / kv_heads);
  const int ctx = context[seq];
  const std::int32_t* table = tables + static_cast<long>(seq) * max_blocks;
  for (int i = threadIdx.x; i < head_dim; i += blockDim.x) q[i] = query[(static_cast<long>(seq) * q_heads + h) * head_dim + i];
  __syncthreads();
  float* row = probs + (static_cast<long>(seq) * q_heads + h) * probs_stride;
  float m = -INFINITY;
  for (int t = threadIdx.x; t < ctx; t += blockDim.x) {
    const std::uint8_t* k = k_cache + vector_offset(table, t, kvh, block_size, kv_heads, vector_bytes);
    float dot = 0.f;
    for (int i = 0; i < head_dim; ++i) dot += q[i] * element(k, i, fp8, fp8_scale);
    row[t] = dot * scale;
    m = fmaxf(m, row[t]);
  }
  m = block_reduce<true>(m, reduce);
  float sum = 0.f;
  for (int t = threadIdx.x; t < ctx; t += blockDim.x) sum += (row[t] = expf(row[t] - m));
  const float inv = 1.f / block_reduce<false>(sum, reduce);
  for (int t = threadIdx.x; t < ctx; t += blockDim.x) row[t] *= inv;
}

__global__ void clear_kernel(float* scores, const std::int64_t* __restrict__ slots, int tokens, int kv_heads) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<long>(tokens) * kv_heads) return;
  const std::int64_t slot = slots[i / kv_heads];
  if (slot >= 0) scores[slot * kv_heads + i % kv_heads] = 0.f;
}

// Grid (rows, KV heads); threads over the row's tokens: the GQA group's probabilities summed, then
// added to the token's score (rows of one sequence add to the same scores: atomically).
__global__ void accumulate_kernel(const float* __restrict__ probs, int q_heads, int probs_stride,
                                  const std::int32_t* __restrict__ tables, int max_blocks,
                                  const std::int32_t* __restrict__ context, float* scores, int block_size, int kv_heads) {
  const int r = blockIdx.x, kvh = blockIdx.y, group = q_heads / kv_heads;
  const std::int32_t* table = tables + static_cast<long>(r) * max_blocks;
  for (int t = threadIdx.x; t < context[r]; t += blockDim.x) {
    float p = 0.f;
    for (int g = 0; g < group; ++g) p += probs[(static_cast<long>(r) * q_heads + kvh * group + g) * probs_stride + t];
    atomicAdd(scores + score_index(table, t, kvh, block_size, kv_heads), p);
  }
}

// One block per KV head: the lowest-scored heavy hitter (the first of equals), then the leaving
// token's vectors and score over it when it scored higher.
// Block (head, sequence): the sequence's table at tables + sequence x table_stride, its heavy count
// and leaving position at heavy_of[sequence], leaving_of[sequence].
__global__ void promote_kernel(std::uint8_t* k_cache, std::uint8_t* v_cache, float* scores, const std::int32_t* __restrict__ tables,
                               int table_stride, const std::int32_t* __restrict__ heavy_of, const std::int32_t* __restrict__ leaving_of,
                               int block_size, int kv_heads, long vector_bytes) {
  __shared__ float best[kThreads];
  __shared__ int where[kThreads];
  const int head = blockIdx.x;
  const std::int32_t* table = tables + static_cast<long>(blockIdx.y) * table_stride;
  const int heavy = heavy_of[blockIdx.y], leaving = leaving_of[blockIdx.y];
  float b = INFINITY;
  int w = -1;
  for (int t = threadIdx.x; t < heavy; t += blockDim.x) {
    const float s = scores[score_index(table, t, head, block_size, kv_heads)];
    if (s < b) b = s, w = t;
  }
  const int lowest = block_best<false>(b, w, best, where);
  const float leaving_score = scores[score_index(table, leaving, head, block_size, kv_heads)];
  const bool promote = lowest >= 0 && leaving_score > scores[score_index(table, lowest, head, block_size, kv_heads)];
  __syncthreads();  // every thread has decided before thread 0 overwrites the lowest score
  if (!promote) return;
  const long to = vector_offset(table, lowest, head, block_size, kv_heads, vector_bytes);
  const long from = vector_offset(table, leaving, head, block_size, kv_heads, vector_bytes);
  for (long i = threadIdx.x; i < vector_bytes; i += blockDim.x) {
    k_cache[to + i] = k_cache[from + i];
    v_cache[to + i] = v_cache[from + i];
  }
  if (threadIdx.x == 0) scores[score_index(table, lowest, head, block_size, kv_heads)] = leaving_score;
}

// Dequantised keys of one KV head, [keys, head_dim], one thread per element.
__global__ void gather_keys_kernel(const std::uint8_t* __restrict__ k_cache, const std::int32_t* __restrict__ table, int kvh,
                                   int keys, int head_dim, int block_size, int kv_heads, long vector_bytes, bool fp8,
                                   float fp8_scale, float* __restrict__ out) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<long>(keys) * head_dim) return;
  const int t = i / head_dim, d = i % head_dim;
  out[i] = element(k_cache + vector_offset(table, t, kvh, block_size, kv_heads, vector_bytes), d, fp8, fp8_scale);
}

// One block per query row: its causal softmax over logits[row, 0 .. first + row], added to the
// tokens' scores of KV head kvh.
__global__ void causal_scores_kernel(float* __restrict__ logits, int keys, int first, const std::int32_t* __restrict__ table,
                                     int kvh, float* scores, int block_size, int kv_heads) {
  __shared__ float reduce[kThreads];
  const int r = blockIdx.x, seen = first + r + 1;
  float* row = logits + static_cast<long>(r) * keys;
  float m = -INFINITY;
  for (int t = threadIdx.x; t < seen; t += blockDim.x) m = fmaxf(m, row[t]);
  m = block_reduce<true>(m, reduce);
  float sum = 0.f;
  for (int t = threadIdx.x; t < seen; t += blockDim.x) sum += (row[t] = expf(row[t] - m));
  const float inv = 1.f / block_reduce<false>(sum, reduce);
  for (int t = threadIdx.x; t < seen; t += blockDim.x) atomicAdd(scores + score_index(table, t, kvh, block_size, kv_heads), row[t] * inv);
}

__global__ void gather_scores_kernel(const float* __restrict__ scores, const std::int32_t* __restrict__ table, int head,
                                     int tokens, int block_size, int kv_heads, float* __restrict__ out) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < tokens) out[t] = scores[score_index(table, t, head, block_size, kv_heads)];
}

// The kept tokens' scores moved to the front, in order (one thread: ascending moves never
// overwrite a score still to be read).
// In place, one block: kept ascends, so kept[i] >= i and a chunk's sources lie at or after its
// destinations; each chunk reads all its sources before it writes (a single thread walking the
// list took about 1 ms a head on an H200, most of an H2O prompt's selection).
__global__ void compact_scores_kernel(float* scores, const std::int32_t* __restrict__ table, int head,
                                      const std::int32_t* __restrict__ kept, int count, int block_size, int kv_heads) {
  for (int first = 0; first < count; first += blockDim.x) {
    const int i = first + static_cast<int>(threadIdx.x);
    float moved = 0.0f;
    if (i < count) moved = scores[score_index(table, kept[i], head, block_size, kv_heads)];
    __syncthreads();
    if (i < count) scores[score_index(table, i, head, block_size, kv_heads)] = moved;
    __syncthreads();
  }
}

// A device buffer for the duration of one call.
template <class T>
struct DeviceArray {
  explicit DeviceArray(long count) { check(cudaMalloc(&data, static_cast<std::size_t>(std::max(count, 1L)) * sizeof(T)), "cudaMalloc (eviction)"); }
  ~DeviceArray() { cudaFree(data); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* data = nullptr;
};

}  // namespace

void attention_probabilities(const DecodeAttentionArgs& a) {
  const KvFormat& f = a.shape.format;
  if (f.quantized()) throw std::invalid_argument("attention probabilities: fp16 or fp8 caches only");
  if (!a.probs || a.probs_stride < a.max_blocks_per_seq * a.shape.block_size || f.head_dim > 256) {
    throw std::invalid_argument("attention probabilities: a probabilities buffer of max_blocks_per_seq * block_size per row, head_dim <= 256");
  }
  probabilities_kernel<<<dim3(a.num_seqs, a.q_heads), kThreads>>>(
      a.query, a.k_cache, a.block_tables, a.context_lens, a.probs, a.probs_stride, a.q_heads, a.shape.kv_heads, f.head_dim,
      a.shape.block_size, a.max_blocks_per_seq, static_cast<long>(f.vector_bytes()), a.scale, f.element == KvElement::fp8,
      f.fp8_scale);
  launched("attention probabilities kernel");
}

void clear_scores(const PagedScores& scores, const std::int64_t* slot_mapping, int tokens) {
  if (tokens <= 0) return;
  clear_kernel<<<blocks_for(static_cast<long>(tokens) * scores.kv_heads, kThreads), kThreads>>>(scores.data, slot_mapping, tokens,
                                                                                             scores.kv_heads);
  launched("clear scores kernel");
}

void accumulate_paged_scores(const float* probs, int rows, int q_heads, int probs_stride, const std::int32_t* block_tables,
                       int max_blocks_per_seq, const std::int32_t* context_lens, const PagedScores& scores) {
  if (rows <= 0) return;
  if (scores.kv_heads <= 0 || q_heads % scores.kv_heads != 0) throw std::invalid_argument("accumulate_scores: q_heads must be a multiple of kv_heads");
  accumulate_kernel<<<dim3(rows, scores.kv_heads), kThreads>>>(probs, q_heads, probs_stride, block_tables, max_blocks_per_seq,
                                                               context_lens, scores.data, scores.block_size, scores.kv_heads);
  launched("accumulate scores kernel");
}

void select_and_compact(std::uint8_t* k_cache, std::uint8_t* v_cache, const PagedShape& shape,
                        const PagedScores& scores, const PromptSelection& s) {
  if (s.pooling < 1 || s.pooling % 2 == 0) throw std::invalid_argument("select_and_compact: the pooling kernel must be odd and positive");
  if (s.keep <= 0 || s.recent < 0 || s.tokens <= 0) throw std::invalid_argument("select_and_compact: keep and tokens must be positive");
  DeviceArray<float> row(s.tokens), pooled(s.tokens);
  DeviceArray<std::int32_t> kept(s.tokens);
  for (int head = 0; head < shape.kv_heads; ++head) {
    gather_scores_kernel<<<blocks_for(s.tokens, kThreads), kThreads>>>(scores.data, s.score_table, head, s.tokens,
                                                                       scores.block_size, scores.kv_heads, row.data);
    launched("gather scores kernel");
    const float* ranked = row.data;
    if (s.pooling > 1) {
      snapkv_scores(row.data, 1, 1, s.tokens, s.pooling, pooled.data);
      ranked = pooled.data;
    }
    const int count = select_tokens(ranked, s.tokens, s.keep, 0, s.recent, kept.data);
    compact_head(k_cache, shape, s.block_table, head, kept.data, count);
    compact_head(v_cache, shape, s.block_table, head, kept.data, count);
    if (s.move_scores) {
      compact_scores_kernel<<<1, kThreads>>>(scores.data, s.score_table, head, kept.data, count, scores.block_size, scores.kv_heads);
      launched("compact scores kernel");
    }
  }
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (selection)");  // the scratch arrays are freed next
}

void gather_keys(const std::uint8_t* k_cache, const PagedShape& shape, const std::int32_t* block_table, int head, int tokens,
                 float* out) {
  const KvFormat& f = shape.format;
  if (f.quantized()) throw std::invalid_argument("gather_keys: fp16 or fp8 caches only");
  if (tokens <= 0) return;
  gather_keys_kernel<<<blocks_for(static_cast<long>(tokens) * f.head_dim, kThreads), kThreads>>>(
      k_cache, block_table, head, tokens, f.head_dim, shape.block_size, shape.kv_heads, static_cast<long>(f.vector_bytes()),
      f.element == KvElement::fp8, f.fp8_scale, out);
  launched("gather keys kernel");
}

void add_causal_softmax(float* logits, int rows, int keys, int first_position, const std::int32_t* block_table, int head,
                        const PagedScores& scores) {
  if (rows <= 0) return;
  causal_scores_kernel<<<rows, kThreads>>>(logits, keys, first_position, block_table, head, scores.data, scores.block_size,
                                           scores.kv_heads);
  launched("causal scores kernel");
}

void promote_leaving_tokens(std::uint8_t* k_cache, std::uint8_t* v_cache, const PagedShape& shape, const PagedScores& scores,
                            const LeavingTokens& t) {
  if (t.sequences <= 0) return;
  promote_kernel<<<dim3(shape.kv_heads, t.sequences), kThreads>>>(k_cache, v_cache, scores.data, t.block_tables, t.max_blocks_per_seq,
                                                                  t.heavy, t.leaving, shape.block_size, shape.kv_heads,
                                                                  static_cast<long>(shape.format.vector_bytes()));
  launched("promote leaving tokens kernel");
}

}  // namespace memtwin::kernels::cuda
