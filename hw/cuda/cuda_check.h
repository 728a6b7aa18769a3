#pragma once
// CUDA and cuBLAS status checks for the CUDA device module's files: a failed call throws
// std::runtime_error naming the call and the error.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace memtwin::hw {

inline void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(call) + " failed: " + cudaGetErrorString(e));
}
inline void check(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(call) + " failed: cuBLAS status " + std::to_string(s));
}

}  // namespace memtwin::hw
