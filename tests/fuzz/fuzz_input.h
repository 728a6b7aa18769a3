#pragma once
// What every libFuzzer harness here shares. The readers under test take paths (they check the file
// before reading it), so an input is written to a file of this process's own and read back from
// there; a tmpfs keeps that cheap. Contract under test, for every reader: an input is accepted, or
// refused with the reader's documented error type; any other exception, a crash or a sanitizer
// report is a bug, and so is an input slower than the run's -timeout or one allocating past its
// -malloc_limit_mb.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

namespace memtwin::fuzz {

/// A directory for the inputs: $MEMTWIN_FUZZ_TMP, else /dev/shm, else /tmp.
inline std::string scratch_dir() {
  if (const char* dir = std::getenv("MEMTWIN_FUZZ_TMP")) return dir;
  return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

/// Writes `data` to this process's file named `name` (its suffix picks the reader) and returns the path.
inline std::string write_input(const std::uint8_t* data, std::size_t size, const std::string& name) {
  static const std::string prefix = scratch_dir() + "/memtwin-fuzz-" + std::to_string(getpid()) + "-";
  const std::string path = prefix + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                static_cast<std::streamsize>(size));
  return path;
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace memtwin::fuzz
