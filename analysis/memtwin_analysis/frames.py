"""memtwin's output files as pandas DataFrames (pip install './analysis[frames]' for pandas).

Numbers stay numbers in base units, the unit in the column name as memtwin writes it
(`memory.gpu.peak_bytes`, `latency_s.ttft.p99`); nested result sections become dotted columns.
"""
import os

from . import load


def _pandas():
    try:
        import pandas
    except ImportError as e:  # the readers in load.py need no pandas; these do
        raise ImportError("memtwin_analysis.frames needs pandas: pip install './analysis[frames]' "
                          "(or Debian's python3-pandas)") from e
    return pandas


def _flat(doc, prefix=""):
    """A result's numbers, booleans and strings as dotted keys; lists and the resolved input left out."""
    out = {}
    for key, value in doc.items():
        if not prefix and key == "input":
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, name + "."))
        elif not isinstance(value, list):
            out[name] = value
    return out


def table(path):
    """A CSV memtwin writes (requests.csv, kv_timeline.csv, memory timelines, points.csv) as a
    DataFrame, numbers parsed as numbers."""
    return _pandas().read_csv(path)


def results(paths):
    """One row per result document (result.json or a `run --json` capture), its metrics flattened
    to dotted columns, with the file under `path`."""
    pandas = _pandas()
    rows = []
    for path in paths:
        row = {"path": os.fspath(path)}
        row.update(_flat(load.result(path)))
        rows.append(row)
    return pandas.DataFrame(rows)


def sweep(directory):
    """One row per point of a sweep directory (points.jsonl): `point`, `status`, each swept key with
    its value in base units, then the point's result flattened (none for invalid points)."""
    pandas = _pandas()
    rows = []
    for p in load.sweep(directory):
        row = {"point": p.get("point"), "status": p.get("status")}
        row.update(p.get("values", {}))
        if isinstance(p.get("result"), dict):
            row.update(_flat(p["result"]))
        if p.get("error"):
            row["error"] = p["error"]
        rows.append(row)
    return pandas.DataFrame(rows).sort_values("point", kind="stable").reset_index(drop=True)


def trace_events(path):
    """A Perfetto/Chrome trace's complete events: name, category, rank (pid), stream (tid), start
    and duration in seconds."""
    pandas = _pandas()
    events = load.trace_events(path)
    return pandas.DataFrame({
        "name": [e.get("name") for e in events],
        "category": [e.get("cat") for e in events],
        "rank": [e.get("pid") for e in events],
        "stream": [e.get("tid") for e in events],
        "start_s": [e.get("ts", 0) / 1e6 for e in events],
        "duration_s": [e.get("dur", 0) / 1e6 for e in events],
    })
