#!/usr/bin/env bash
# Packs memtwin-device for a machine that has a GPU but not memtwin's dependencies (a lent device
# machine cannot install packages): the binary, the --device cuda module, the shared libraries
# they need that are not glibc's or the CUDA toolkit's, and Open MPI's plugins. SimGrid stays
# behind (memtwin-device has no simulator); compressed, the bundle is well under the 64 MiB a
# device call carries. On the device machine (after tar xzf device-bundle.tgz):
#   export LD_LIBRARY_PATH=$PWD/device-bundle/lib:$LD_LIBRARY_PATH
#   export OMPI_MCA_mca_base_component_path=$PWD/device-bundle/lib/openmpi3
#   device-bundle/memtwin-device run SCENARIO --device cuda --out DIR     # one GPU: no mpirun
# then, here: memtwin run SCENARIO --out SIM && memtwin compare SIM/result.json DIR/result.json
#   scripts/gpu/device-bundle.sh [OUT_DIR]   (default build/device-bundle)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${MEMTWIN_BUILD_DIR:-$root/build}"
out="${1:-$build/device-bundle}"
"$root/scripts/dev.sh" build >/dev/null
rm -rf "$out"
mkdir -p "$out/lib"
cp "$build/memtwin-device" "$out/"
[ -f "$build/libmemtwin_cuda.so" ] && cp "$build/libmemtwin_cuda.so" "$out/"
# Every library the binary loads, except glibc's own and the CUDA toolkit's (the device has those).
ldd "$build/memtwin-device" | awk '/=>/ {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libcuda*|libcublas*|libnccl*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
plugins=$(dirname "$(readlink -f "$(ldd "$build/memtwin-device" | awk '/libmpi.so/ {print $3}')")")/openmpi/lib/openmpi3
[ -d "$plugins" ] || plugins=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
[ -d "$plugins" ] && cp -rL "$plugins" "$out/lib/openmpi3"
du -sh "$out" | awk '{print "device bundle: " $1 " in " $2}'
# The compressed copy is what a device call carries (carry: ["build/device-bundle.tgz"]; the
# directory itself is over the 64 MiB limit since OpenBLAS alone is 35 MB); measure.sh unpacks it.
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
du -sh "$out.tgz" | awk '{print "compressed: " $1 " in " $2}'
