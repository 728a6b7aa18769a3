"""Readers for memtwin's output files. Each returns plain Python data (lists and dicts)."""
import csv
import json
import os


def result(path):
    """A memtwin.result/1 document (result.json, or a `memtwin run --json` capture), or a
    memtwin.plan/1 document (a `memtwin plan --json` capture)."""
    with open(path) as f:
        doc = json.load(f)
    if doc.get("schema") not in ("memtwin.result/1", "memtwin.plan/1"):
        raise ValueError(f"{path}: not a memtwin result or plan (schema {doc.get('schema')!r})")
    return doc


def quality(path):
    """A memtwin.quality/2 document (a `memtwin quality --json` capture), else None."""
    with open(path) as f:
        try:
            doc = json.load(f)
        except ValueError:
            return None
    return doc if isinstance(doc, dict) and doc.get("schema") == "memtwin.quality/2" else None


def validation(path):
    """A memtwin.validation/1 document (validation.json, or a `memtwin validate --json` capture)."""
    with open(path) as f:
        doc = json.load(f)
    if doc.get("schema") != "memtwin.validation/1":
        raise ValueError(f"{path}: not a memtwin validation (schema {doc.get('schema')!r})")
    return doc


def table(path):
    """A CSV file as a list of dicts with numbers converted where they parse."""
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            rows.append({k: cell_value(v) for k, v in row.items()})
    return rows


def trace_events(path):
    """Complete events ("ph": "X") of a Perfetto/Chrome trace."""
    with open(path) as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def sweep(directory):
    """The points of a sweep directory (points.jsonl), complete lines only."""
    points = []
    with open(os.path.join(directory, "points.jsonl")) as f:
        for line in f:
            try:
                points.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line cut short by a kill
    return points


def cell_value(text):
    """A CSV cell or override value as int, float or bool where it parses; None when empty; else the text."""
    if text is None or text == "":
        return None
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text, text)
