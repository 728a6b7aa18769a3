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

# timed LABEL TARGET SCENARIO [memtwin run args...]: wall time and peak resident memory of a whole
# `memtwin run --backend sim`, against TARGET ("1s", "10s/1GB" for a wall time and a peak, or "-"),
# and the figures that say what was simulated (the runs' results are identical; the last one's).
timed() {
  local label="$1" target="$2" scenario="$3"; shift 3
  python3 - "$label" "$target" "$repeats" "$build/memtwin" run "$root/scenarios/$scenario" --backend sim --json "$@" <<'PY'
import json, os, statistics, subprocess, sys, time
label, target, repeats, command = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
walls, peaks = [], []
for _ in range(repeats):
    with open("/tmp/memtwin-bench.json", "w") as out:
        start = time.monotonic()
        child = subprocess.Popen(command, stdout=out)
        _, status, usage = os.wait4(child.pid, 0)  # this run's own peak, not the largest so far
        walls.append(time.monotonic() - start)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{label}: memtwin exited with {os.waitstatus_to_exitcode(status)}")
    peaks.append(usage.ru_maxrss / 1e6)  # kilobytes on Linux
d = json.load(open("/tmp/memtwin-bench.json"))
if "time" in d:
    s = d["simulated"]
    detail = (f"simulated {s['simulated_ranks']} of {s['ranks']} ranks ({s['fidelity']}), {s['flows']} flows; "
              f"step {d['time']['step_s']:.3f} s, MFU {d['time']['mfu']:.3f}")
else:
    detail = (f"{d['requests']['completed']} completed, {d['throughput']['requests_per_s']:.1f} requests/s, "
              f"p99 TTFT {d['latency_s']['ttft']['p99']:.3f} s")
wall, peak = statistics.median(walls), max(peaks)
spread = f" ({min(walls):.2f}-{max(walls):.2f} s over {len(walls)} runs)" if len(walls) > 1 else ""
verdict = ""
if target != "-":
    parts = target.split("/")
    wall_goal = float(parts[0].removesuffix("s"))
    met, goal = wall < wall_goal, f"< {wall_goal:g} s"
    if len(parts) > 1:
        peak_goal = float(parts[1].removesuffix("GB"))
        met, goal = met and peak < peak_goal, f"{goal}, < {peak_goal:g} GB peak"
    verdict = f" (target {goal}: {'met' if met else 'NOT met'})"
print(f"{label}: wall {wall:.2f} s{spread}, peak {peak:.2f} GB{verdict}; {detail}")
PY
}

echo "== analytic memory model"
"$build/tools/bench_memory" "$root" 10000
echo "== SimGrid training step, Llama-2-70B ZeRO-3"
train=benchmarks/llama2-70b-zero3-1024xh100.yaml
timed "1,024 GPUs, default fidelity (auto)" 1s "$train"
timed "1,024 GPUs, fidelity full" 2s "$train" --set simulation.fidelity=full
timed "1,024 GPUs, fidelity fast" - "$train" --set simulation.fidelity=fast
timed "8,192 GPUs, fidelity fast" - "$train" --set simulation.fidelity=fast --set cluster.nodes=1024 --set training.global_batch=8192
timed "the 16,384-GPU Llama 3.1 405B example, default fidelity" 1s training/llama3.1-405b-16k-h100.yaml
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
growth = math.log(cpu[256] / cpu[16]) / math.log(16)
print(f"CPU time grows as nodes^{growth:.2f} from 16 to 256 nodes (medians) "
      f"(target nodes^1.15 at most: {'met' if growth <= 1.15 else 'NOT met'})")
PY
echo "== SimGrid serving, Llama-3-8B on H100s, Poisson at about 77% of capacity (20 of about 26 requests/s per H100)"
serve=serving/llama3-8b-h100-fp16-kv.yaml
timed "100,000 requests, one H100" 1.5s "$serve" --set inference.workload.requests=100000 --set inference.workload.rate=20/s
timed "1,000,000 requests, 16 replicas" 10s/1GB "$serve" --set cluster.nodes=2 --set cluster.gpus_per_node=8 \
  --set inference.serving.replicas=16 --set inference.workload.requests=1000000 --set inference.workload.rate=320/s
echo "== KV kernels on the CPU"
"$build/memtwin_kernels_bench" --device cpu --quick
