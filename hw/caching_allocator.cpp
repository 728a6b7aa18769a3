#include "hw/caching_allocator.h"

#include <algorithm>

namespace memtwin::hw {
namespace {
constexpr std::int64_t kMiB = 1 << 20;
constexpr std::int64_t kSmallRound = 512;         // PyTorch's kMinBlockSize
constexpr std::int64_t kLargeRound = 2 * kMiB;    // PyTorch's kRoundLarge
constexpr std::int64_t kLargeBlock = 1 * kMiB;    // requests above this are "large"
}  // namespace

DeviceOutOfMemory::DeviceOutOfMemory(std::string what_tensor, std::int64_t requested_bytes, std::int64_t reserved_bytes,
                                     std::int64_t capacity_bytes)
    : std::runtime_error("out of device memory allocating " + what_tensor + " (" + std::to_string(requested_bytes) +
                         " bytes; " + std::to_string(capacity_bytes - reserved_bytes) + " of " +
                         std::to_string(capacity_bytes) + " bytes free)"),
      tensor(std::move(what_tensor)),
      requested(requested_bytes),
      reserved(reserved_bytes),
      capacity(capacity_bytes) {}

CachingAllocator::CachingAllocator(std::int64_t capacity_bytes, RawMemory raw) : capacity_(capacity_bytes), raw_(std::move(raw)) {}

CachingAllocator::~CachingAllocator() {
  for (auto& [block, size] : all_) raw_.release(block);
}

std::int64_t CachingAllocator::rounded(std::int64_t bytes) {
  const std::int64_t unit = bytes > kLargeBlock ? kLargeRound : kSmallRound;
  return std::max<std::int64_t>(unit, (bytes + unit - 1) / unit * unit);
}

void* CachingAllocator::allocate(std::int64_t bytes, const std::string& tensor) {
  const std::int64_t size = rounded(bytes);
  std::lock_guard lock(mutex_);
  ++stats_.requests;
  // Best fit among cached blocks, but never a block more than a quarter larger than asked: the
  // slack of a reused block is the fragmentation this allocator admits.
  auto fit = cached_.lower_bound(size);
  void* block = nullptr;
  if (fit != cached_.end() && fit->first <= size + size / 4) {
    block = fit->second;
    cached_.erase(fit);
    ++stats_.cache_hits;
  } else {
    if (stats_.reserved + size > capacity_) empty_cache_locked();
    if (stats_.reserved + size > capacity_) throw DeviceOutOfMemory(tensor, bytes, stats_.reserved, capacity_);
    block = raw_.allocate(size);
    if (!block) {
      empty_cache_locked();
      block = raw_.allocate(size);
      if (!block) throw DeviceOutOfMemory(tensor, bytes, stats_.reserved, capacity_);
    }
    all_[block] = size;
    stats_.reserved += size;
    ++stats_.device_allocations;
  }
  const std::int64_t held = all_.at(block);
  in_use_[block] = held;
  stats_.allocated += held;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  return block;
}

void CachingAllocator::release(void* block) {
  std::lock_guard lock(mutex_);
  auto it = in_use_.find(block);
  if (it == in_use_.end()) throw std::logic_error("CachingAllocator::release: a block it did not hand out");
  stats_.allocated -= it->second;
  cached_.emplace(it->second, block);
  in_use_.erase(it);
}

void CachingAllocator::empty_cache_locked() {
  for (auto& [size, block] : cached_) {
    raw_.release(block);
    all_.erase(block);
    stats_.reserved -= size;
  }
  cached_.clear();
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  empty_cache_locked();
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peaks() {
  std::lock_guard lock(mutex_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

}  // namespace memtwin::hw
