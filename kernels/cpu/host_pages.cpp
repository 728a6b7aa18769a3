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
}

void* allocate_host_pages(std::size_t bytes) {
  const std::size_t size = (bytes + kPage - 1) / kPage * kPage;
  const std::size_t alignment = size >= kHugePage ? kHugePage : kPage;
  // aligned_alloc takes a size that is a multiple of the alignment (C11 7.22.3.1): the size is
  // rounded to whole huge pages for the allocator only; the tail past `size` is never touched,
  // so it takes no memory.
  void* p = std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  if (!p) return nullptr;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (alignment == kHugePage) madvise(p, size / kHugePage * kHugePage, MADV_HUGEPAGE);  // advice: failure changes nothing
#endif
  std::memset(p, 0, size);
  return p;
}

void release_host_pages(void* p) { std::free(p); }

HostBuffer::HostBuffer(std::size_t bytes) : data_(static_cast<std::uint8_t*>(allocate_host_pages(bytes))), size_(bytes) {
  if (!data_ && bytes > 0) throw std::bad_alloc();
}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(size_, other.size_);
  return *this;
}

}  // namespace memtwin::kernels
