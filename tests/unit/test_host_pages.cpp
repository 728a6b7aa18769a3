// Host memory for the CPU kernels' large buffers (kernels/host_pages.h): zeroed, page-aligned,
// 2 MiB-aligned from 2 MiB up, and advised into transparent huge pages where Linux has them.
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "kernels/host_pages.h"

using namespace memtwin::kernels;

namespace {

bool all_zero(const std::uint8_t* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

// Kilobytes of anonymous huge pages in the mapping that holds `p` (/proc/self/smaps), or -1.
long huge_kb_at(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t from = 0, to = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> from >> dash >> to && dash == '-') {
      inside = from <= address && address < to;
    } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      return std::stol(line.substr(14));
    }
  }
  return -1;
}

// The bracketed choice of a /sys/kernel/mm/transparent_hugepage setting ("" where unreadable).
std::string huge_page_setting(const std::string& name) {
  std::ifstream file("/sys/kernel/mm/transparent_hugepage/" + name);
  std::string text;
  std::getline(file, text);
  const auto open = text.find('['), close = text.find(']');
  return open == std::string::npos || close == std::string::npos ? "" : text.substr(open + 1, close - open - 1);
}

}  // namespace

TEST_CASE("Host pages are zeroed and aligned to 4 KiB below 2 MiB and to 2 MiB from there", "[unit]") {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{5000}, (std::size_t{2} << 20) - 1, std::size_t{2} << 20,
                            (std::size_t{6} << 20) + 12345}) {
    CAPTURE(bytes);
    const HostBuffer b(bytes);
    REQUIRE(b.data() != nullptr);
    REQUIRE(b.size() == bytes);
    const auto address = reinterpret_cast<std::uintptr_t>(b.data());
    CHECK(address % (bytes >= (std::size_t{2} << 20) ? std::size_t{2} << 20 : 4096) == 0);
    CHECK(all_zero(b.data(), bytes));
    b.data()[bytes - 1] = 7;  // the whole size is writable
  }
}

TEST_CASE("A host buffer moves its pages and releases them once", "[unit]") {
  HostBuffer a(std::size_t{3} << 20);
  std::uint8_t* pages = a.data();
  HostBuffer b(std::move(a));
  CHECK(b.data() == pages);
  CHECK(a.data() == nullptr);  // NOLINT(bugprone-use-after-move): the moved-from buffer owns nothing
  HostBuffer c(4096);
  c = std::move(b);
  CHECK(c.data() == pages);
  release_host_pages(nullptr);  // as free(): nothing to release
}

TEST_CASE("Large host buffers are advised into transparent huge pages", "[unit]") {
  const HostBuffer b(std::size_t{8} << 20);
  const long huge_kb = huge_kb_at(b.data());
  const std::string enabled = huge_page_setting("enabled"), defrag = huge_page_setting("defrag");
  CAPTURE(enabled, defrag, huge_kb);
  // Where advised memory gets huge pages at its first touch, compacting memory for them if need
  // be, the buffer holds some; elsewhere (THP off, or only deferred compaction) it may not.
  const bool at_fault = (enabled == "always" || enabled == "madvise") &&
                        (defrag == "always" || defrag == "madvise" || defrag == "defer+madvise");
  if (!at_fault || huge_kb < 0) {
    WARN("transparent huge pages not given to advised memory at first touch here (or smaps unreadable): not checked");
    return;
  }
  CHECK(huge_kb >= 2048);
}
