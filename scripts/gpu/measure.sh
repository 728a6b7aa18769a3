#!/usr/bin/env bash
# The measuring half of the GPU check for a device machine that cannot build memtwin: run with the
# bundle of scripts/gpu/device-bundle.sh carried along (device `carry: ["build/device-bundle.tgz"]`).
# Writes result.json files under OUT (default ./gpu-results/measured): a training step of the 0.9B
# Llama on the GPU (--device cuda), the host serving scenarios on the host device, the 0.9B model
# served on the GPU (scenarios/gpu/, fp16, int4, H2O and KIVI KV), and Llama-2-70B's step at 4 and
# 2 of its layers (--layers 4). Its timeouts sum to 620 s with GPU_ONLY=1 (the GPU rows alone; a
# device call allows 600, and the rows usually take a third of theirs), 710 s without; each row's
# exit status and wall time go to status.txt. Back on a machine with the full tool,
# scripts/gpu/compare.sh simulates the same scenarios and prints the tables.
#   [GPU_ONLY=1] scripts/gpu/measure.sh
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bundle="${BUNDLE:-$root/build/device-bundle}"
# A device call carries the compressed bundle (build/device-bundle.tgz): unpack it next to itself.
if [ ! -d "$bundle" ] && [ -f "$bundle.tgz" ]; then tar xzf "$bundle.tgz" -C "$(dirname "$bundle")"; fi
out="${OUT:-$root/gpu-results}/measured"
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
export OMPI_MCA_mca_base_component_path="$bundle/lib/openmpi3"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bin="$bundle/memtwin-device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/nvidia-smi.csv" 2>&1
ldd "$bin" > "$out/ldd.txt" 2>&1
# row NAME LOG COMMAND...: runs a measurement with its output in LOG, then notes its exit status
# and wall time in status.txt.
row() {
  local name=$1 log=$2 start=$SECONDS rc
  shift 2
  "$@" > "$log" 2>&1
  rc=$?
  echo "$name exit $rc ($((SECONDS - start)) s)" | tee -a "$out/status.txt"
}
# The GPU calibrated first: every GPU row runs its scenario with that calibration, as compare.sh
# simulates it (the calibration's runtime bytes size the KV pool, which is part of a plan's hash).
row "cuda calibration" "$out/cuda-calibration.txt" timeout 120 "$bin" calibrate --device cuda --out "$out/cuda.yaml"
calibrated=()
[ -f "$out/cuda.yaml" ] && calibrated=(--set cluster.calibration="$out/cuda.yaml")
row "training step (cuda)" "$out/train.txt" timeout 120 "$bin" run "$root/scenarios/validation/torch-llama-0.9b-h200.yaml" \
  --device cuda "${calibrated[@]}" --steps 5 --out "$out/train"
if [ "${GPU_ONLY:-0}" != 1 ]; then
  row "host calibration" "$out/host-calibration.txt" "$bin" calibrate --device host --ranks 1 --out "$out/host-1rank.yaml"
  for kv in fp16 int4; do
    row "serving $kv (host)" "$out/serve-$kv.txt" timeout 45 "$bin" run "$root/scenarios/host/serve-$kv-kv.yaml" \
      --set cluster.calibration="$out/host-1rank.yaml" --out "$out/serve-$kv"
  done
fi
for kv in fp16 int4 h2o kivi; do
  row "serving $kv (cuda)" "$out/gpu-serve-$kv.txt" timeout 80 "$bin" run "$root/scenarios/gpu/serve-0.9b-h200-$kv-kv.yaml" \
    --device cuda "${calibrated[@]}" --out "$out/gpu-serve-$kv"
done
row "training 70B at 4 and 2 layers (cuda)" "$out/train-70b-layers.txt" timeout 60 "$bin" run \
  "$root/scenarios/gpu/train-llama-2-70b-h200-layers.yaml" --device cuda "${calibrated[@]}" --layers 4 --out "$out/train-70b-layers"
cat "$out/status.txt"
