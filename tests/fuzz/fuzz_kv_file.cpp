// libFuzzer harness: KV tensors as `memtwin kernels --keys FILE` reads them, a .npy array or a
// .safetensors file (MEMTWIN_FUZZ_KV_SUFFIX picks which at build time). Bad input raises
// std::runtime_error naming the file.
#include <stdexcept>

#include "apps/memtwin/kv_files.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = memtwin::fuzz::write_input(data, size, std::string("kv") + MEMTWIN_FUZZ_KV_SUFFIX);
  try {
    (void)memtwin::cli::read_kv_file(path);
  } catch (const std::runtime_error&) {
  }
  return 0;
}
