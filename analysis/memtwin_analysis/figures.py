"""The report's figures. Each function takes loaded data and returns a matplotlib Figure."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from . import load  # noqa: E402

GIB = 2**30
STREAM_COLOURS = {"compute": "#4878d0", "comm": "#ee854a", "copy": "#6acc64",
                  "send_next": "#d65f5f", "send_prev": "#d65f5f", "recv_next": "#956cb4", "recv_prev": "#956cb4"}


def _finish(fig, ax, xlabel, ylabel, title, legend=False):
    """Labels the axes, adds the legend when asked, and lays the figure out."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def memory_breakdown(doc):
    """Stacked bar of the per-GPU memory breakdown, with the capacity line."""
    gpu = doc["memory"]["gpu"]
    parts = gpu["breakdown_bytes"]
    fig, ax = plt.subplots(figsize=(5, 4.5))
    bottom = 0.0
    for name, value in parts.items():
        ax.bar(["per GPU"], [value / GIB], bottom=bottom, label=name.replace("_", " "))
        bottom += value / GIB
    ax.axhline(gpu["capacity_bytes"] / GIB, color="black", linestyle="--", label="capacity")
    ax.set_ylabel("GiB")
    ax.set_title("Memory per GPU" + ("" if gpu["fits"] else " (does not fit)"))
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def memory_timeline(rows, capacity_bytes, doc=None):
    """Device memory over the step (rank 0), capacity and peak marked. With the result document, the
    summary's peak too, and what it adds to the timeline's: the timeline holds the tensors, the
    summary also the caching allocator's fragmentation."""
    times = [r["time_s"] for r in rows]
    used = [r["bytes_in_use"] / GIB for r in rows]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.step(times, used, where="post", color="#4878d0")
    ax.axhline(capacity_bytes / GIB, color="black", linestyle="--", label="capacity")
    peak = max(range(len(used)), key=used.__getitem__)
    ax.plot([times[peak]], [used[peak]], "o", color="#d65f5f", label=f"peak {used[peak]:.1f} GiB")
    gpu = (doc or {}).get("memory", {}).get("gpu", {})
    if gpu.get("peak_bytes") is not None and abs(gpu["peak_bytes"] / GIB - used[peak]) > 0.05:
        fragmentation = (gpu.get("breakdown_bytes") or {}).get("fragmentation", 0) / GIB
        ax.axhline(gpu["peak_bytes"] / GIB, color="#d65f5f", linestyle=":",
                   label=f"summary's peak {gpu['peak_bytes'] / GIB:.1f} GiB (+{fragmentation:.1f} GiB fragmentation)")
    return _finish(fig, ax, "time in step (s)", "GiB in use", "Device memory over the step (rank 0)", legend=True)


def step_timeline(events, rank=0):
    """Ops per stream of one rank, as in the Perfetto trace."""
    mine = [e for e in events if e["pid"] == rank]
    streams = sorted({e["cat"] for e in mine}, key=lambda s: list(STREAM_COLOURS).index(s) if s in STREAM_COLOURS else 99)
    fig, ax = plt.subplots(figsize=(9, 0.6 + 0.5 * len(streams)))
    for row, stream in enumerate(streams):
        spans = [(e["ts"] / 1e6, e["dur"] / 1e6) for e in mine if e["cat"] == stream and e["dur"] > 0]
        ax.broken_barh(spans, (row - 0.4, 0.8), color=STREAM_COLOURS.get(stream, "grey"))
    ax.set_yticks(range(len(streams)))
    ax.set_yticklabels(streams)
    ax.set_xlabel("time (s)")
    ax.set_title(f"Step timeline of rank {rank} by stream")
    fig.tight_layout()
    return fig


def communication_volume(doc):
    """Bytes each GPU sends per step, by collective."""
    volume = {k: v for k, v in doc["communication"]["bytes_per_gpu"].items() if k not in ("total", "cross_host")}
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.bar(list(volume), [v / GIB for v in volume.values()], color="#ee854a")
    ax.set_ylabel("GiB per GPU per step")
    ax.set_title("Communication volume by collective")
    fig.tight_layout()
    return fig


def seconds(text):
    """A duration as the resolved scenario writes it ("2s", "50ms", "800us", or a bare number of
    seconds) in seconds; None when it is not one."""
    if isinstance(text, (int, float)):
        return float(text)
    for suffix, factor in (("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9), ("min", 60.0), ("s", 1.0)):
        if isinstance(text, str) and text.endswith(suffix):
            try:
                return float(text[:-len(suffix)]) * factor
            except ValueError:
                return None
    return None


def _duration(s):
    """A duration for a legend: "1.23 s", "45.6 ms", "789 us"."""
    for unit, factor in (("s", 1.0), ("ms", 1e-3)):
        if abs(s) >= factor:
            return f"{s / factor:.3g} {unit}"
    return f"{s / 1e-6:.3g} us"


def latency_cdfs(rows, doc=None):
    """Cumulative distributions of TTFT, TPOT and end-to-end latency over completed requests; with
    the result document, its p50 and p99 as dotted lines and the scenario's SLO limits (inference.slo)
    as red dashed ones."""
    done = [r for r in rows if r["finish_s"] is not None and r["finish_s"] >= 0]
    ttft = sorted(r["ttft_s"] for r in done)
    e2e = sorted(r["e2e_s"] for r in done)
    tpot = sorted((r["finish_s"] - r["first_token_s"]) / (r["output_tokens"] - 1) for r in done if r["output_tokens"] > 1)
    latency = (doc or {}).get("latency_s", {})
    slo = ((doc or {}).get("input", {}).get("inference") or {}).get("slo") or {}
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.5))
    for ax, values, name, key in zip(axes, (ttft, tpot, e2e), ("TTFT", "TPOT", "end-to-end"), ("ttft", "tpot", "e2e")):
        if values:
            ax.plot(values, [(i + 1) / len(values) for i in range(len(values))])
        for p, style in (("p50", ":"), ("p99", "-.")):
            at = (latency.get(key) or {}).get(p)
            if at is not None:
                ax.axvline(at, linestyle=style, color="grey", linewidth=1, label=f"{p} {_duration(at)}")
        limit = seconds(slo.get(f"{key}_p99"))
        if limit is not None:
            ax.axvline(limit, linestyle="--", color="#d62728", linewidth=1.2, label=f"SLO p99 {_duration(limit)}")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right")
        ax.set_xlabel(f"{name} (s)")
        ax.set_ylabel("fraction of requests")
        ax.set_title(f"{name} CDF")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def kv_occupancy(rows):
    """KV-cache occupancy of replica 0 over the run."""
    fig, ax = plt.subplots(figsize=(8, 3.2))
    ax.plot([r["time_s"] for r in rows], [100 * r["kv_utilization"] for r in rows], color="#6acc64")
    ax.set_ylim(0, 105)
    return _finish(fig, ax, "time (s)", "KV blocks in use (%)", "KV-cache occupancy (replica 0)")


def job_steps(doc):
    """Each job alone and together on the shared cluster (a `jobs:` scenario's result): a training
    job's step, a serving job's mean request latency."""
    jobs = doc["jobs"]
    names = list(jobs)

    def seconds(job):
        return job["step_s"] if job.get("workload", "training") == "training" else {k: (job["e2e_s"][k] or {}).get("mean", 0) for k in ("alone", "together")}

    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(names) + 2), 3.2))
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], [seconds(jobs[n])["alone"] for n in names], width=0.4, label="alone", color="#4878d0")
    ax.bar([i + 0.2 for i in x], [seconds(jobs[n])["together"] for n in names], width=0.4, label="together", color="#ee854a")
    for i, n in enumerate(names):
        ax.annotate(f"x{jobs[n]['slowdown']:.2f}", (i + 0.2, seconds(jobs[n])["together"]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(x))
    ax.set_xticklabels([f"{n}\n({'step' if jobs[n].get('workload', 'training') == 'training' else 'mean latency'})" for n in names])
    return _finish(fig, ax, "job", "seconds", "Each job alone and together on the shared cluster", legend=True)


def link_utilization(rows, shown=6):
    """Utilisation of the busiest link directions over the run (link_utilization.csv): each
    interval's bytes over its bandwidth x length, the `shown` directions that carried most."""
    by_link = {}
    for r in rows:
        by_link.setdefault((r["link"], r["direction"]), []).append(r)
    busiest = sorted(by_link, key=lambda k: -sum(r["bytes"] for r in by_link[k]))[:shown]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for link, direction in busiest:
        series = by_link[(link, direction)]
        ax.step([r["time_s"] for r in series], [100 * r["utilization"] for r in series], where="pre",
                label=f"{link} {direction}")
    ax.set_ylim(bottom=0)
    return _finish(fig, ax, "time (s)", "utilisation (%)", "Link utilisation (each interval's mean)", legend=True)


def tier_traffic(rows):
    """Host-tier traffic of replica 0 over the run: cumulative KV bytes swapped out and back in."""
    fig, ax = plt.subplots(figsize=(8, 3.2))
    times = [r["time_s"] for r in rows]
    ax.plot(times, [r["host_swap_out_bytes"] / GIB for r in rows], color="#d65f5f", label="to host (swap out)")
    ax.plot(times, [r["host_swap_in_bytes"] / GIB for r in rows], color="#956cb4", label="from host (swap in)")
    # Cached prefixes moving through the tiers (runs with prefix caching and tiers).
    for column, colour, label in (("prefix_to_host_bytes", "#4878d0", "prefixes to host"),
                                  ("prefix_from_host_bytes", "#6acc64", "prefixes from host"),
                                  ("prefix_from_nvme_bytes", "#ee854a", "prefixes from NVMe")):
        if rows and column in rows[0] and any(r[column] > 0 for r in rows):
            ax.plot(times, [r[column] / GIB for r in rows], color=colour, label=label)
    ax.set_ylim(bottom=0)
    return _finish(fig, ax, "time (s)", "cumulative GiB", "KV traffic between GPU and host memory (replica 0)", legend=True)


def preemptions(rows, bins=40):
    """Preemptions of the requests arriving in each interval of the run, by how they were preempted:
    recomputed (blocks freed, prefilled again) or swapped to host memory."""
    arrivals = [r["arrival_s"] for r in rows]
    end = max(arrivals) if arrivals else 1.0
    width = end / bins or 1.0
    preempted, swapped = [0] * bins, [0] * bins
    for r in rows:
        b = min(int(r["arrival_s"] / width), bins - 1)
        preempted[b] += r.get("preemptions") or 0
        swapped[b] += r.get("swaps") or 0
    fig, ax = plt.subplots(figsize=(8, 3.2))
    starts = [i * width for i in range(bins)]
    ax.bar(starts, preempted, width=width, align="edge", color="#d65f5f", label="recompute")
    ax.bar(starts, swapped, width=width, align="edge", bottom=preempted, color="#956cb4", label="swap to host")
    ax.set_ylim(0, 1.1 * max([1] + [p + w for p, w in zip(preempted, swapped)]))
    return _finish(fig, ax, "arrival time (s)", "preemptions",
                   f"Preemptions by arrival time (recompute {sum(preempted)}, swap {sum(swapped)})", legend=True)


def load_curve(samples):
    """Throughput and p99 latencies against offered request rate.

    samples: dicts with offered (req/s), throughput (req/s), ttft_p99 (s), tpot_p99 (s), ok
    (whether the point met its requirements; hollow markers when not) and optionally series (the
    sweep's other values: one line each, never one line zig-zagging between them)."""
    samples = sorted((s for s in samples if s.get("offered") is not None), key=lambda s: s["offered"])
    series = {}
    for s in samples:
        series.setdefault(s.get("series") or "", []).append(s)
    x_all = [s["offered"] for s in samples]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    panels = (("throughput", "served (req/s)", 1, "#4878d0"), ("ttft_p99", "p99 TTFT (ms)", 1e3, "#ee854a"),
              ("tpot_p99", "p99 TPOT (ms)", 1e3, "#6acc64"))
    for ax, (key, label, scale, colour) in zip(axes, panels):
        for index, (name, members) in enumerate(sorted(series.items())):
            # One colour a panel with a single series, as before; a colour a series otherwise.
            c = colour if len(series) == 1 else f"C{index}"
            x = [s["offered"] for s in members]
            y = [s[key] * scale if s.get(key) is not None else float("nan") for s in members]
            ax.plot(x, y, "-", color=c, label=name or None)
            for xi, yi, s in zip(x, y, members):
                ax.plot([xi], [yi], "o", color=c, markerfacecolor=c if s.get("ok", True) else "white")
        if key == "throughput" and x_all:
            ax.plot([0, max(x_all)], [0, max(x_all)], ":", color="grey", label="served = offered")
        if key == "throughput" or len(series) > 1:
            ax.legend(fontsize=7)
        if key != "throughput":
            ax.set_yscale("log")
        ax.set_xlabel("offered load (req/s)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    fig.suptitle("Load curve (hollow: the load is unsustainable or misses the requirements)")
    fig.tight_layout()
    return fig


def load_samples_from_sweep(points):
    """load_curve samples from a sweep whose results are serving runs."""
    samples = []
    for p in points:
        result = p.get("result") or {}
        offered = _lookup(result, "load.offered_requests_per_s")
        if offered is None:
            continue
        others = [o for o in p.get("overrides", []) if not o.startswith("inference.workload.rate=")]
        samples.append({"offered": offered, "throughput": _lookup(result, "throughput.requests_per_s"),
                        "ttft_p99": _lookup(result, "latency_s.ttft.p99"), "tpot_p99": _lookup(result, "latency_s.tpot.p99"),
                        "ok": bool(result.get("load", {}).get("sustainable", True)), "series": ", ".join(others)})
    return samples


def load_samples_from_plan(plan):
    """load_curve samples from the rate probes of `memtwin plan --max-rate --json`."""
    return [{"offered": p["rate_per_s"], "throughput": p.get("throughput_requests_per_s"), "ttft_p99": p.get("ttft_p99_s"),
             "tpot_p99": p.get("tpot_p99_s"), "ok": p["ok"]} for p in plan.get("max_rate", {}).get("probes", [])]


def sweep_lines(points, metric):
    """A metric over the first swept key, one line per value of the others; infeasible points hollow."""
    series = {}
    for p in points:
        result = p.get("result")
        value = _lookup(result, metric) if result else None
        if value is None:
            continue
        keys = [o.split("=", 1) for o in p["overrides"]]
        # The swept value in base units where it has one ("5/s" is 5 per second), so that values
        # sort as numbers.
        x = p.get("values", {}).get(keys[0][0], load.cell_value(keys[0][1]))
        label = ", ".join(f"{k}={v}" for k, v in keys[1:]) or metric
        # Hollow where the point is not a usable answer: out of memory, or a serving load that grows
        # without bound.
        fits = result.get("memory", {}).get("fits", True) and result.get("load", {}).get("sustainable", True)
        series.setdefault(label, []).append((x, value, fits))
    scale, unit = (GIB, " (GiB)") if metric.endswith("_bytes") else (1, "")
    series = {k: [(x, y / scale, f) for x, y, f in v] for k, v in series.items()}
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, values in sorted(series.items()):
        values.sort(key=lambda t: t[0])
        line = ax.plot([v[0] for v in values], [v[1] for v in values], "-", label=label)[0]
        for x, y, fits in values:
            ax.plot([x], [y], "o", color=line.get_color(), markerfacecolor=line.get_color() if fits else "white")
    first_key = points[0]["overrides"][0].split("=", 1)[0] if points else ""
    ax.set_xlabel(first_key)
    ax.set_ylabel(metric + unit)
    ax.set_title(f"{metric} over the sweep (hollow: does not fit, or unsustainable)")
    if len(series) > 1:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


# What `memtwin validate` holds each kind of metric to (the [validation] test's limits).
TOLERANCE_PCT = {"memory": 10, "time": 25, "latency_s": 25}


def validation_errors(validation, measured=None):
    """The prediction's error per metric (bars), with the tolerance of its kind shaded; where the
    measurement has repeated samples (a training step's), the error against each sample spans the
    error bar."""
    rows = [m for m in validation["metrics"] if m.get("error_pct") is not None]
    names = [m["metric"] for m in rows]
    errors = [m["error_pct"] for m in rows]
    low, high = [0.0] * len(rows), [0.0] * len(rows)
    samples = (_lookup(measured, "time.step_samples_s") or []) if measured else []
    for i, m in enumerate(rows):
        if m["metric"] == "time.step_s" and samples:
            spread = [(m["predicted"] - s) / s * 100 for s in samples]
            low[i], high[i] = max(0.0, m["error_pct"] - min(spread)), max(0.0, max(spread) - m["error_pct"])
    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.45 * len(rows)))
    colours = ["#d65f5f" if abs(e) > TOLERANCE_PCT.get(n.split(".")[0], 25) else "#4878d0" for n, e in zip(names, errors)]
    spread = [low, high] if any(low) or any(high) else None
    ax.barh(range(len(rows)), errors, xerr=spread, color=colours, capsize=3)
    for i, n in enumerate(names):
        limit = TOLERANCE_PCT.get(n.split(".")[0])
        if limit:
            ax.fill_betweenx([i - 0.45, i + 0.45], -limit, limit, color="#6acc64", alpha=0.15, linewidth=0)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()
    return _finish(fig, ax, "error of the prediction (% of the measurement)", "",
                   f"Predicted against measured: {validation.get('scenario')} ({validation.get('device')})")


def memory_timeline_compare(predicted_rows, measured_rows, capacity_bytes):
    """Device memory over the step, simulated and measured, on one time axis."""
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for rows, name, colour in ((predicted_rows, "predicted (sim)", "#4878d0"), (measured_rows, "measured (hw)", "#d65f5f")):
        if rows:
            ax.step([r["time_s"] for r in rows], [r["bytes_in_use"] / GIB for r in rows], where="post", color=colour, label=name)
    ax.axhline(capacity_bytes / GIB, color="black", linestyle="--", label="capacity")
    return _finish(fig, ax, "time in step (s)", "GiB in use", "Device memory over the step (rank 0)", legend=True)


def latency_cdf_compare(predicted_rows, measured_rows):
    """TTFT and TPOT distributions, simulated and measured."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for rows, name, colour in ((predicted_rows, "predicted (sim)", "#4878d0"), (measured_rows, "measured (hw)", "#d65f5f")):
        done = [r for r in rows if r["finish_s"] is not None and r["finish_s"] >= 0]
        ttft = sorted(r["ttft_s"] for r in done)
        tpot = sorted((r["finish_s"] - r["first_token_s"]) / (r["output_tokens"] - 1) for r in done if r["output_tokens"] > 1)
        for ax, values in zip(axes, (ttft, tpot)):
            if values:
                ax.plot(values, [(i + 1) / len(values) for i in range(len(values))], color=colour, label=name)
    for ax, metric in zip(axes, ("TTFT", "TPOT")):
        ax.set_xlabel(f"{metric} (s)")
        ax.set_ylabel("fraction of requests")
        ax.set_title(f"{metric} CDF")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def pareto_front(points):
    """Indices of the points no other point beats in both coordinates (lower is better in each),
    ordered by the first coordinate."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front, best = [], float("inf")
    for i in order:
        if points[i][1] < best:
            front.append(i)
            best = points[i][1]
    return front


def quality_pareto(doc):
    """A `memtwin quality` document: each method's KL divergence from the fp16 cache against its KV
    bytes per token and against its time per output token, the Pareto frontier of each joined
    (fewer bytes or less time and less divergence is better)."""
    methods = doc["quality"]["methods"]
    labels = [f"{m['method']} {m['variant']}" for m in methods]
    kl = [max(m["kl"], 0.0) for m in methods]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    for ax, key, scale, xlabel in ((axes[0], "kv_bytes_per_token", 1 / 1024, "KV cache, KiB per token"),
                                   (axes[1], "tpot_s", 1e3, "time per output token, ms (measured)")):
        xs = [m[key] * scale for m in methods]
        front = pareto_front(list(zip(xs, kl)))
        for i, (x, y) in enumerate(zip(xs, kl)):
            ax.scatter([x], [y], color="tab:blue" if i in front else "tab:gray", zorder=3)
            ax.annotate(labels[i], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.plot([xs[i] for i in front], [kl[i] for i in front], color="tab:blue", drawstyle="steps-post", label="Pareto frontier")
        ax.set_yscale("symlog", linthresh=1e-4)
        _finish(fig, ax, xlabel, "KL divergence from fp16, nats", "", legend=True)
    model = doc.get("model", {}).get("name", "")
    fig.suptitle(f"{model}: quality against memory and time")
    fig.tight_layout()
    return fig


def _lookup(doc, path):
    node = doc
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, (int, float)) and not isinstance(node, bool) else None
