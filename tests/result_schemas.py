#!/usr/bin/env python3
"""Every document memtwin writes matches its published JSON Schema (docs/schema/).

    tests/result_schemas.py MEMTWIN_BINARY SOURCE_DIR

Runs each backend on training and serving scenarios (runs that fit, and runs out of memory on the
simulator and on the host device), `memtwin validate` on both workloads and
`memtwin sweep` with points that fit, do not fit and are invalid, and `memtwin run --emit-plan` on
training and serving, then validates every result.json, validation.json, points.jsonl line and
emitted plan against docs/schema/result.schema.json, validation.schema.json,
sweep-point.schema.json, training-plan.schema.json and iteration-plan.schema.json (and that an
emitted Plan has its run's hash, an iteration plan the ops its run executed). The schemas are checked to refuse a broken
document too, so that the check can fail.
"""
import copy
import json
import os
import pathlib
import subprocess
import sys
import tempfile

from jsonschema import Draft202012Validator


def load_schema(source, name):
    schema = json.loads((source / "docs" / "schema" / name).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return schema


def run(binary, source, args, allowed=(0, 3)):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    done = subprocess.run([binary, *args], cwd=source, capture_output=True, text=True, timeout=600, env=env)
    if done.returncode not in allowed:
        raise SystemExit(f"memtwin {' '.join(args)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return done


def main():
    binary, source = sys.argv[1], pathlib.Path(sys.argv[2])
    result_schema = Draft202012Validator(load_schema(source, "result.schema.json"))
    validation_schema = Draft202012Validator(load_schema(source, "validation.schema.json"))
    point = load_schema(source, "sweep-point.schema.json")
    point["properties"]["result"] = {"type": "object"}  # each result is checked against its own schema below
    point_schema = Draft202012Validator(point)
    training_plan_schema = Draft202012Validator(load_schema(source, "training-plan.schema.json"))
    iteration_plan_schema = Draft202012Validator(load_schema(source, "iteration-plan.schema.json"))

    documents = []  # (what, schema, document)
    few = ["--set", "inference.workload.requests=24"]
    training_runs = {
        "training, analytic": ["run", "scenarios/quickstart.yaml", "--backend", "analytic", "--json"],
        "training, sim": ["run", "scenarios/quickstart.yaml", "--backend", "sim", "--json"],
        "jobs, sim": ["run", "scenarios/jobs/two-fsdp-jobs-shared-nodes.yaml", "--json"],
        "jobs, serving beside training, sim": ["run", "scenarios/jobs/serving-beside-training-across-spine.yaml", "--json"],
        "training, sim, out of memory": ["run", "scenarios/quickstart.yaml", "--backend", "sim", "--json",
                                         "--set", "training.micro_batch=4", "--set", "training.global_batch=32"],
        "serving, analytic": ["run", "scenarios/serving/llama3-8b-h100-kivi4-kv.yaml", "--backend", "analytic", "--json"],
        "serving, sim": ["run", "scenarios/serving/llama3-8b-h100-kivi4-kv.yaml", "--backend", "sim", "--json", *few],
        "serving, sim, three seeds": ["run", "scenarios/serving/llama3-8b-h100-fp16-kv.yaml", "--backend", "sim", "--json",
                                      "--seeds", "3", *few],
        "serving, sim, disaggregated": ["run", "scenarios/serving/llama3-8b-disagg-2p2d-h100.yaml", "--backend", "sim", "--json", *few],
        "serving, hw": ["run", "scenarios/host/serve-fp16-kv.yaml", "--backend", "hw", "--json", *few],
        "serving, hw, refused before running": ["run", "scenarios/host/serve-fp16-kv.yaml", "--backend", "hw", "--json", *few,
                                       "--set", "inference.kv_cache.memory=64MiB", "--set", "cluster.gpu.memory=160MiB"],
    }
    for what, args in training_runs.items():
        documents.append((what, result_schema, json.loads(run(binary, source, args).stdout)))
    with tempfile.TemporaryDirectory() as scratch:
        scratch = pathlib.Path(scratch)
        validations = {
            "training": ["scenarios/host/train-zero3-2ranks.yaml", "--steps", "1"],
            "training, out of memory": ["scenarios/host/train-zero3-2ranks.yaml", "--steps", "1",
                                        "--set", "cluster.gpu.memory=150MiB"],
            "serving": ["scenarios/host/serve-h2o-kv.yaml", *few],
        }
        for index, (what, args) in enumerate(validations.items()):
            out = scratch / f"validate{index}"
            run(binary, source, ["validate", *args, "--out", str(out)])
            documents.append((f"validate {what}: validation.json", validation_schema,
                              json.loads((out / "validation.json").read_text())))
            for side in ("predicted", "measured"):
                documents.append((f"validate {what}: {side}", result_schema,
                                  json.loads((out / side / "result.json").read_text())))
        sweep = scratch / "sweep"
        run(binary, source, ["sweep", "scenarios/quickstart.yaml", "--grid", "training.micro_batch=1,4,0",
                             "--set", "training.global_batch=32", "--out", str(sweep)], allowed=(0, 2, 3))
        statuses = set()
        for number, line in enumerate((sweep / "points.jsonl").read_text().splitlines(), 1):
            entry = json.loads(line)
            statuses.add(entry.get("status"))
            documents.append((f"sweep points.jsonl line {number}", point_schema, entry))
            if "result" in entry:
                documents.append((f"sweep point {entry['point']}: result", result_schema, entry["result"]))
        if statuses != {"ok", "does_not_fit", "invalid"}:
            raise SystemExit(f"the sweep was meant to hold a point that fits, one that does not and an invalid one; got {statuses}")

        # --emit-plan: the training Plan (its hash is the run's) and the serving iteration plan (its ops
        # are the ones the run names).
        for what, scenario, extra in [("quick-start", "scenarios/quickstart.yaml", []),
                                      ("ZeRO-2 with offload", "scenarios/training/llama2-70b-zero2-offload-64xh100.yaml", []),
                                      ("H2O serving", "scenarios/host/serve-h2o-kv.yaml", few),
                                      ("expert-parallel serving", "scenarios/serving/mixtral-8x7b-ep8-h100.yaml", few)]:
            emitted = scratch / "plan.json"
            ran = json.loads(run(binary, source, ["run", scenario, "--json", *extra, "--emit-plan", str(emitted)]).stdout)
            plan = json.loads(emitted.read_text())
            if "programs" in plan:
                documents.append((f"--emit-plan {what}", training_plan_schema, plan))
                if plan["plan_hash"] != ran["simulated"]["plan_hash"]:
                    raise SystemExit(f"--emit-plan {what}: plan hash {plan['plan_hash']}, the run's {ran['simulated']['plan_hash']}")
            else:
                documents.append((f"--emit-plan {what}", iteration_plan_schema, plan))
                planned = {op["signature"] for op in plan["ops"]}
                if not set(ran["simulated"]["iteration_ops"]) <= planned:
                    raise SystemExit(f"--emit-plan {what}: the run executed ops the plan does not list")
                collectives = {(c["kind"], c["group"]) for c in plan["collectives"]}
                expected = {("all_gather", "expert_parallel"), ("reduce_scatter", "expert_parallel")} if plan["expert_parallel"] > 1 else set()
                if collectives != expected:
                    raise SystemExit(f"--emit-plan {what}: collectives {sorted(collectives)}, expected {sorted(expected)}")

    failures = 0
    for what, schema, document in documents:
        errors = sorted(schema.iter_errors(document), key=lambda e: list(e.absolute_path))
        for error in errors[:5]:
            print(f"FAIL {what}: at {'/'.join(map(str, error.absolute_path)) or '(root)'}: {error.message[:300]}")
        failures += bool(errors)
        if not errors:
            print(f"ok   {what}")
    covered = {(d.get("backend"), d.get("workload"), "out_of_memory" in d.get("memory", {}).get("gpu", {}))
               for _, s, d in documents if s is result_schema}
    # (The hardware's serving out-of-memory report is the same OutOfMemoryReport as training's; only a
    # device that fails an allocation the memory model allowed reaches it: tests/unit/test_hw.cpp.)
    for needed in [("sim", "training", True), ("hw", "training", True), ("sim", "inference", False),
                   ("hw", "inference", False), ("hw", "training", False)]:
        if needed not in covered:
            print(f"FAIL no document covered backend {needed[0]}, {needed[1]}, out of memory: {needed[2]}")
            failures += 1

    # The schemas can fail: a result without its peak, an out-of-memory report in another shape, a
    # comparison row without its error, are each refused.
    result = next(d for w, s, d in documents if w == "training, sim")
    broken = copy.deepcopy(result)
    del broken["memory"]["gpu"]["peak_bytes"]
    oom = copy.deepcopy(next(d for w, s, d in documents if w == "training, sim, out of memory"))
    oom["memory"]["gpu"]["out_of_memory"].pop("in_use_bytes")
    validation = copy.deepcopy(next(d for w, s, d in documents if w == "validate training: validation.json"))
    validation["metrics"][0].pop("error_pct")
    for what, schema, document in [("a result without memory.gpu.peak_bytes", result_schema, broken),
                                   ("an out-of-memory report without in_use_bytes", result_schema, oom),
                                   ("a comparison row without error_pct", validation_schema, validation)]:
        if schema.is_valid(document):
            print(f"FAIL the schema accepts {what}")
            failures += 1
    print(f"{len(documents)} documents, {failures} failing")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
