#pragma once
// Which vectorised CPU kernels a call may use: the decode attention kernels (paged and KIVI) exist
// in portable C++ and for two x86-64 instruction sets, chosen at run time (decode_attention.cpp
// asks the CPU once).

namespace memtwin::kernels {

/// The CPU decode kernels' instruction sets, each level including the ones before it: portable
/// C++, AVX2 (with FMA and F16C), AVX-512 (F, BW, VL, DQ, with FMA and F16C).
enum class SimdLevel { portable, avx2, avx512 };
/// The highest level both this CPU and this build have.
SimdLevel cpu_simd_level();
/// "portable", "avx2", "avx512".
const char* simd_level_name(SimdLevel level);

}  // namespace memtwin::kernels
