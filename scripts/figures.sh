#!/usr/bin/env bash
# Regenerates the docs' figures (docs/figures/*.png) from the example scenarios:
#   scripts/figures.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MEMTWIN_BUILD_DIR:-$root/build}"
"$root/scripts/dev.sh" build >/dev/null
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
out="$root/docs/figures"
mkdir -p "$out"
"$build/memtwin" run "$root/scenarios/quickstart.yaml" --backend sim --out "$work/train" >/dev/null
"$build/memtwin" run "$root/scenarios/serving/llama3-8b-h100-kivi4-kv.yaml" --backend sim --out "$work/serve" \
  --set inference.workload.rate=25/s >/dev/null
"$build/memtwin" sweep "$root/scenarios/quickstart.yaml" --grid training.seq_len=2048,4096,8192,12288,16384 \
  --grid training.activation_checkpointing=none,selective,full --backend analytic -j "$(nproc)" --out "$work/sweep" >/dev/null 2>&1
# A KV pool held to 8 GiB so that the load preempts; a sweep over rate for the load curve.
"$build/memtwin" run "$root/scenarios/serving/llama3-8b-h100-fp16-kv.yaml" --backend sim --out "$work/preempt" \
  --set inference.workload.rate=40/s --set inference.kv_cache.memory=8GiB --set inference.serving.preemption=swap >/dev/null
"$build/memtwin" sweep "$root/scenarios/serving/llama3-8b-h100-fp16-kv.yaml" \
  --grid inference.workload.rate=5/s,10/s,15/s,20/s,25/s,30/s,35/s,40/s,50/s --set inference.workload.requests=1000 \
  --backend sim -j "$(nproc)" --out "$work/rates" >/dev/null 2>&1
"$build/memtwin" run "$root/scenarios/jobs/serving-beside-training-across-spine.yaml" --out "$work/jobs" >/dev/null
# Predicted against measured on this machine's host device, after calibrating it.
"$build/memtwin" calibrate --device host --ranks 2 --out "$work/host-2.yaml" >/dev/null
"$build/memtwin" calibrate --device host --ranks 1 --out "$work/host-1.yaml" >/dev/null
"$build/memtwin" validate "$root/scenarios/host/train-zero3-2ranks.yaml" --set cluster.calibration="$work/host-2.yaml" \
  --out "$work/validate-train" >/dev/null
"$build/memtwin" validate "$root/scenarios/host/serve-fp16-kv.yaml" --set cluster.calibration="$work/host-1.yaml" \
  --out "$work/validate-serve" >/dev/null
"$build/memtwin" report "$work/validate-train" --out "$work/validate-train.html" --png-dir "$work/png-validate-train"
"$build/memtwin" report "$work/validate-serve" --out "$work/validate-serve.html" --png-dir "$work/png-validate-serve"
"$build/memtwin" report "$work/train" --out "$work/train.html" --png-dir "$work/png-train"
"$build/memtwin" report "$work/serve" --out "$work/serve.html" --png-dir "$work/png-serve"
"$build/memtwin" report "$work/sweep" --out "$work/sweep.html" --png-dir "$work/png-sweep"
"$build/memtwin" report "$work/preempt" --out "$work/preempt.html" --png-dir "$work/png-preempt"
"$build/memtwin" report "$work/rates" --out "$work/rates.html" --png-dir "$work/png-rates"
"$build/memtwin" report "$work/jobs" --out "$work/jobs.html" --png-dir "$work/png-jobs"
cp "$work/png-train/memory-breakdown.png" "$out/training-memory-breakdown.png"
cp "$work/png-train/memory-timeline.png" "$out/training-memory-timeline.png"
cp "$work/png-train/step-timeline.png" "$out/training-step-timeline.png"
cp "$work/png-serve/latency-cdf.png" "$out/serving-latency-cdf.png"
cp "$work/png-serve/kv-occupancy.png" "$out/serving-kv-occupancy.png"
cp "$work/png-preempt/preemptions.png" "$out/serving-preemptions.png"
cp "$work/png-preempt/tier-traffic.png" "$out/serving-tier-traffic.png"
cp "$work/png-rates/load-curve.png" "$out/serving-load-curve.png"
cp "$work/png-jobs/job-steps.png" "$out/jobs-serving-beside-training.png"
cp "$work/png-jobs/link-utilization.png" "$out/jobs-link-utilization.png"
cp "$work/png-sweep/sweep.png" "$out/sweep-peak-memory.png"
cp "$work/png-validate-train/validation.png" "$out/validation-training-errors.png"
cp "$work/png-validate-train/memory-timeline-compare.png" "$out/validation-training-memory.png"
cp "$work/png-validate-serve/validation.png" "$out/validation-serving-errors.png"
cp "$work/png-validate-serve/latency-cdf-compare.png" "$out/validation-serving-latency.png"
ls -la "$out"
