#!/usr/bin/env bash
# Fuzzes the scenario loader with libFuzzer (clang) for SECONDS (default 120), seeded with every
# example and bad scenario; an input slower than 10 s counts as a failure (a hang). A
# benchmark-style check, not part of CI. Crashes land in fuzz-out/.
#   scripts/fuzz-loader.sh [SECONDS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-120}"
build="$root/build-fuzz"
command -v clang++ >/dev/null || { echo "needs clang (apt-get install clang)" >&2; exit 2; }
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMEMTWIN_FUZZ=ON -DBUILD_TESTING=OFF -DCMAKE_CUDA_COMPILER=NOTFOUND >/dev/null
cmake --build "$build" --target fuzz_scenario_loader
corpus="$root/fuzz-out/corpus"
mkdir -p "$corpus" "$root/fuzz-out/crashes"
find "$root/scenarios" "$root/tests/bad_scenarios" -name '*.yaml' -exec cp {} "$corpus/" \;
"$build/fuzz_scenario_loader" "$corpus" -max_total_time="$seconds" -max_len=4096 \
  -timeout=10 -artifact_prefix="$root/fuzz-out/crashes/" -print_final_stats=1
