#!/usr/bin/env bash
# Runs on a GPU machine (the device tool, or any CUDA box): measures the device facts memtwin's
# models take as parameters and writes them under OUT (default ./gpu-results):
#   device_probe.json   memtwin_device_probe: memory, context/cuBLAS/NCCL overheads, copy, PCIe, GEMM
#   torch_training.json PyTorch training steps of a 1.1B Llama: peak allocated/reserved, step time
#   nvidia-smi.txt
# Uses a prebuilt probe if one is given ($PROBE), else builds it with nvcc. Finishes in a few minutes.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${OUT:-$root/gpu-results}"
mkdir -p "$out"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
# cuBLAS and NCCL may live in the toolkit or in the Python wheels of the image.
libs=/usr/local/cuda/lib64
py_libs=$(python3 -c 'import glob,os,site; print(":".join(sorted(set(os.path.dirname(p) for s in site.getsitepackages() for p in glob.glob(s+"/nvidia/*/lib/*.so*")))))' 2>/dev/null)
export LD_LIBRARY_PATH="$libs:${py_libs}:${LD_LIBRARY_PATH:-}"
probe="${PROBE:-}"
if [ -z "$probe" ] || [ ! -x "$probe" ] || ldd "$probe" | grep -q "not found"; then
  probe=/tmp/memtwin_device_probe
  nvcc -O2 -std=c++17 -gencode arch=compute_90,code=sm_90 "$root/hw/cuda/device_probe.cu" -o "$probe" -lcublas -ldl \
    > "$out/build.log" 2>&1 || echo "nvcc build failed" >> "$out/build.log"
fi
timeout 120 "$probe" > "$out/device_probe.json" 2> "$out/device_probe.err"
echo "device_probe exit $?" >> "$out/status.txt"
python3 "$root/scripts/gpu/calibration_from_probe.py" "$out/device_probe.json" > "$out/calibration.yaml" 2>> "$out/status.txt"
PYTHONUNBUFFERED=1 timeout 150 python3 "$root/scripts/gpu/torch_training_step.py" > "$out/torch_training.json" 2> "$out/torch_training.err"
echo "torch_training exit $?" >> "$out/status.txt"
cat "$out/status.txt" "$out/device_probe.json"
tail -n 8 "$out/torch_training.err"
