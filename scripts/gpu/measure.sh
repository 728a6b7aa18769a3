#!/usr/bin/env bash
# The measuring half of the GPU check for a device machine that cannot build memtwin: run with the
# bundle of scripts/gpu/device-bundle.sh carried along (device `carry: ["build/device-bundle.tgz"]`).
# Writes result.json files under OUT (default ./gpu-results/measured): a training step of the 0.9B
# Llama on the GPU (--device cuda), the host serving scenarios on the host device, the 0.9B model
# served on the GPU (scenarios/gpu/, fp16, int4 and H2O KV), and Llama-2-70B's step at 4 and 2
# of its layers (--layers 4). Its timeouts sum to 590 s, under a device call's 600. Back on a
# machine with the full tool, scripts/gpu/compare.sh simulates the same scenarios and prints the
# tables.
#   scripts/gpu/measure.sh
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
timeout 120 "$bin" run "$root/scenarios/validation/torch-llama-0.9b-h200.yaml" --device cuda --steps 5 \
  --out "$out/train" > "$out/train.txt" 2>&1
echo "training step (cuda) exit $?" | tee -a "$out/status.txt"
"$bin" calibrate --device host --ranks 1 --out "$out/host-1rank.yaml" > "$out/host-calibration.txt" 2>&1
echo "host calibration exit $?" | tee -a "$out/status.txt"
for kv in fp16 int4; do
  timeout 45 "$bin" run "$root/scenarios/host/serve-$kv-kv.yaml" --set cluster.calibration="$out/host-1rank.yaml" \
    --out "$out/serve-$kv" > "$out/serve-$kv.txt" 2>&1
  echo "serving $kv (host) exit $?" | tee -a "$out/status.txt"
done
timeout 120 "$bin" calibrate --device cuda --out "$out/cuda.yaml" > "$out/cuda-calibration.txt" 2>&1
echo "cuda calibration exit $?" | tee -a "$out/status.txt"
for kv in fp16 int4 h2o; do
  timeout 70 "$bin" run "$root/scenarios/gpu/serve-0.9b-h200-$kv-kv.yaml" --device cuda --out "$out/gpu-serve-$kv" \
    > "$out/gpu-serve-$kv.txt" 2>&1
  echo "serving $kv (cuda) exit $?" | tee -a "$out/status.txt"
done
timeout 50 "$bin" run "$root/scenarios/gpu/train-llama-2-70b-h200-layers.yaml" --device cuda --layers 4 \
  --out "$out/train-70b-layers" > "$out/train-70b-layers.txt" 2>&1
echo "training 70B at 4 and 2 layers (cuda) exit $?" | tee -a "$out/status.txt"
cat "$out/status.txt"
