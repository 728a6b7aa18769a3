#pragma once
// Which vectorised CPU kernels a call may use: the decode attention kernels (paged and KIVI) exist
// in portable C++ and for x86-64's AVX2 and AVX-512, chosen at run time (decode_attention.cpp asks
// the CPU once).

namespace memtwin::kernels {

/// The CPU decode kernels' instruction sets, each level including the ones before it: portable
/// C++, AVX2 (with FMA and F16C), AVX-512 (F, BW, VL, DQ, with FMA and F16C), and AVX-512 with
/// VNNI, where the paged decode attention scores 8- and 4-bit keys by integer dot products against
/// the query rounded to 16-bit fixed point (kv_kernels.h, round_query_to_bytes).
enum class SimdLevel { portable, avx2, avx512, avx512_vnni };
/// Every level, lowest first (tests and benchmarks go through them).
inline constexpr SimdLevel kSimdLevels[] = {SimdLevel::portable, SimdLevel::avx2, SimdLevel::avx512, SimdLevel::avx512_vnni};
/// The highest level both this CPU and this build have.
SimdLevel cpu_simd_level();
/// "portable", "avx2", "avx512", "avx512_vnni".
const char* simd_level_name(SimdLevel level);

}  // namespace memtwin::kernels
