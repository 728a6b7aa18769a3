#!/usr/bin/env bash
# The hardware backend's GPU check, in one go, under 8 minutes (its timeouts sum to 7.7 minutes, plus
# about 15 s of host calibration; 8.5 when the CUDA calibration fails and the device probe stands in), results under OUT (default ./gpu-results/validate): calibrates the GPU (memtwin calibrate --device cuda; the device probe's
# file if that fails), then `memtwin validate` of a training step on the GPU (--device cuda:
# cuBLAS, cudaMalloc through the caching allocator), of the 0.9B model served on the GPU
# (scenarios/gpu/, fp16, int4, H2O and KIVI KV: cuBLAS and the CUDA KV kernels) and of the serving scenarios
# on the host device, and of Llama-2-70B measured at 4 and 2 of its layers and extrapolated to 80
# (--layers), printing the predicted / measured / error tables. Needs build/memtwin built with nvcc on the PATH (scripts/dev.sh build).
#   scripts/gpu/validate.sh
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${OUT:-$root/gpu-results}/validate"
bin="${MEMTWIN_BINARY:-$root/build/memtwin}"
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/nvidia-smi.csv" 2>&1
if [ ! -x "$bin" ] || ldd "$bin" | grep -q "not found"; then
  echo "memtwin is not built or cannot load its libraries: run scripts/dev.sh build on this machine" | tee "$out/status.txt"
  exit 2
fi
# 1. Calibration: memtwin calibrate --device cuda (GEMMs, copies, PCIe, the CUDA KV kernels); the
# device probe's file (context and NCCL memory, GEMMs, copies) where that fails.
timeout 100 "$bin" calibrate --device cuda --out "$out/cuda.yaml" > "$out/calibrate.txt" 2>&1
status=$?
echo "calibrate (cuda) exit $status" | tee -a "$out/status.txt"
calibration="$out/cuda.yaml"
if [ $status -ne 0 ]; then
  OUT="$out/probe" timeout 45 "$root/scripts/gpu/probe.sh" > "$out/probe.log" 2>&1
  echo "probe exit $?" | tee -a "$out/status.txt"
  calibration="$out/probe/calibration.yaml"
fi
# 2. A training step on the GPU: the 0.9B Llama of scenarios/validation, bf16, one GPU.
timeout 100 "$bin" validate "$root/scenarios/validation/torch-llama-0.9b-h200.yaml" --device cuda \
  --set cluster.calibration="$calibration" --out "$out/train" > "$out/train.txt" 2>&1
echo "validate training (cuda) exit $?" | tee -a "$out/status.txt"
# 3. Serving, on the host device of the same machine (calibrated for it).
"$bin" calibrate --device host --ranks 1 --out "$out/host-1rank.yaml" > "$out/host-calibration.txt" 2>&1
for kv in fp16 int4; do
  timeout 40 "$bin" validate "$root/scenarios/host/serve-$kv-kv.yaml" --set cluster.calibration="$out/host-1rank.yaml" \
    --out "$out/serve-$kv" > "$out/serve-$kv.txt" 2>&1
  echo "validate serving $kv (host) exit $?" | tee -a "$out/status.txt"
done
# 4. Serving on the GPU, predicted with the same calibration.
for kv in fp16 int4 h2o kivi; do
  timeout 45 "$bin" validate "$root/scenarios/gpu/serve-0.9b-h200-$kv-kv.yaml" --device cuda \
    --set cluster.calibration="$calibration" --out "$out/gpu-serve-$kv" > "$out/gpu-serve-$kv.txt" 2>&1
  echo "validate serving $kv (cuda) exit $?" | tee -a "$out/status.txt"
done
# 5. Llama-2-70B on one GPU with 4 of its 80 layers (and 2), extrapolated to all 80 (--layers).
timeout 45 "$bin" validate "$root/scenarios/gpu/train-llama-2-70b-h200-layers.yaml" --device cuda --layers 4 \
  --set cluster.calibration="$calibration" --out "$out/train-70b-layers" > "$out/train-70b-layers.txt" 2>&1
echo "validate training 70B --layers 4 (cuda) exit $?" | tee -a "$out/status.txt"
cat "$out/status.txt" "$out/train.txt" "$out"/serve-*.txt "$out"/gpu-serve-*.txt "$out/train-70b-layers.txt"
