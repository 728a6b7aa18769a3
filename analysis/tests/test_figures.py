"""The report's figures draw what their data holds: one line per series, percentile and SLO lines,
hollow markers for unusable points."""
import os
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(os.environ["MEMTWIN_SOURCE_DIR"]) / "analysis"))
from memtwin_analysis import figures  # noqa: E402


def test_load_curve_draws_one_line_per_series():
    samples = [{"offered": r, "throughput": r * 0.9, "ttft_p99": 0.1 * r, "tpot_p99": 0.01, "ok": r < 30, "series": method}
               for method in ("method=none", "method=int4") for r in (10, 20, 40)]
    fig = figures.load_curve(samples)
    throughput = fig.axes[0]
    # Per series one line through its points (3 points each), not one line through all six.
    lines = [l for l in throughput.get_lines() if len(l.get_xdata()) == 3]
    assert len(lines) == 2
    assert all(list(l.get_xdata()) == [10, 20, 40] for l in lines)
    assert {t.get_text() for t in throughput.get_legend().get_texts()} >= {"method=none", "method=int4"}


def test_latency_cdfs_mark_percentiles_and_the_slo():
    rows = [{"finish_s": 2.0 + i, "first_token_s": 0.1 * i, "ttft_s": 0.1 * i, "e2e_s": 2.0 + i, "output_tokens": 10}
            for i in range(1, 21)]
    doc = {"latency_s": {"ttft": {"p50": 1.0, "p99": 2.0}, "tpot": {"p50": 0.2, "p99": 0.25}, "e2e": {"p50": 12, "p99": 22}},
           "input": {"inference": {"slo": {"ttft_p99": "1500ms", "tpot_p99": "50ms"}}}}
    fig = figures.latency_cdfs(rows, doc)
    ttft, tpot, e2e = fig.axes
    vertical = lambda ax: sorted(l.get_xdata()[0] for l in ax.get_lines() if len(set(l.get_xdata())) == 1)  # noqa: E731
    assert vertical(ttft) == [1.0, 1.5, 2.0]     # p50, the SLO's limit, p99
    assert vertical(tpot) == [0.05, 0.2, 0.25]
    assert vertical(e2e) == [12, 22]             # no e2e limit in this SLO
    assert figures.seconds("800us") == pytest.approx(800e-6) and figures.seconds("2s") == 2.0
    assert figures.seconds("x") is None


def test_sweep_marks_unsustainable_points_hollow():
    points = [{"overrides": [f"inference.workload.rate={r}/s"], "values": {"inference.workload.rate": r},
               "result": {"latency_s": {"ttft": {"p99": 0.1 * r}}, "memory": {"fits": True},
                          "load": {"sustainable": r < 30}}} for r in (10, 20, 40)]
    fig = figures.sweep_lines(points, "latency_s.ttft.p99")
    markers = [l for l in fig.axes[0].get_lines() if len(l.get_xdata()) == 1]
    hollow = [l.get_xdata()[0] for l in markers if l.get_markerfacecolor() == "white"]
    assert hollow == [40]


def test_memory_timeline_says_why_the_summary_peak_is_higher():
    rows = [{"time_s": 0.0, "bytes_in_use": 10 * figures.GIB}, {"time_s": 1.0, "bytes_in_use": 60 * figures.GIB}]
    doc = {"memory": {"gpu": {"peak_bytes": 64 * figures.GIB, "breakdown_bytes": {"fragmentation": 4 * figures.GIB}}}}
    fig = figures.memory_timeline(rows, 80 * figures.GIB, doc)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "summary's peak 64.0 GiB (+4.0 GiB fragmentation)" in labels
    assert "peak 60.0 GiB" in labels


def test_quality_pareto_joins_the_methods_nothing_beats():
    # Lower is better in both coordinates: (3, 3) is beaten by (2, 2); (1, 5) and (4, 1) are not.
    assert figures.pareto_front([(2, 2), (3, 3), (1, 5), (4, 1)]) == [2, 0, 3]
    import json
    with open(pathlib.Path(os.environ["MEMTWIN_SOURCE_DIR"]) / "data/quality/smollm2-135m.json") as f:
        doc = json.load(f)
    fig = figures.quality_pareto(doc)
    memory = fig.axes[0]
    frontier = next(l for l in memory.get_lines() if l.get_label() == "Pareto frontier")
    on_front = {round(x, 3) for x in frontier.get_xdata()}
    bytes_of = {f"{m['method']} {m['variant']}": round(m["kv_bytes_per_token"] / 1024, 3) for m in doc["quality"]["methods"]}
    # The fp16 cache (nothing lost), int8 and KIVI-4 are on it; fp8 (more bytes than int8, more
    # divergence) and int2 (more divergence than cheaper evictions) are not.
    assert {bytes_of["none fp16"], bytes_of["int8 groups of 32 channels"], bytes_of["kivi 4 bits, residual 32"]} <= on_front
    assert bytes_of["none fp8 (e4m3, scale 1)"] not in on_front
    assert bytes_of["int2 groups of 32 channels"] not in on_front


def test_job_steps_draws_a_training_step_and_a_serving_latency_alone_and_together():
    doc = {"jobs": {
        "train": {"workload": "training", "step_s": {"alone": 1.8, "together": 2.0}, "slowdown": 2.0 / 1.8},
        "serve": {"workload": "inference", "slowdown": 1.2,
                  "e2e_s": {"alone": {"mean": 2.5, "p50": 2.4, "p90": 3, "p99": 4},
                            "together": {"mean": 3.0, "p50": 2.9, "p90": 3.5, "p99": 5}}}}}
    ax = figures.job_steps(doc).axes[0]
    heights = sorted(round(p.get_height(), 6) for p in ax.patches)
    assert heights == [1.8, 2.0, 2.5, 3.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["train\n(step)", "serve\n(mean latency)"]
    assert {t.get_text() for t in ax.texts} == {"x1.11", "x1.20"}
