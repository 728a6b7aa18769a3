#!/usr/bin/env bash
# memtwin's one entry point for people and CI:
#   scripts/dev.sh run  [memtwin run args...]  install what is missing, build, run the quick-start scenario
#   scripts/dev.sh test [ctest args...]        install what is missing, build, run every test through ctest
#   scripts/dev.sh build                        install what is missing and build
# Runs on a fresh Debian 12 machine as root (or with sudo). Set MEMTWIN_BUILD_DIR to build elsewhere.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MEMTWIN_BUILD_DIR:-$root/build}"

# Debian 12 packages the build and the tests need. Nothing is downloaded at run time.
packages=(
  build-essential cmake ninja-build pkg-config git
  libsimgrid-dev libyaml-cpp-dev libboost-dev libboost-program-options-dev
  nlohmann-json3-dev catch2
  python3 python3-matplotlib python3-numpy
  libopenmpi-dev openmpi-bin libopenblas-dev
)

install_missing() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "memtwin: installing ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

build_all() {
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j "$(nproc)"
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
    cd "$build"
    exec ctest --output-on-failure -j "$(nproc)" "$@"
    ;;
  build)
    install_missing
    build_all
    ;;
  *)
    sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
