// The serving engine's kernels on a CUDA device (hw/serving_kernels.h): cuBLAS sgemm with the
// model's shapes (fp32, no TF32, as the iteration model counts fp32 weights), the KV kernels of
// kernels/cuda, the blocks' norms, rotary embedding and activation as small kernels of ours, and
// H2O's and SnapKV's scores and selection (hw/cuda/cuda_eviction.h).
// Everything runs in order on the legacy default stream (the KV kernels' launchers use it too);
// the per-iteration metadata is copied to device buffers that grow to the largest iteration. Written for the CUDA build; not yet run on a GPU.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/cuda/block_best.cuh"
#include "hw/cuda/cuda_check.h"
#include "hw/cuda/cuda_device.h"
#include "hw/cuda/cuda_eviction.h"
#include "hw/serving_kernels.h"
#include "kernels/cuda/kv_cuda.h"

namespace memtwin::hw {
namespace {

void launched(const char* what) { check(cudaGetLastError(), what); }

unsigned blocks_for(long threads, int per_block) { return static_cast<unsigned>((threads + per_block - 1) / per_block); }

__global__ void fill_kernel(float* x, long count, float value) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i < count) x[i] = value;
}

// One block per row: the sum of squares by a block reduction, then the scaled copy.
__global__ void rms_norm_kernel(const float* __restrict__ in, float* __restrict__ out, int hidden,
                                const float* __restrict__ weight, float eps) {
  __shared__ float partial[256];
  const float* x = in + static_cast<long>(blockIdx.x) * hidden;
  float* y = out + static_cast<long>(blockIdx.x) * hidden;
  float sum = 0;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) sum += x[j] * x[j];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float scale = rsqrtf(partial[0] / static_cast<float>(hidden) + eps);
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) y[j] = x[j] * scale * (weight ? weight[j] : 1.0f);
}

// One thread per (token, head, pair of rotated elements).
__global__ void rotary_kernel(float* rows, const std::int32_t* __restrict__ positions, int tokens, int row_stride,
                              int heads, int head_dim, double theta) {
  const int half = head_dim / 2;
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<long>(tokens) * heads * half) return;
  const int j = i % half;
  const int head = (i / half) % heads;
  const int t = i / (static_cast<long>(half) * heads);
  const double angle = positions[t] * pow(theta, -2.0 * j / head_dim);
  const float c = static_cast<float>(cos(angle)), s = static_cast<float>(sin(angle));
  float* x = rows + static_cast<long>(t) * row_stride + static_cast<long>(head) * head_dim;
  const float a = x[j], b = x[j + half];
  x[j] = a * c - b * s;
  x[j + half] = a * s + b * c;
}

__global__ void activation_kernel(float* rows, int tokens, int row_stride, int inner, bool gated) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<long>(tokens) * inner) return;
  const int j = i % inner;
  float* row = rows + (i / inner) * row_stride;
  const float g = row[j];
  row[(gated ? 2 : 1) * inner + j] = g / (1.0f + expf(-g)) * (gated ? row[inner + j] : 1.0f);
}

// One block per row: the index of its largest value (the first of equals).
__global__ void argmax_kernel(const float* __restrict__ x, int cols, int* __restrict__ out) {
  __shared__ float best[256];
  __shared__ int where[256];
  const float* row = x + static_cast<long>(blockIdx.x) * cols;
  float b = -INFINITY;
  int w = 0;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    if (row[j] > b) b = row[j], w = j;
  }
  const int winner = kernels::cuda::block_best<true>(b, w, best, where);
  if (threadIdx.x == 0) out[blockIdx.x] = winner;
}

// A device buffer that grows to the largest request (metadata, workspaces): outside the caching
// allocator, like cuBLAS's workspace, part of the runtime.
class Scratch {
 public:
  ~Scratch() { cudaFree(data_); }
  void* at_least(std::size_t bytes) {
    if (bytes > size_) {
      cudaFree(data_);
      data_ = nullptr;
      size_ = std::max(bytes, 2 * size_);
      check(cudaMalloc(&data_, size_), "cudaMalloc (serving scratch)");
    }
    return data_;
  }
  template <class T>
  T* upload(const T* host, std::size_t count, cudaStream_t stream) {
    auto* d = static_cast<T*>(at_least(std::max<std::size_t>(count, 1) * sizeof(T)));
    if (count > 0) check(cudaMemcpyAsync(d, host, count * sizeof(T), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync (metadata)");
    return d;
  }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

constexpr std::size_t kProductBytes = std::size_t{256} << 20;  // prefill attention's operands
constexpr std::size_t kPinnedBytes = std::size_t{64} << 20;    // swap staging

class CudaServingKernels final : public ServingKernels {
 public:
  explicit CudaServingKernels(int device) : device_(device) {
    check(cudaSetDevice(device_), "cudaSetDevice");
    check(cublasCreate(&blas_), "cublasCreate");
    check(cublasSetStream(blas_, stream_), "cublasSetStream");
    check(cublasSetMathMode(blas_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");  // fp32 GEMMs stay fp32 (no TF32)
    check(cudaMalloc(&products_, kProductBytes), "cudaMalloc (attention products)");
    check(cudaMemset(products_, 0, kProductBytes), "cudaMemset");
    check(cudaMallocHost(&pinned_, kPinnedBytes), "cudaMallocHost");
  }
  ~CudaServingKernels() override {
    cudaFreeHost(pinned_);
    cudaFree(products_);
    cublasDestroy(blas_);
  }

  void gemm(int rows, int cols, int inner, const float* a, int lda, const float* b, int ldb, float beta, float* c,
            int ldc) override {
    const float one = 1.0f;
    // Row-major C = A B is column-major C^T = B^T A^T.
    check(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, cols, rows, inner, &one, b, ldb, a, lda, &beta, c, ldc), "cublasSgemm");
  }

  void fill(float* x, std::int64_t count, float value) override {
    if (count <= 0) return;
    fill_kernel<<<blocks_for(count, 256), 256, 0, stream_>>>(x, count, value);
    launched("fill kernel");
  }

  void rms_norm(const float* in, float* out, int tokens, int hidden, const float* weight, float eps) override {
    if (tokens <= 0) return;
    rms_norm_kernel<<<tokens, 256, 0, stream_>>>(in, out, hidden, weight, eps);
    launched("rms_norm kernel");
  }

  void rotary(float* rows, int tokens, int row_stride, int heads, int head_dim, const std::int32_t* positions,
              double theta) override {
    if (tokens <= 0) return;
    const std::int32_t* p = positions_.upload(positions, static_cast<std::size_t>(tokens), stream_);
    const long threads = static_cast<long>(tokens) * heads * (head_dim / 2);
    rotary_kernel<<<blocks_for(threads, 256), 256, 0, stream_>>>(rows, p, tokens, row_stride, heads, head_dim, theta);
    launched("rotary kernel");
  }

  void activation(float* rows, int tokens, int row_stride, int inner, bool gated) override {
    if (tokens <= 0) return;
    activation_kernel<<<blocks_for(static_cast<long>(tokens) * inner, 256), 256, 0, stream_>>>(rows, tokens, row_stride, inner,
                                                                                              gated);
    launched("activation kernel");
  }

  void copy_rows(const float* src, int src_stride, float* dst, int dst_stride, int rows, int cols) override {
    if (rows <= 0) return;
    check(cudaMemcpy2DAsync(dst, dst_stride * sizeof(float), src, src_stride * sizeof(float), cols * sizeof(float), rows,
                            cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpy2DAsync");
  }

  void write_paged(const float* values, const std::int64_t* slot_mapping, int tokens, const kernels::PagedShape& shape,
                   std::uint8_t* cache) override {
    if (tokens <= 0) return;
    const std::int64_t* slots = slots_.upload(slot_mapping, static_cast<std::size_t>(tokens), stream_);
    kernels::cuda::write_paged(values, slots, tokens, shape, cache);
  }

  void decode_attention(const kernels::DecodeAttentionArgs& a) override {
    kernels::DecodeAttentionArgs d = a;
    d.block_tables = tables_.upload(a.block_tables, static_cast<std::size_t>(a.num_seqs) * a.max_blocks_per_seq, stream_);
    d.context_lens = context_.upload(a.context_lens, static_cast<std::size_t>(a.num_seqs), stream_);
    if (a.probs) kernels::cuda::attention_probabilities(d);  // a pass of its own over the keys
    if (!a.out) return;
    d.probs = nullptr;
    void* workspace = attention_workspace_.at_least(kernels::cuda::workspace_bytes(d, kSplitTokens));
    kernels::cuda::decode_attention(d, workspace, kSplitTokens);
  }

  [[nodiscard]] bool supports_kivi() const override { return true; }
  void kivi_append(const kernels::KiviAppendArgs& a) override {
    kernels::KiviAppendArgs d = a;
    const auto n = static_cast<std::size_t>(a.num_seqs);
    d.first_row = kivi_rows_.upload(a.first_row, n, stream_);
    d.new_tokens = kivi_added_.upload(a.new_tokens, n, stream_);
    d.cached = context_.upload(a.cached, n, stream_);
    d.block_tables = tables_.upload(a.block_tables, n * static_cast<std::size_t>(a.max_blocks_per_seq), stream_);
    d.staged = a.staged ? kivi_staged_.upload(a.staged, n, stream_) : nullptr;
    kernels::cuda::kivi_append(d);
  }
  void kivi_stage_residual(const std::uint8_t* cache, const std::int32_t* block_table, std::int64_t tokens,
                           const kernels::KiviPagedShape& shape, std::uint16_t* out) override {
    const std::size_t blocks = (shape.sequence_bytes(tokens) + shape.slice_bytes() - 1) / shape.slice_bytes();
    kernels::cuda::kivi_stage_residual(cache, tables_.upload(block_table, blocks, stream_), tokens, shape, out);
  }
  void kivi_decode_attention(const kernels::KiviDecodeArgs& a) override {
    kernels::KiviDecodeArgs d = a;
    const auto n = static_cast<std::size_t>(a.num_seqs);
    d.block_tables = tables_.upload(a.block_tables, n * static_cast<std::size_t>(a.max_blocks_per_seq), stream_);
    d.context_lens = context_.upload(a.context_lens, n, stream_);
    const int max_context = *std::max_element(a.context_lens, a.context_lens + a.num_seqs);
    auto* workspace = static_cast<float*>(attention_workspace_.at_least(kernels::cuda::kivi_workspace_bytes(d, max_context)));
    kernels::cuda::kivi_decode_attention(d, workspace, max_context);
  }

  [[nodiscard]] bool supports_score_eviction() const override { return true; }
  void clear_scores(const kernels::PagedScores& scores, const std::int64_t* slot_mapping, int tokens) override {
    if (tokens <= 0) return;
    kernels::cuda::clear_scores(scores, slots_.upload(slot_mapping, static_cast<std::size_t>(tokens), stream_), tokens);
  }
  void accumulate_scores(const float* probs, int rows, int q_heads, int probs_stride, const std::int32_t* block_tables,
                         int max_blocks_per_seq, const std::int32_t* context_lens, const kernels::PagedScores& scores) override {
    if (rows <= 0) return;
    kernels::cuda::accumulate_paged_scores(
        probs, rows, q_heads, probs_stride, tables_.upload(block_tables, static_cast<std::size_t>(rows) * max_blocks_per_seq, stream_),
        max_blocks_per_seq, context_.upload(context_lens, static_cast<std::size_t>(rows), stream_), scores);
  }
  void select_and_compact(std::uint8_t* k_cache, std::uint8_t* v_cache, const kernels::PagedShape& shape,
                          const kernels::PagedScores& scores, const kernels::PromptSelection& selection) override {
    const auto blocks = static_cast<std::size_t>((selection.tokens + shape.block_size - 1) / shape.block_size);
    kernels::PromptSelection d = selection;
    d.block_table = tables_.upload(selection.block_table, blocks, stream_);
    d.score_table = selection.score_table == selection.block_table ? d.block_table
                                                                   : score_tables_.upload(selection.score_table, blocks, stream_);
    kernels::cuda::select_and_compact(k_cache, v_cache, shape, scores, d);
  }
  void score_prompt(const float* queries, int row_stride, int rows, int first_position, int q_heads,
                    const kernels::PagedShape& shape, const std::uint8_t* k_cache, const std::int32_t* block_table,
                    const kernels::PagedScores& scores, const std::int32_t* score_table) override {
    const int total = first_position + rows;
    const auto blocks = static_cast<std::size_t>((total + shape.block_size - 1) / shape.block_size);
    auto* keys = static_cast<float*>(prompt_keys_.at_least(static_cast<std::size_t>(total) * shape.format.head_dim * sizeof(float)));
    auto* logits = static_cast<float*>(prompt_logits_.at_least(static_cast<std::size_t>(rows) * total * sizeof(float)));
    const std::int32_t* table = tables_.upload(block_table, blocks, stream_);
    cuda_eviction::score_prompt(blas_, queries, row_stride, rows, first_position, q_heads, shape, k_cache, table, scores,
                                score_table == block_table ? table : score_tables_.upload(score_table, blocks, stream_), keys,
                                logits);
  }
  void promote_leaving_tokens(std::uint8_t* k_cache, std::uint8_t* v_cache, const kernels::PagedShape& shape,
                              const kernels::PagedScores& scores, const kernels::LeavingTokens& t) override {
    // Three uploads and one launch a layer (was an upload and a launch per sequence and layer,
    // which made H2O's decode 3.2x slower than fp16's on an H200).
    const auto n = static_cast<std::size_t>(t.sequences);
    kernels::LeavingTokens d = t;
    d.block_tables = tables_.upload(t.block_tables, n * static_cast<std::size_t>(t.max_blocks_per_seq), stream_);
    d.heavy = promote_heavy_.upload(t.heavy, n, stream_);
    d.leaving = promote_leaving_.upload(t.leaving, n, stream_);
    kernels::cuda::promote_leaving_tokens(k_cache, v_cache, shape, scores, d);
  }

  void prefill_attention(std::int64_t queries, std::int64_t keys, int head_dim, int heads) override {
    products(queries, keys, head_dim, heads);
    products(queries, head_dim, keys, heads);
  }

  void argmax_rows(const float* x, int rows, int cols, std::vector<int>& out) override {
    out.resize(static_cast<std::size_t>(rows));
    if (rows <= 0) return;
    auto* d = static_cast<int*>(argmax_.at_least(static_cast<std::size_t>(rows) * sizeof(int)));
    argmax_kernel<<<rows, 256, 0, stream_>>>(x, cols, d);
    launched("argmax kernel");
    check(cudaMemcpyAsync(out.data(), d, static_cast<std::size_t>(rows) * sizeof(int), cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync (sampled tokens)");
    synchronize();
  }

  void swap(std::int64_t bytes) override {
    for (std::int64_t left = bytes; left > 0;) {
      const auto n = static_cast<std::size_t>(std::min<std::int64_t>(left, static_cast<std::int64_t>(kPinnedBytes)));
      check(cudaMemcpyAsync(pinned_, products_, n, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (swap)");
      left -= static_cast<std::int64_t>(n);
    }
    synchronize();
  }

  void synchronize() override { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

  void upload(void* device, const void* host, std::int64_t bytes) override {
    check(cudaMemcpyAsync(device, host, static_cast<std::size_t>(bytes), cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (upload)");
    synchronize();  // the host buffer may go once this returns
  }
  void download(void* host, const void* device, std::int64_t bytes) override {
    check(cudaMemcpyAsync(host, device, static_cast<std::size_t>(bytes), cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync (download)");
    synchronize();
  }

 private:
  static constexpr int kSplitTokens = 512;

  // `count` products [m, k] x [k, n], tiled over the products workspace (operands are not the
  // real Q, K, V: the FLOPs and shapes are).
  void products(std::int64_t m, std::int64_t n, std::int64_t k, int count) {
    if (m <= 0 || n <= 0 || k <= 0) return;
    const std::int64_t cap = static_cast<std::int64_t>(kProductBytes / sizeof(float));
    const std::int64_t inputs = cap / 3 * 2;
    std::int64_t mt = m, nt = n;
    auto fits = [&] { return mt * k + k * nt <= inputs && mt * nt <= cap - inputs; };
    while (!fits() && (mt > 1 || nt > 1)) {
      if (nt >= mt && nt > 1) nt = (nt + 1) / 2; else mt = (mt + 1) / 2;
    }
    if (!fits()) throw std::runtime_error("cuda serving: an attention product's inner dimension does not fit the workspace");
    float* a = products_;
    float* b = products_ + mt * k;
    float* c = products_ + inputs;
    const float one = 1.0f, zero = 0.0f;
    for (int rep = 0; rep < count; ++rep)
      for (std::int64_t m0 = 0; m0 < m; m0 += mt)
        for (std::int64_t n0 = 0; n0 < n; n0 += nt) {
          const auto mm = static_cast<int>(std::min(mt, m - m0));
          const auto nn = static_cast<int>(std::min(nt, n - n0));
          check(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, nn, mm, static_cast<int>(k), &one, b, nn, a, static_cast<int>(k),
                            &zero, c, nn),
                "cublasSgemm (attention products)");
        }
  }

  int device_;
  cudaStream_t stream_ = nullptr;  // the legacy default stream: in order with the KV kernels' launches
  cublasHandle_t blas_ = nullptr;
  float* products_ = nullptr;
  void* pinned_ = nullptr;
  Scratch positions_, slots_, tables_, context_, score_tables_, attention_workspace_, argmax_, prompt_keys_, prompt_logits_;
  Scratch kivi_rows_, kivi_added_, kivi_staged_;
  Scratch promote_heavy_, promote_leaving_;
};

}  // namespace

std::unique_ptr<ServingKernels> make_cuda_serving_kernels(int device) { return std::make_unique<CudaServingKernels>(device); }

}  // namespace memtwin::hw
