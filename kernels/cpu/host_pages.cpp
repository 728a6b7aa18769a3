#include "kernels/host_pages.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace memtwin::kernels {

namespace {

constexpr std::size_t kPage = 4096, kHugePage = std::size_t{2} << 20;

// What release_host_pages needs, in the page before the buffer (the buffer's alignment kept).
struct Header {
  void* base;          // what was allocated or mapped
  std::size_t length;  // bytes mapped; 0: from the heap
};

Header* header_of(void* p) { return static_cast<Header*>(p) - 1; }

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

}  // namespace

void* allocate_host_pages(std::size_t bytes) {
  const std::size_t size = round_up(bytes, kPage);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (size >= kHugePage) {
    // Mapped afresh, not taken from the heap: huge pages are given at a page's first touch, and
    // memory the heap hands back may have been touched as small pages already.
    const std::size_t length = size + kHugePage + kPage;
    void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return nullptr;
    auto* data = reinterpret_cast<std::uint8_t*>(round_up(reinterpret_cast<std::uintptr_t>(base) + kPage, kHugePage));
    madvise(data, size, MADV_HUGEPAGE);  // advice: where refused, the pages stay small
    *header_of(data) = {base, length};
    std::memset(data, 0, size);
    return data;
  }
#endif
  // aligned_alloc takes a size that is a multiple of the alignment (C11 7.22.3.1).
  auto* base = static_cast<std::uint8_t*>(std::aligned_alloc(kPage, size + kPage));
  if (!base) return nullptr;
  std::uint8_t* data = base + kPage;
  *header_of(data) = {base, 0};
  std::memset(data, 0, size);
  return data;
}

void release_host_pages(void* p) {
  if (!p) return;
  const Header h = *header_of(p);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (h.length > 0) {
    munmap(h.base, h.length);
    return;
  }
#endif
  std::free(h.base);
}

HostBuffer::HostBuffer(std::size_t bytes) : data_(static_cast<std::uint8_t*>(allocate_host_pages(bytes))), size_(bytes) {
  if (!data_) throw std::bad_alloc();
}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(size_, other.size_);
  return *this;
}

}  // namespace memtwin::kernels
