#!/usr/bin/env bash
# Runs the benchmarks and prints their figures (record them in the README with the machine).
#   scripts/bench.sh            all CPU benchmarks
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MEMTWIN_BUILD_DIR:-$root/build}"
"$root/scripts/dev.sh" build >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
"$build/tools/bench_memory" "$root" 10000
"$build/tools/bench_memory" "$root" 100000
