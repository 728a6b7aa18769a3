#!/usr/bin/env bash
# Runs the benchmarks and prints their figures (record them in the README with the machine).
#   scripts/bench.sh            (BENCH_REPEATS=N: runs per timed figure, default 3; the median is printed)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MEMTWIN_BUILD_DIR:-$root/build}"
"$root/scripts/dev.sh" build >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F)"

# The VM this runs on drifts by tens of percent within minutes: every timed figure is the median of
# BENCH_REPEATS runs (default 3), printed with the fastest and slowest.
repeats="${BENCH_REPEATS:-3}"

# timed LABEL SCENARIO [memtwin run args...]: wall time of a whole `memtwin run --backend sim`, and
# the figures that say what was simulated (the runs' results are identical; the last one's).
timed() {
  local label="$1" scenario="$2"; shift 2
  local stamps=()  # start and end of each run
  for ((i = 0; i < repeats; ++i)); do
    stamps+=("$(date +%s.%N)")
    "$build/memtwin" run "$root/scenarios/$scenario" --backend sim --json "$@" > /tmp/memtwin-bench.json
    stamps+=("$(date +%s.%N)")
  done
  python3 - "$label" "${stamps[@]}" <<'PY'
import json, statistics, sys
d = json.load(open("/tmp/memtwin-bench.json"))
label, stamps = sys.argv[1], [float(t) for t in sys.argv[2:]]
walls = sorted(end - start for start, end in zip(stamps[::2], stamps[1::2]))
if "time" in d:
    s = d["simulated"]
    detail = (f"simulated {s['simulated_ranks']} of {s['ranks']} ranks ({s['fidelity']}), {s['flows']} flows; "
              f"step {d['time']['step_s']:.3f} s, MFU {d['time']['mfu']:.3f}")
else:
    detail = (f"{d['requests']['completed']} completed, {d['throughput']['requests_per_s']:.1f} requests/s, "
              f"p99 TTFT {d['latency_s']['ttft']['p99']:.3f} s")
spread = f" ({walls[0]:.2f}-{walls[-1]:.2f} s over {len(walls)} runs)" if len(walls) > 1 else ""
print(f"{label}: wall {statistics.median(walls):.2f} s{spread}; {detail}")
PY
}

echo "== analytic memory model"
"$build/tools/bench_memory" "$root" 10000
echo "== SimGrid training step, Llama-2-70B ZeRO-3"
train=benchmarks/llama2-70b-zero3-1024xh100.yaml
timed "1,024 GPUs, default fidelity (auto)" "$train"
timed "1,024 GPUs, fidelity full" "$train" --set simulation.fidelity=full
timed "1,024 GPUs, fidelity fast" "$train" --set simulation.fidelity=fast
timed "8,192 GPUs, fidelity fast" "$train" --set simulation.fidelity=fast --set cluster.nodes=1024 --set training.global_batch=8192
timed "the 16,384-GPU Llama 3.1 405B example, default fidelity" training/llama3.1-405b-16k-h100.yaml
echo "== CPU time at full fidelity against the cluster's size (the same step per GPU, 16 to 256 nodes)"
python3 - "$build/memtwin" "$root/scenarios/$train" "$repeats" <<'PY'
import math, resource, statistics, subprocess, sys
memtwin, scenario, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
cpu = {}
for nodes in (16, 64, 256):
    runs = []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([memtwin, "run", scenario, "--backend", "sim", "--json", "--set", "simulation.fidelity=full",
                        "--set", f"cluster.nodes={nodes}", "--set", f"training.global_batch={8 * nodes}",
                        "--set", "simulation.time_limit=900s"], check=True, stdout=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        runs.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    cpu[nodes] = statistics.median(runs)
    print(f"{nodes} nodes ({8 * nodes} GPUs), fidelity full: {cpu[nodes]:.2f} s of CPU "
          f"(median; {min(runs):.2f}-{max(runs):.2f} s over {repeats} runs)")
print(f"CPU time grows as nodes^{math.log(cpu[256] / cpu[16]) / math.log(16):.2f} from 16 to 256 nodes (medians)")
PY
echo "== SimGrid serving, Llama-3-8B on H100s, Poisson at about 77% of capacity (20 of about 26 requests/s per H100)"
serve=serving/llama3-8b-h100-fp16-kv.yaml
timed "100,000 requests, one H100" "$serve" --set inference.workload.requests=100000 --set inference.workload.rate=20/s
timed "1,000,000 requests, 16 replicas" "$serve" --set cluster.nodes=2 --set cluster.gpus_per_node=8 \
  --set inference.serving.replicas=16 --set inference.workload.requests=1000000 --set inference.workload.rate=320/s
echo "== KV kernels on the CPU"
"$build/memtwin_kernels_bench" --device cpu --quick
