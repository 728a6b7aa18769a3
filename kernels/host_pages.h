#pragma once
// Host memory for the large buffers the CPU kernels stream through (paged KV caches): zeroed,
// and from 2 MiB up aligned to 2 MiB and advised into transparent huge pages (Linux; advice
// only, which a kernel with THP off ignores). With 4 KiB pages a pass over a 16 MiB cache crosses
// 4,096 pages, more than a core's L1 TLB maps, and the hardware prefetchers stop at each page's
// end. On a Zen 4 VM, paired runs of one-thread decode attention over huge pages were 2-4% faster
// at 8K context and 5-8% at 32K (fp16, int8; docs/benchmarks.md); a GB-sized pool crosses far
// more pages. The host device's memory (hw::host_device_memory) and the kernel benchmark take
// their buffers from here, so that both see the pages the engine reads.
#include <cstddef>
#include <cstdint>

namespace memtwin::kernels {

/// `bytes` zeroed bytes (rounded up to a whole 4 KiB page), page-aligned; from 2 MiB up, freshly
/// mapped, 2 MiB-aligned and advised into huge pages. Null when the system has no memory for them.
/// Release with release_host_pages (null: nothing to release).
void* allocate_host_pages(std::size_t bytes);
void release_host_pages(void* p);

/// A buffer from allocate_host_pages, released when it goes (std::bad_alloc when refused; a
/// buffer of 0 bytes still holds a page).
class HostBuffer {
 public:
  explicit HostBuffer(std::size_t bytes);
  ~HostBuffer() { release_host_pages(data_); }
  HostBuffer(HostBuffer&& other) noexcept : data_(other.data_), size_(other.size_) { other.data_ = nullptr; }
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  [[nodiscard]] std::uint8_t* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }

 private:
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace memtwin::kernels
