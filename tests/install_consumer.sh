#!/usr/bin/env bash
# `cmake --install` into a scratch prefix, then two programs outside the tree built against it: one
# with CMake's find_package(memtwin), one with pkg-config alone. Each prints a scenario's peak
# memory, which must equal `memtwin run --backend analytic`'s memory.gpu.peak_bytes.
#   tests/install_consumer.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 source=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build" --prefix "$scratch/prefix" > "$scratch/install.log"
scenario="$source/scenarios/quickstart.yaml"
expected=$("$scratch/prefix/bin/memtwin" run "$scenario" --backend analytic --json |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["memory"]["gpu"]["peak_bytes"])')

cmake -S "$source/tests/consumer" -B "$scratch/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/prefix" > /dev/null
cmake --build "$scratch/cmake" > /dev/null
by_cmake=$("$scratch/cmake/peak_memory" "$scenario")

export PKG_CONFIG_PATH="$scratch/prefix/lib/pkgconfig"
# shellcheck disable=SC2046  # pkg-config's flags are separate words
c++ -O1 "$source/tests/consumer/peak_memory.cpp" -o "$scratch/peak_memory_pc" $(pkg-config --cflags --libs memtwin)
by_pkg_config=$("$scratch/peak_memory_pc" "$scenario")

echo "memtwin run: $expected; find_package(memtwin): $by_cmake; pkg-config memtwin: $by_pkg_config"
[ "$by_cmake" = "$expected" ] && [ "$by_pkg_config" = "$expected" ]
