#!/usr/bin/env bash
# Fuzzes every reader memtwin has with libFuzzer, under AddressSanitizer + UndefinedBehaviorSanitizer:
# the scenario loader, calibration files, HuggingFace config.json, request traces (and length files),
# .npy and .safetensors KV tensors, KV-quality documents, the real model's model.json and tokenizer.json. Each starts from its seeds (the examples and the bad-input
# corpus under tests/); an input that crashes, trips a sanitizer, takes over 10 s or allocates over
# 1 GB is a failure, saved under build-sanitize/fuzz-crashes/READER/. Readers run side by side,
# one per core.
#   scripts/fuzz.sh SECONDS [READER...]    each reader (or those named) for SECONDS (a long run;
#                                          its figures go to docs/reliability.md)
#   scripts/fuzz.sh --runs N [READER...]   each for N inputs from a fixed seed: the same inputs every time (CI)
# Readers: scenario calibration hf_config trace npy safetensors quality model_json tokenizer.
# Run through `scripts/dev.sh fuzz ...`, which builds the harnesses first. Exit 1 when any reader failed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-sanitize"
usage="usage: scripts/fuzz.sh SECONDS|--runs N [READER...]"
case "${1:-}" in
  --runs) [ -n "${2:-}" ] || { echo "$usage" >&2; exit 2; }
          budget=(-runs="$2" -seed=1); shift 2 ;;
  ''|-*) echo "$usage" >&2; exit 2 ;;
  *) budget=(-max_total_time="$1"); shift ;;
esac
# The slowest readers first, so that running side by side they end together.
all_readers=(quality calibration scenario hf_config trace npy safetensors model_json tokenizer)
readers=("$@")
[ ${#readers[@]} -gt 0 ] || readers=("${all_readers[@]}")
for r in "${readers[@]}"; do
  [[ " ${all_readers[*]} " == *" $r "* ]] || { echo "unknown reader '$r' (${all_readers[*]})" >&2; exit 2; }
done

# reader  max_len  seed files
seeds() {
  case "$1" in
    scenario) find "$root/scenarios" "$root/tests/bad_scenarios" "$root/tests/bad_inputs/scenario" -name '*.yaml' -not -path '*/presets/*' ;;
    calibration) find "$root/tests/bad_inputs/calibration" "$root/tests/fuzz/seeds/calibration" -name '*.yaml' ;;
    hf_config) find "$root/tests/bad_inputs/hf_config" -name '*.json' ;;
    trace) find "$root/tests/bad_inputs/trace" "$root/tests/bad_inputs/lengths" -type f ;;
    npy) find "$root/tests/bad_inputs/kv" -name '*.npy' ;;
    safetensors) find "$root/tests/bad_inputs/kv" -name '*.safetensors' ;;
    quality) find "$root/data/quality" "$root/tests/fuzz/seeds/quality" -name '*.json' ;;
    model_json) find "$root/tests/fuzz/seeds/model_json" -name '*.json' ;;
    tokenizer) find "$root/tests/fuzz/seeds/tokenizer" -name '*.json' ;;
  esac
}

export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=0" UBSAN_OPTIONS="print_stacktrace=1"
scratch=/tmp
[ -w /dev/shm ] && scratch=/dev/shm
export MEMTWIN_FUZZ_TMP="${MEMTWIN_FUZZ_TMP:-$(mktemp -d -p "$scratch")}"
# One reader: its libFuzzer run, then its table row and exit status in files (readers run
# side by side, one per core; the table prints in the readers' order).
fuzz_one() {
  local reader=$1 corpus="$build/fuzz-corpus/$1" crashes="$build/fuzz-crashes/$1" log="$build/fuzz-$1.log"
  mkdir -p "$corpus" "$crashes"
  seeds "$reader" | sort | while read -r f; do cp "$f" "$corpus/seed-$(basename "$f")"; done
  local start status=0 runs
  start=$(date +%s)
  (cd "$build" && "$build/fuzz/fuzz_$reader" "$corpus" "${budget[@]}" -max_len=8192 -timeout=10 \
      -malloc_limit_mb=1024 -rss_limit_mb=2560 -print_final_stats=1 -artifact_prefix="$crashes/" >"$log" 2>&1) || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  echo "${runs:-0} $(( $(date +%s) - start )) $(ls "$corpus" | wc -l) $status" >"$MEMTWIN_FUZZ_TMP/$reader.row"
}
parallel=$(nproc)
for reader in "${readers[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
  fuzz_one "$reader" &
done
wait
failed=0 total=0
printf '%-12s %12s %8s %8s %s\n' reader executions seconds corpus result
for reader in "${readers[@]}"; do
  read -r runs seconds corpus_size status <"$MEMTWIN_FUZZ_TMP/$reader.row"
  total=$((total + runs))
  result=ok
  if [ "$status" -ne 0 ]; then
    log="$build/fuzz-$reader.log"
    result="FAILED (see $log)"
    failed=1
    grep -E "ERROR: (AddressSanitizer|libFuzzer|UndefinedBehaviorSanitizer)|runtime error|deadly signal|Test unit written" "$log" | head -5 >&2 || true
  fi
  printf '%-12s %12s %8s %8s %s\n' "$reader" "$runs" "$seconds" "$corpus_size" "$result"
done
echo "executions in all: $total"
rm -rf "$MEMTWIN_FUZZ_TMP"
exit "$failed"
