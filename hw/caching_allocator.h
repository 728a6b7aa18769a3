#pragma once
// A caching allocator for device memory, keeping the books the simulator keeps: bytes allocated
// (the plan's tensors) and bytes reserved from the device (allocated plus cached free blocks), with
// their peaks. Like PyTorch's CUDA caching allocator it rounds requests up (512 B; 2 MiB for large
// blocks), keeps freed blocks for reuse instead of returning them, and when the device is full
// empties its cache and retries before declaring out-of-memory. The difference between reserved
// and allocated is the fragmentation the memory model's `allocator_waste` predicts.
//
// Contract: thread-safe; `allocate` throws DeviceOutOfMemory (never returns null); every pointer
// goes back through `release`. Raw device memory comes from the functions given at construction
// (host: page-touched malloc; CUDA: cudaMalloc).
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

namespace memtwin::hw {

struct DeviceOutOfMemory : std::runtime_error {
  DeviceOutOfMemory(std::string what_tensor, std::int64_t requested_bytes, std::int64_t reserved_bytes,
                    std::int64_t capacity_bytes);
  std::string tensor;
  std::int64_t requested = 0, reserved = 0, capacity = 0;
};

struct RawMemory {
  std::function<void*(std::int64_t)> allocate;  ///< null when the device has no memory left
  std::function<void(void*)> release;
};

/// A device's memory: what the caching allocator takes from, and what the operating system or the
/// driver says is in use (apart from the allocator's books).
struct DeviceMemory {
  RawMemory raw;
  std::function<std::int64_t()> in_use, peak;
  std::function<void()> reset_peak;
  std::string measured_by;  ///< how in_use and peak are measured, for the result
};

class CachingAllocator {
 public:
  struct Stats {
    std::int64_t allocated = 0, reserved = 0;
    std::int64_t peak_allocated = 0, peak_reserved = 0;
    std::int64_t requests = 0, cache_hits = 0, device_allocations = 0;
  };

  CachingAllocator(std::int64_t capacity_bytes, RawMemory raw);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(std::int64_t bytes, const std::string& tensor);
  void release(void* block);
  /// Returns every cached free block to the device.
  void empty_cache();
  [[nodiscard]] Stats stats() const;
  /// Peaks restart from the current allocated and reserved bytes.
  void reset_peaks();

  /// The size a request is rounded up to.
  [[nodiscard]] static std::int64_t rounded(std::int64_t bytes);

 private:
  void empty_cache_locked();
  mutable std::mutex mutex_;
  std::int64_t capacity_;
  RawMemory raw_;
  std::multimap<std::int64_t, void*> cached_;      ///< free blocks by size
  std::map<void*, std::int64_t> in_use_, all_;      ///< block -> size (handed out; every block held)
  Stats stats_;
};

}  // namespace memtwin::hw
