#pragma once
// What the [gpu] test files share: a failure count that main() reports, and device copies.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace memtwin::gpu_test {

inline int failures = 0, checks = 0;

inline void expect(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::printf("FAILED: %s\n", what.c_str());
  }
}

/// n normal floats of standard deviation sd, seeded.
inline std::vector<float> random_floats(std::size_t n, unsigned seed, float sd = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

template <class T>
T* to_device(const std::vector<T>& host) {
  T* d = nullptr;
  if (cudaMalloc(&d, std::max<std::size_t>(1, host.size()) * sizeof(T)) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
  cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

template <class T>
std::vector<T> to_host(const T* device, std::size_t count) {
  std::vector<T> host(count);
  cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost);
  return host;
}

/// The compression kernels (KIVI keys, eviction support) against the CPU ones.
void compression_kernels_match_cpu();
/// The serving engine's score-based eviction kernels against the CPU ones.
void score_kernels_match_cpu();
/// KIVI's paged append, staging and decode attention against the CPU ones.
void kivi_kernels_match_cpu();

}  // namespace memtwin::gpu_test
