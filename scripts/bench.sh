#!/usr/bin/env bash
# Runs the benchmarks and prints their figures (record them in the README with the machine).
#   scripts/bench.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MEMTWIN_BUILD_DIR:-$root/build}"
"$root/scripts/dev.sh" build >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F)"
echo "== analytic memory model"
"$build/tools/bench_memory" "$root" 10000
echo "== SimGrid training step, Llama-2-70B ZeRO-3 (wall time of the whole memtwin run, one core)"
sim() {
  local label="$1"; shift
  local start end
  start=$(date +%s.%N)
  "$build/memtwin" run "$root/scenarios/benchmarks/llama2-70b-zero3-1024xh100.yaml" --backend sim --json "$@" > /tmp/memtwin-bench.json
  end=$(date +%s.%N)
  python3 - "$label" "$start" "$end" <<'PY'
import json, sys
d = json.load(open("/tmp/memtwin-bench.json"))
label, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
print(f"{label}: wall {end - start:.2f} s; simulated {d['simulated']['simulated_ranks']} of {d['simulated']['ranks']} ranks, "
      f"{d['simulated']['flows']} flows; step {d['time']['step_s']:.3f} s, MFU {d['time']['mfu']:.3f}")
PY
}
sim "1,024 GPUs, fidelity full"
sim "1,024 GPUs, fidelity fast" --set simulation.fidelity=fast
sim "8,192 GPUs, fidelity fast" --set simulation.fidelity=fast --set cluster.nodes=1024 --set training.global_batch=8192
echo "== SimGrid serving, Llama-3-8B on H100s, Poisson at about 80% of capacity"
serve() {
  local label="$1"; shift
  local start end
  start=$(date +%s.%N)
  "$build/memtwin" run "$root/scenarios/serving/llama3-8b-h100-fp16-kv.yaml" --backend sim --json "$@" > /tmp/memtwin-bench.json
  end=$(date +%s.%N)
  python3 - "$label" "$start" "$end" <<'PY'
import json, sys
d = json.load(open("/tmp/memtwin-bench.json"))
label, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
print(f"{label}: wall {end - start:.2f} s; {d['requests']['completed']} completed, "
      f"{d['throughput']['requests_per_s']:.1f} requests/s, p99 TTFT {d['latency_s']['ttft']['p99']:.3f} s")
PY
}
serve "100,000 requests, one H100" --set inference.workload.requests=100000 --set inference.workload.rate=20/s
serve "1,000,000 requests, 16 replicas" --set cluster.nodes=2 --set cluster.gpus_per_node=8 \
  --set inference.serving.replicas=16 --set inference.workload.requests=1000000 --set inference.workload.rate=320/s
