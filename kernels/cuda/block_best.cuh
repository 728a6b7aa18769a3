#pragma once
// A block-wide arg-max or arg-min for CUDA kernels (the serving engine's greedy sampling, H2O's
// lowest-scored heavy hitter): each thread offers a value and its index (-1: none), and every
// thread gets the winner's index, the first of equal values. Blocks of up to 256 threads.
#include <cuda_runtime.h>

namespace memtwin::kernels::cuda {

template <bool Largest>
__device__ int block_best(float value, int index, float* shared_value /*[blockDim]*/, int* shared_index /*[blockDim]*/) {
  shared_value[threadIdx.x] = value;
  shared_index[threadIdx.x] = index;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const float o = shared_value[threadIdx.x + stride], mine = shared_value[threadIdx.x];
      const int oi = shared_index[threadIdx.x + stride], mi = shared_index[threadIdx.x];
      const bool better = Largest ? o > mine : o < mine;
      if (oi >= 0 && (mi < 0 || better || (o == mine && oi < mi))) {
        shared_value[threadIdx.x] = o;
        shared_index[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  const int winner = shared_index[0];
  __syncthreads();
  return winner;
}

}  // namespace memtwin::kernels::cuda
