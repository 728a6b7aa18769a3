// Loads the CUDA device module (libmemtwin_cuda.so) the first time a run asks for --device cuda.
#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <string>

#include "hw/cuda/cuda_device.h"
#include "models/backend.h"

namespace memtwin::hw {

const CudaDeviceApi& cuda_device() {
  static std::once_flag once;
  static const CudaDeviceApi* api = nullptr;
  static std::string why;
  std::call_once(once, [] {
    namespace fs = std::filesystem;
    const fs::path module = fs::canonical("/proc/self/exe").parent_path() / "libmemtwin_cuda.so";
    if (!fs::exists(module)) {
      why = "this memtwin was built without CUDA (nvcc was not found), so --device cuda cannot run";
      return;
    }
    void* handle = dlopen(module.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      why = std::string("--device cuda: cannot load ") + module.string() + ": " + dlerror();
      return;
    }
    auto entry = reinterpret_cast<const CudaDeviceApi* (*)()>(dlsym(handle, "memtwin_cuda_device_api"));
    if (!entry) {
      why = "--device cuda: " + module.string() + " has no memtwin_cuda_device_api";
      return;
    }
    api = entry();
  });
  if (!api) throw Unsupported(why);
  return *api;
}

}  // namespace memtwin::hw
