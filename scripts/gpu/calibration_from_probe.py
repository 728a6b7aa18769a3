#!/usr/bin/env python3
"""Turns a device probe (memtwin_device_probe's JSON) into a memtwin calibration file that a
scenario names with `cluster.calibration: FILE`. Efficiencies are measured against the catalog's
datasheet peaks for the device.

    python3 scripts/gpu/calibration_from_probe.py PROBE.json > calibration.yaml
"""
import json
import sys

# Datasheet peaks (dense bf16 FLOP/s, HBM bytes/s), as in scenarios/presets/gpus.yaml.
DATASHEETS = {
    "H200": (989e12, 4.8e12),
    "H100": (989e12, 3.35e12),
    "A100-SXM4-80GB": (312e12, 2.039e12),
    "A100-SXM4-40GB": (312e12, 1.555e12),
    "L40S": (362.05e12, 0.864e12),
    "RTX 4090": (165.2e12, 1.008e12),
}


def main(path):
    with open(path) as f:
        probe = json.load(f)
    if probe.get("schema") != "memtwin.device_probe/1" or not probe.get("all_correct"):
        sys.exit(f"{path}: not a correct memtwin device probe")
    name = probe["device"]
    peak = next((v for k, v in DATASHEETS.items() if k in name), None)
    if peak is None:
        sys.exit(f"{path}: no datasheet peaks known for {name!r}")
    flops, hbm = peak
    large = [g["tflops"] * 1e12 for g in probe["gemm_bf16"] if min(g["m"], g["n"], g["k"]) >= 4096]
    gemm = sum(large) / len(large) / flops
    memory = probe["d2d_copy_bytes_per_s"] / hbm
    mib = 2**20
    print(f"# memtwin calibration, from {path}: {name}, driver {probe['driver_version']}, "
          f"CUDA runtime {probe['runtime_version']}")
    print(f"device: {name}")
    print("efficiency:")
    print(f"  gemm: {gemm:.3f}        # mean of the large bf16 GEMMs over the {flops / 1e12:g} TFLOP/s datasheet peak")
    print(f"  memory: {memory:.3f}      # device-to-device copy over the {hbm / 1e12:g} TB/s datasheet bandwidth")
    print("runtime:")
    print(f"  cuda_context: {round((probe['context_bytes'] + probe['cublas_bytes']) / mib)}MiB   # context + cuBLAS")
    print(f"  nccl_buffers: {round(probe['nccl_one_rank_bytes'] / mib)}MiB   # one-rank communicator")
    print("host:")
    print(f"  pcie_bandwidth: {min(probe['h2d_pinned_bytes_per_s'], probe['d2h_pinned_bytes_per_s']) / 1e9:.1f}GB/s   # pinned copies")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
