#pragma once
// The host device's NVMe tier: a scratch file on a local disk, read and written with O_DIRECT so
// that the bytes cross the device and not the page cache (a buffered file with fdatasync where
// the file system refuses O_DIRECT). ZeRO-Infinity's offload copies and the calibration's file
// I/O go through it. The file lives in MEMTWIN_NVME_DIR, or the system's temporary directory, one
// per process, and is removed when the object goes.
//
// Contract: `write(bytes)` appends `bytes` (rounded up to the 4 KiB block) and `read(bytes)` reads
// that many back from what was written (wrapping around), each blocking until done; one thread at a
// time. I/O failures throw std::runtime_error naming the file and the call.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "models/plan/plan.h"

namespace memtwin::hw {

class NvmeFile {
 public:
  NvmeFile();
  ~NvmeFile();
  NvmeFile(const NvmeFile&) = delete;
  NvmeFile& operator=(const NvmeFile&) = delete;

  void write(std::int64_t bytes);
  void read(std::int64_t bytes);
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] bool direct() const { return direct_; }  ///< O_DIRECT (else buffered with fdatasync)

 private:
  static constexpr std::int64_t kBlock = 4096;
  static constexpr std::int64_t kChunk = std::int64_t{8} << 20;  // per system call
  std::string path_;
  int fd_ = -1;
  bool direct_ = true;
  void* buffer_ = nullptr;     // kChunk bytes, 4 KiB aligned
  std::int64_t written_ = 0;   // file size
  std::int64_t read_at_ = 0;   // next read offset
};

/// The NVMe tier as a device's plan copies use it (it sits below host memory, so the host device
/// and the CUDA device move its bytes the same way): the scratch file opened on the first copy,
/// one transfer at a time, since every stream of the plan may call it.
class NvmeTier {
 public:
  /// Whether `direction` is one of the tier's (nvme_to_host, host_to_nvme).
  static bool serves(CopyDirection direction) {
    return direction == CopyDirection::nvme_to_host || direction == CopyDirection::host_to_nvme;
  }
  /// Writes (host_to_nvme) or reads back (nvme_to_host) `bytes`; blocks until done.
  void copy(CopyDirection direction, double bytes);

 private:
  std::mutex mutex_;
  std::unique_ptr<NvmeFile> file_;
};

}  // namespace memtwin::hw
