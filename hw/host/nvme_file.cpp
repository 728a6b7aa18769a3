#include "hw/host/nvme_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace memtwin::hw {
namespace {

std::string scratch_path() {
  const char* dir = std::getenv("MEMTWIN_NVME_DIR");
  const std::filesystem::path base = dir && *dir ? std::filesystem::path(dir) : std::filesystem::temp_directory_path();
  return (base / ("memtwin-nvme-" + std::to_string(::getpid()) + ".bin")).string();
}

}  // namespace

NvmeFile::NvmeFile() : path_(scratch_path()) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  if (fd_ < 0 && errno == EINVAL) {  // tmpfs and some others: no O_DIRECT
    direct_ = false;
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  }
  if (fd_ < 0) throw std::runtime_error("NVMe tier: cannot open " + path_ + ": " + std::strerror(errno));
  buffer_ = std::aligned_alloc(kBlock, kChunk);
  if (!buffer_) throw std::runtime_error("NVMe tier: cannot allocate the I/O buffer");
  std::memset(buffer_, 0x5a, kChunk);
}

NvmeFile::~NvmeFile() {
  if (fd_ >= 0) ::close(fd_);
  ::unlink(path_.c_str());
  std::free(buffer_);
}

void NvmeFile::write(std::int64_t bytes) {
  for (std::int64_t left = (bytes + kBlock - 1) / kBlock * kBlock; left > 0;) {
    const std::int64_t n = std::min(left, kChunk);
    const ssize_t done = ::pwrite(fd_, buffer_, static_cast<std::size_t>(n), written_);
    if (done != n) throw std::runtime_error("NVMe tier: pwrite to " + path_ + " failed: " + std::strerror(errno));
    written_ += n;
    left -= n;
  }
  if (!direct_ && ::fdatasync(fd_) != 0) throw std::runtime_error("NVMe tier: fdatasync of " + path_ + " failed");
}

void NvmeFile::read(std::int64_t bytes) {
  if (written_ == 0) write(std::min(bytes, kChunk));  // something to read back
  for (std::int64_t left = (bytes + kBlock - 1) / kBlock * kBlock; left > 0;) {
    if (read_at_ >= written_) read_at_ = 0;
    const std::int64_t n = std::min({left, kChunk, written_ - read_at_});
    const ssize_t done = ::pread(fd_, buffer_, static_cast<std::size_t>(n), read_at_);
    if (done != n) throw std::runtime_error("NVMe tier: pread from " + path_ + " failed: " + std::strerror(errno));
    read_at_ += n;
    left -= n;
  }
}

void NvmeTier::copy(CopyDirection direction, double bytes) {
  std::lock_guard lock(mutex_);
  if (!file_) file_ = std::make_unique<NvmeFile>();
  if (direction == CopyDirection::host_to_nvme) file_->write(static_cast<std::int64_t>(bytes));
  else file_->read(static_cast<std::int64_t>(bytes));
}

}  // namespace memtwin::hw
