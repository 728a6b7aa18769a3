"""The Python module `memtwin` against the command line it shares its library with."""
import json
import os
import pathlib
import subprocess

import pytest

import memtwin

SOURCE = pathlib.Path(os.environ["MEMTWIN_SOURCE_DIR"])
BINARY = os.environ["MEMTWIN_BINARY"]
QUICKSTART = SOURCE / "scenarios" / "quickstart.yaml"
SERVING = SOURCE / "scenarios" / "serving" / "llama3-8b-h100-fp16-kv.yaml"


def cli(*args):
    done = subprocess.run([BINARY, *args], capture_output=True, text=True, check=False)
    assert done.returncode in (0, 3), done.stderr
    return json.loads(done.stdout)


def test_run_is_the_command_lines_document():
    for scenario, backend, extra in [(QUICKSTART, "sim", []), (QUICKSTART, "analytic", []),
                                     (SERVING, "sim", ["inference.workload.requests=60"])]:
        got = memtwin.run(scenario, set=extra, backend=backend)
        args = ["run", str(scenario), "--backend", backend, "--json"] + [a for o in extra for a in ("--set", o)]
        assert got == cli(*args)
        assert got["schema"] == memtwin.RESULT_SCHEMA


def test_several_simulations_in_one_python_process():
    # SimGrid runs one simulation per process: each run forks, so a notebook can run many.
    steps = [memtwin.run(QUICKSTART, set=[f"training.micro_batch={m}"])["time"]["step_s"] for m in (1, 2)]
    expected = [cli("run", str(QUICKSTART), "--set", f"training.micro_batch={m}", "--json")["time"]["step_s"] for m in (1, 2)]
    assert steps == expected
    assert steps[0] != steps[1]


def test_a_dict_is_a_scenario():
    resolved = memtwin.check(QUICKSTART)
    assert resolved["training"]["micro_batch"] == 1
    as_dict = json.loads(json.dumps(resolved))
    assert memtwin.run(as_dict, backend="analytic")["memory"] == memtwin.run(QUICKSTART, backend="analytic")["memory"]


def test_does_not_fit_is_a_result():
    result = memtwin.run(QUICKSTART, set=["cluster.gpu.memory=8GiB"], backend="analytic")
    assert result["memory"]["fits"] is False


def test_bad_input_raises_value_error_with_file_line_and_key():
    with pytest.raises(ValueError, match=r"typo.yaml:9:3: error: training.micro_bach"):
        memtwin.check(SOURCE / "docs" / "examples" / "typo.yaml")
    with pytest.raises(ValueError, match=r"training.parallelism.tensor"):
        memtwin.run(QUICKSTART, set=["training.parallelism.tensor=3"])
    with pytest.raises(ValueError, match="backend 'hw'"):
        memtwin.run(QUICKSTART, backend="hw")
