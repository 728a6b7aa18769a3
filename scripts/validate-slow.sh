#!/usr/bin/env bash
# Runs the slow validation cases alone (tag [slow]; CI runs them among the others): large simulated
# clusters held to published step times. Prints each case's error. A few minutes on one core.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MEMTWIN_BUILD_DIR:-$root/build}"
"$root/scripts/dev.sh" build >/dev/null
cd "$root"
"$build/tests/memtwin_tests" "[slow]" --success --reporter compact 2>&1 | grep -E "warning|passed|failed" 
