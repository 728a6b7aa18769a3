#!/usr/bin/env bash
# The predicting half: simulates what scripts/gpu/measure.sh measured (same scenarios, same
# calibration files) and prints memtwin compare's predicted / measured / error tables. The plan
# hash in both results makes compare refuse if they are not the same plan.
#   scripts/gpu/compare.sh [MEASURED_DIR]   (default ./gpu-results/measured)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="${MEMTWIN_BINARY:-$root/build/memtwin}"
measured="${1:-$root/gpu-results/measured}"
sim="$measured/../simulated"
mkdir -p "$sim"
# The GPU rows ran with the GPU's calibration (measure.sh), so they are simulated with it too.
calibrated=()
[ -f "$measured/cuda.yaml" ] && calibrated=(--set cluster.calibration="$measured/cuda.yaml")
"$bin" run "$root/scenarios/validation/torch-llama-0.9b-h200.yaml" --backend sim "${calibrated[@]}" --out "$sim/train" > /dev/null &&
  "$bin" compare "$sim/train/result.json" "$measured/train/result.json"
for kv in fp16 int4; do
  [ -f "$measured/serve-$kv/result.json" ] || { echo "serving $kv (host): not measured"; continue; }
  "$bin" run "$root/scenarios/host/serve-$kv-kv.yaml" --backend sim --set cluster.calibration="$measured/host-1rank.yaml" \
    --out "$sim/serve-$kv" > /dev/null &&
    "$bin" compare "$sim/serve-$kv/result.json" "$measured/serve-$kv/result.json"
done
for kv in fp16 int4 h2o kivi; do
  [ -f "$measured/gpu-serve-$kv/result.json" ] || { echo "serving $kv (cuda): not measured"; continue; }
  "$bin" run "$root/scenarios/gpu/serve-0.9b-h200-$kv-kv.yaml" --backend sim "${calibrated[@]}" --out "$sim/gpu-serve-$kv" > /dev/null &&
    "$bin" compare "$sim/gpu-serve-$kv/result.json" "$measured/gpu-serve-$kv/result.json"
done
# Llama-2-70B: the 4-layer plan compared, then the measurement extrapolated to 80 layers beside
# the full model's prediction.
"$bin" run "$root/scenarios/gpu/train-llama-2-70b-h200-layers.yaml" --backend sim "${calibrated[@]}" --set model.layers=4 \
  --out "$sim/train-70b-layers" > /dev/null &&
  "$bin" compare "$sim/train-70b-layers/result.json" "$measured/train-70b-layers/result.json"
"$bin" run "$root/scenarios/gpu/train-llama-2-70b-h200-layers.yaml" --backend sim "${calibrated[@]}" --json > "$sim/train-70b-full.json"
python3 - "$sim/train-70b-full.json" "$measured/train-70b-layers/result.json" <<'PY'
import json, sys
predicted, measured = (json.load(open(p)) for p in sys.argv[1:3])
d = measured.get("depth_scaling")
if d:
    print(f"Llama-2-70B at {d['layers']} layers: step {predicted.get('time', {}).get('step_s')} s predicted, "
          f"{d['step_s']:.4g} s extrapolated from {d['measured_layers']} layers; peak "
          f"{predicted['memory']['gpu']['peak_bytes'] / 2**30:.1f} GiB predicted, {d['peak_bytes'] / 2**30:.1f} GiB extrapolated")
PY
