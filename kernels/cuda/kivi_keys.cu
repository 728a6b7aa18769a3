// KIVI's per-channel key quantisation (kivi.h) on the GPU: one thread per (block of G tokens,
// channel), so a warp reads 32 neighbouring channels of the same token at once. The arithmetic is
// the CPU kernel's operation for operation (IEEE division and rounding half away from zero, no
// fused multiply-add), so both write the same bytes.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/kv_cuda.h"

namespace memtwin::kernels::cuda {
namespace {

__global__ void quantize_keys_kernel(const float* __restrict__ keys,  // [blocks, group, head_dim]
                                     std::uint8_t* __restrict__ out,  // [blocks, head_dim, code_bytes + 4]
                                     int blocks, int group, int head_dim, int bits) {
  const long index = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (index >= static_cast<long>(blocks) * head_dim) return;
  const int c = index % head_dim;
  const long b = index / head_dim;
  const float* x = keys + b * group * head_dim + c;
  float lo = x[0], hi = x[0];
  for (int t = 1; t < group; ++t) {
    lo = fminf(lo, x[t * head_dim]);
    hi = fmaxf(hi, x[t * head_dim]);
  }
  const int levels = (1 << bits) - 1, code_bytes = (group * bits + 7) / 8;
  const __half scale_h = __float2half_rn(__fdiv_rn(__fsub_rn(hi, lo), static_cast<float>(levels)));
  const __half zero_h = __float2half_rn(lo);
  const float scale = __half2float(scale_h), zero = __half2float(zero_h);
  std::uint8_t* base = out + (b * head_dim + c) * (code_bytes + 4);
  for (int byte = 0; byte < code_bytes; ++byte) {
    unsigned packed = 0;
    for (int k = 0; k < 8 / bits; ++k) {
      const int t = byte * (8 / bits) + k;
      if (t >= group) break;
      int code = scale > 0 ? static_cast<int>(roundf(__fdiv_rn(__fsub_rn(x[t * head_dim], zero), scale))) : 0;
      code = min(max(code, 0), levels);
      packed |= static_cast<unsigned>(code) << (k * bits);
    }
    base[byte] = static_cast<std::uint8_t>(packed);
  }
  reinterpret_cast<__half*>(base + code_bytes)[0] = scale_h;  // code_bytes is even for every valid (G, bits)
  reinterpret_cast<__half*>(base + code_bytes)[1] = zero_h;
}

__global__ void dequantize_keys_kernel(const std::uint8_t* __restrict__ in, float* __restrict__ keys, int blocks,
                                       int group, int head_dim, int bits) {
  const long index = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (index >= static_cast<long>(blocks) * head_dim) return;
  const int c = index % head_dim;
  const long b = index / head_dim;
  const int code_bytes = (group * bits + 7) / 8, mask = (1 << bits) - 1;
  const std::uint8_t* base = in + (b * head_dim + c) * (code_bytes + 4);
  const float scale = __half2float(reinterpret_cast<const __half*>(base + code_bytes)[0]);
  const float zero = __half2float(reinterpret_cast<const __half*>(base + code_bytes)[1]);
  for (int t = 0; t < group; ++t) {
    const int code = (base[t * bits / 8] >> (t * bits % 8)) & mask;
    keys[(b * group + t) * head_dim + c] = __fadd_rn(__fmul_rn(static_cast<float>(code), scale), zero);
  }
}

void validate_keys(int blocks, int group, int head_dim, int bits, const void* a, const void* b, const char* what) {
  if (!a || !b) throw std::invalid_argument(std::string(what) + ": null pointer");
  if (blocks < 0) throw std::invalid_argument(std::string(what) + ": negative block count");
  if (bits != 2 && bits != 4 && bits != 8) throw std::invalid_argument(std::string(what) + ": bits must be 2, 4 or 8");
  if (group <= 0 || (group * bits) % 16 != 0) {
    throw std::invalid_argument(std::string(what) + ": the group's codes must fill whole 16-bit words (group " +
                                std::to_string(group) + ", " + std::to_string(bits) + " bits)");
  }
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) {
    throw std::invalid_argument(std::string(what) + ": head_dim must be 64, 128 or 256");
  }
}

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + " kernel launch: " + cudaGetErrorString(e));
}

}  // namespace

void quantize_keys_per_channel(const float* keys, int blocks, int group, int head_dim, int bits, std::uint8_t* out) {
  validate_keys(blocks, group, head_dim, bits, keys, out, "quantize_keys_per_channel (CUDA)");
  const long threads = static_cast<long>(blocks) * head_dim;
  if (threads == 0) return;
  quantize_keys_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256>>>(keys, out, blocks, group, head_dim, bits);
  check_launch("quantize_keys_per_channel");
}

void dequantize_keys_per_channel(const std::uint8_t* in, int blocks, int group, int head_dim, int bits, float* keys) {
  validate_keys(blocks, group, head_dim, bits, in, keys, "dequantize_keys_per_channel (CUDA)");
  const long threads = static_cast<long>(blocks) * head_dim;
  if (threads == 0) return;
  dequantize_keys_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256>>>(in, keys, blocks, group, head_dim, bits);
  check_launch("dequantize_keys_per_channel");
}

}  // namespace memtwin::kernels::cuda
