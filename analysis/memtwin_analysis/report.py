"""One self-contained HTML report (images embedded) for a run directory, a result file, a sweep, a plan,
a validation (predicted against measured) or a KV-quality measurement (`memtwin quality --json`)."""
import base64
import html
import io
import os

import matplotlib.pyplot as plt

from . import figures, load


def _png(fig):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


def _validation_figures(path):
    """Figures of a `memtwin validate --out DIR` directory or its validation.json."""
    directory = path if os.path.isdir(path) else os.path.dirname(path)
    doc = load.validation(os.path.join(path, "validation.json") if os.path.isdir(path) else path)
    side = lambda which, name: os.path.join(directory, which, name)  # noqa: E731
    measured = load.result(side("measured", "result.json")) if os.path.exists(side("measured", "result.json")) else None
    shown = [("validation", "Error of the prediction per metric (shaded: the tolerance of its kind)",
              _png(figures.validation_errors(doc, measured)))]
    if os.path.exists(side("predicted", "timeline.csv")) and os.path.exists(side("measured", "timeline.csv")):
        capacity = load.result(side("predicted", "result.json"))["memory"]["gpu"]["capacity_bytes"]
        shown.append(("memory-timeline-compare", "Device memory over the step, simulated and measured", _png(
            figures.memory_timeline_compare(load.table(side("predicted", "timeline.csv")),
                                            load.table(side("measured", "timeline.csv")), capacity))))
    if os.path.exists(side("predicted", "requests.csv")) and os.path.exists(side("measured", "requests.csv")):
        shown.append(("latency-cdf-compare", "Latency distributions, simulated and measured", _png(
            figures.latency_cdf_compare(load.table(side("predicted", "requests.csv")),
                                        load.table(side("measured", "requests.csv"))))))
    metrics = {f"{m['metric']} error %": m["error_pct"] for m in doc["metrics"]}
    metrics = {"plan": doc.get("plan_hash"), "ranks": doc.get("ranks"), **metrics}
    return f"Validation of {doc.get('scenario')} on {doc.get('device')}", metrics, shown


def _figures_for(path):
    """(title, key metrics, [(id, caption, png bytes)]) for the input."""
    if (os.path.isdir(path) and os.path.exists(os.path.join(path, "validation.json"))) or \
            (os.path.isfile(path) and os.path.basename(path) == "validation.json"):
        return _validation_figures(path)
    if os.path.isdir(path) and os.path.exists(os.path.join(path, "points.jsonl")):
        points = load.sweep(path)
        metric = next((m for m in ("time.step_s", "latency_s.ttft.p99", "memory.gpu.peak_bytes")
                       if any(figures._lookup(p.get("result") or {}, m) is not None for p in points)), None)
        shown = [("sweep", f"{metric} over the swept parameters", _png(figures.sweep_lines(points, metric)))] if metric else []
        # A sweep over request rate is a load curve.
        if points and any(o.startswith("inference.workload.rate=") for o in points[0]["overrides"]):
            samples = figures.load_samples_from_sweep(points)
            if samples:
                shown.append(("load-curve", "Throughput and p99 latency against offered load", _png(figures.load_curve(samples))))
        ok = sum(1 for p in points if p.get("status") == "ok")
        return "Sweep", {"points": len(points), "fit": ok, "metric": metric}, shown
    quality = load.quality(path) if os.path.isfile(path) else None
    if quality:
        ref = quality["reference"]
        shown = [("quality-pareto", "KL divergence from the fp16 cache against KV bytes per token and time per output token; "
                  "blue: the Pareto frontier", _png(figures.quality_pareto(quality)))]
        return (f"KV methods' quality on {quality['model']['name']}",
                {"reference perplexity": ref["perplexity"], "probes answered (reference)": ref["retrieval"],
                 "scored tokens": quality["texts"]["positions"], "methods": len(quality["quality"]["methods"])}, shown)
    directory, result_file = (path, os.path.join(path, "result.json")) if os.path.isdir(path) else (os.path.dirname(path), path)
    doc = load.result(result_file)
    if doc.get("schema") == "memtwin.plan/1":
        samples = figures.load_samples_from_plan(doc)
        shown = [("load-curve", "The best configuration's throughput and p99 latency against offered load",
                  _png(figures.load_curve(samples)))] if samples else []
        rates = doc.get("max_rate") or {}
        metrics = {"winner": ", ".join((doc.get("winner") or {}).get("overrides") or []) or "none",
                   doc.get("minimize", "objective"): (doc.get("winner") or {}).get("objective"),
                   "highest sustained req/s": rates.get("sustained_per_s")}
        return "Plan", metrics, shown
    beside = lambda name: os.path.join(directory, name)  # noqa: E731
    shown = []
    if doc.get("workload") == "jobs":
        shown.append(("job-steps", "Each job alone and together: a training job's step, a serving job's mean request "
                      "latency (the label: together / alone)", _png(figures.job_steps(doc))))
        metrics = {f"{name} slowdown": job["slowdown"] for name, job in doc["jobs"].items()}
        link_rows = load.table(beside("link_utilization.csv")) if os.path.exists(beside("link_utilization.csv")) else []
        if link_rows:
            shown.append(("link-utilization", "Utilisation of the links that carried most while the jobs ran together",
                          _png(figures.link_utilization(link_rows))))
    elif doc.get("workload") == "training":
        shown.append(("memory-breakdown", "Per-GPU memory by category", _png(figures.memory_breakdown(doc))))
        if os.path.exists(beside("timeline.csv")):
            rows = load.table(beside("timeline.csv"))
            shown.append(("memory-timeline", "Device memory over the step (the tensors; the summary's peak adds the "
                          "allocator's fragmentation)", _png(figures.memory_timeline(rows, doc["memory"]["gpu"]["capacity_bytes"], doc))))
        if os.path.exists(beside("trace.json")):
            shown.append(("step-timeline", "Ops per stream (rank 0)", _png(figures.step_timeline(load.trace_events(beside("trace.json"))))))
        if "communication" in doc:
            shown.append(("communication", "Communication per GPU per step", _png(figures.communication_volume(doc))))
        metrics = {"step_s": doc.get("time", {}).get("step_s"), "mfu": doc.get("time", {}).get("mfu"),
                   "peak GiB": doc["memory"]["gpu"]["peak_bytes"] / figures.GIB, "fits": doc["memory"]["gpu"]["fits"]}
    else:
        shown.append(("memory-breakdown", "Per-GPU memory by category", _png(figures.memory_breakdown(doc))))
        requests = load.table(beside("requests.csv")) if os.path.exists(beside("requests.csv")) else []
        if requests:
            shown.append(("latency-cdf", "Latency distributions (dotted p50, dash-dot p99, red dashed the SLO's p99 limit)",
                          _png(figures.latency_cdfs(requests, doc))))
        if os.path.exists(beside("kv_timeline.csv")):
            kv_rows = load.table(beside("kv_timeline.csv"))
            shown.append(("kv-occupancy", "KV-cache occupancy", _png(figures.kv_occupancy(kv_rows))))
            # Panels only where there is something to show: no traffic, no tier panel.
            traffic = [c for c in (kv_rows[0] if kv_rows else {}) if c.endswith("_bytes") and "tier" not in c]
            if any((r.get(c) or 0) > 0 for r in kv_rows for c in traffic):
                shown.append(("tier-traffic", "KV traffic to and from host memory", _png(figures.tier_traffic(kv_rows))))
        if os.path.exists(beside("link_utilization.csv")):
            link_rows = load.table(beside("link_utilization.csv"))
            if link_rows:
                shown.append(("link-utilization", "Utilisation of the links that carried most (KV transfers, collectives)",
                              _png(figures.link_utilization(link_rows))))
        if any((r.get("preemptions") or 0) + (r.get("swaps") or 0) > 0 for r in requests):
            shown.append(("preemptions", "Preemptions and swaps", _png(figures.preemptions(requests))))
        lat = doc.get("latency_s", {})
        metrics = {"p99 TTFT s": (lat.get("ttft") or {}).get("p99"), "p99 TPOT s": (lat.get("tpot") or {}).get("p99"),
                   "requests/s": doc.get("throughput", {}).get("requests_per_s"),
                   "KV capacity tokens": doc.get("kv_cache", {}).get("capacity_tokens")}
    return f"{doc.get('workload', '').capitalize()} scenario {doc.get('scenario')} ({doc.get('backend')})", metrics, shown


def _comparison_table(path):
    """The predicted / measured / error rows of a validation input, else None."""
    if os.path.isdir(path) and os.path.exists(os.path.join(path, "validation.json")):
        path = os.path.join(path, "validation.json")
    if not (os.path.isfile(path) and os.path.basename(path) == "validation.json"):
        return None
    rows = ["<h2>Predicted against measured</h2><table><tr><th>metric</th><th>predicted</th><th>measured</th><th>error</th></tr>"]
    for m in load.validation(path)["metrics"]:
        error = "" if m["error_pct"] is None else f"{m['error_pct']:+.1f}%"
        rows.append(f"<tr><td>{html.escape(m['metric'])}</td><td>{m['predicted']:.4g}</td><td>{m['measured']:.4g}</td>"
                    f"<td>{error}</td></tr>")
    rows.append("</table>")
    return "".join(rows)


def write_report(path, out, png_dir=None):
    title, metrics, shown = _figures_for(path)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
             "td{padding:2px 12px}figure{margin:1.5em 0}</style></head><body>",
             f"<h1>{html.escape(title)}</h1><table>"]
    for key, value in metrics.items():
        shown_value = f"{value:.4g}" if isinstance(value, float) else str(value)
        parts.append(f"<tr><td>{html.escape(key)}</td><td>{html.escape(shown_value)}</td></tr>")
    parts.append("</table>")
    comparison = _comparison_table(path)
    if comparison:
        parts.append(comparison)
    for figure_id, caption, png in shown:
        data = base64.b64encode(png).decode()
        parts.append(f"<figure id='{figure_id}'><img alt='{html.escape(caption)}' src='data:image/png;base64,{data}'>"
                     f"<figcaption>{html.escape(caption)}</figcaption></figure>")
        if png_dir:
            os.makedirs(png_dir, exist_ok=True)
            with open(os.path.join(png_dir, figure_id + ".png"), "wb") as f:
                f.write(png)
    parts.append("</body></html>")
    with open(out, "w") as f:
        f.write("\n".join(parts))
    return [figure_id for figure_id, _, _ in shown]
