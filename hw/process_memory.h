#pragma once
// What the operating system says about this process's memory (Linux /proc): the host device's
// equivalent of what the driver reports, measured apart from the allocator's books so that the
// runtime overhead the memory model assumes is checked too.
#include <cstdint>

namespace memtwin::hw {

/// Resident set size now (VmRSS), bytes.
std::int64_t resident_bytes();
/// The peak resident set size since the process started or since the last reset (VmHWM), bytes.
std::int64_t peak_resident_bytes();
/// Restarts the peak from the current resident size (writes 5 to /proc/self/clear_refs); false
/// when the kernel does not allow it (the peak then counts from the process's start).
bool reset_peak_resident();

}  // namespace memtwin::hw
