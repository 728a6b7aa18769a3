"""memtwin_analysis as a package: pip installs it, and its DataFrames hold what memtwin wrote."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

SOURCE = pathlib.Path(os.environ["MEMTWIN_SOURCE_DIR"])
BINARY = os.environ["MEMTWIN_BINARY"]
SERVING = SOURCE / "scenarios" / "serving" / "llama3-8b-h100-fp16-kv.yaml"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The package pip-installed into a directory of its own (no network: dependencies not fetched),
    imported from there and not from the source tree."""
    target = tmp_path_factory.mktemp("site")
    # A copy to build from: setuptools writes build/ and *.egg-info beside the project.
    project = tmp_path_factory.mktemp("project") / "analysis"
    shutil.copytree(SOURCE / "analysis", project, ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--no-index", "--target", str(target), str(project)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    sys.path.insert(0, str(target))
    for name in [m for m in sys.modules if m == "memtwin_analysis" or m.startswith("memtwin_analysis.")]:
        del sys.modules[name]  # another test imported the source tree's copy
    import memtwin_analysis.frames as frames
    assert pathlib.Path(frames.__file__).is_relative_to(target)
    return frames


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    subprocess.run([BINARY, "run", str(SERVING), "--set", "inference.workload.requests=80", "--out", str(out)],
                   check=True, capture_output=True)
    return out


def test_tables_keep_numbers_as_numbers(installed, run_dir):
    requests = installed.table(run_dir / "requests.csv")
    assert len(requests) == 80
    assert requests["ttft_s"].dtype.kind == "f" and requests["prompt_tokens"].dtype.kind == "i"
    result = json.loads((run_dir / "result.json").read_text())
    assert requests["ttft_s"].quantile(0.5, interpolation="lower") == pytest.approx(result["latency_s"]["ttft"]["p50"], rel=0.05)


def test_results_flatten_to_dotted_columns(installed, run_dir, tmp_path):
    other = tmp_path / "int4.json"
    other.write_text(subprocess.run([BINARY, "run", str(SERVING), "--json", "--set", "inference.workload.requests=80",
                                     "--set", "inference.kv_cache.compression.method=int4"],
                                    check=True, capture_output=True, text=True).stdout)
    frame = installed.results([run_dir / "result.json", other])
    assert list(frame["kv_cache.method"]) == ["none", "int4"]
    assert frame.loc[1, "kv_cache.bytes_per_token"] < frame.loc[0, "kv_cache.bytes_per_token"]
    assert "input" not in " ".join(frame.columns)


def test_sweep_points_with_swept_values_in_base_units(installed, tmp_path):
    out = tmp_path / "sweep"
    subprocess.run([BINARY, "sweep", str(SERVING), "--grid", "inference.workload.rate=5/s,10/s,oops",
                    "--set", "inference.workload.requests=40", "--out", str(out)], check=True, capture_output=True)
    frame = installed.sweep(out)
    assert list(frame["point"]) == [0, 1, 2]
    assert list(frame["status"]) == ["ok", "ok", "invalid"]
    assert list(frame["inference.workload.rate"][:2]) == [5, 10]
    assert frame.loc[1, "throughput.requests_per_s"] > frame.loc[0, "throughput.requests_per_s"]


def test_trace_events(installed, run_dir):
    events = installed.trace_events(run_dir / "trace.json")
    assert len(events) > 0 and (events["duration_s"] >= 0).all()
