// KV tensor files given to `memtwin kernels` (.npy, .safetensors): sizes are checked against the
// file before anything is allocated, and every malformed file is refused with exit 2 naming it.
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <string>

#include "tests/test_support.h"

using memtwin::test::run_memtwin;

namespace {

std::string write_bytes(const std::string& name, const std::string& bytes) {
  const std::string path = "/tmp/memtwin-test-kv-" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// A version-1 .npy whose header declares `shape`, followed by `data_bytes` zero bytes.
std::string npy(const std::string& name, const std::string& shape, std::size_t data_bytes) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes = "\x93NUMPY";
  bytes += '\x01';
  bytes += '\x00';
  const auto len = static_cast<std::uint16_t>(header.size());
  bytes += static_cast<char>(len & 0xff);
  bytes += static_cast<char>(len >> 8);
  return write_bytes(name, bytes + header + std::string(data_bytes, '\0'));
}

std::string safetensors(const std::string& name, const std::string& json, std::size_t data_bytes) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  return write_bytes(name, bytes + json + std::string(data_bytes, '\0'));
}

void refused(const std::string& file, const std::string& fragment) {
  INFO(file);
  const auto r = run_memtwin({"kernels", "--keys", file, "--values", file});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains(fragment));
}

}  // namespace

TEST_CASE("KV files whose headers ask for more than they hold are refused before allocating", "[unit]") {
  // 128 bytes of file, a header asking for 32 GB.
  refused(npy("huge.npy", "(4194304, 32, 64)", 64), "shorter than its shape says");
  refused(npy("not-a-number.npy", "(16, x, 64)", 0), "is not a number");
  refused(npy("negative.npy", "(16, -8, 64)", 0), "out of range");
  refused(safetensors("wrap.safetensors",
                      R"({"k": {"dtype": "F32", "shape": [4294967296, 4294967296, 1], "data_offsets": [0, 0]}})", 16),
          "out of range");
  refused(safetensors("offsets.safetensors",
                      R"({"k": {"dtype": "F32", "shape": [2, 2, 2], "data_offsets": [0, 4096]}})", 32),
          "data offsets");
  refused(safetensors("types.safetensors", R"({"k": {"dtype": 7, "shape": "big", "data_offsets": [0, 1]}})", 8),
          "wrong type");
}

TEST_CASE("a .safetensors path followed by anything but :TENSOR is refused, not read as the file", "[unit]") {
  const std::string good = safetensors("good.safetensors",
                                       R"({"k": {"dtype": "F32", "shape": [2, 2, 64], "data_offsets": [0, 1024]}})", 1024);
  refused(good + "GARBAGE", "give FILE.safetensors or FILE.safetensors:TENSOR");
  const auto ok = run_memtwin({"kernels", "--keys", good + ":k", "--values", good, "--head-dim", "64", "--kv-heads", "2"});
  INFO(ok.err);
  CHECK(ok.exit_code == 0);
}
