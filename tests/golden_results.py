#!/usr/bin/env python3
"""Golden results: every example scenario's `memtwin run --backend sim --json` output, byte for byte.

A change meant to leave results alone (a faster simulator, a tidier scheduler) must leave this file's
digests alone; a change of the model changes some, and `--update` writes the new ones so that the
review sees which scenarios moved.

    golden_results.py MEMTWIN ROOT            check the cases recorded under 2 s
    golden_results.py MEMTWIN ROOT --all      check every case
    golden_results.py MEMTWIN ROOT --update   run every case and rewrite tests/golden/results.tsv
    golden_results.py MEMTWIN ROOT --every-flow [--all]
                                              check them with `memtwin run --every-flow`: where a few
                                              of a collective's flows stand for the others
                                              (sim/lone_collectives.h), running all of them must give
                                              the same bytes
"""
import hashlib
import pathlib
import subprocess
import sys
import time

TABLE = pathlib.Path("tests/golden/results.tsv")
QUICK_S = 2.0  # cases recorded slower than this run with --all only (their training steps are large)
# Cases beyond each example at its own settings: the full-fidelity simulator, where the default
# takes the symmetric reduction.
EXTRA = [
    ("scenarios/training/llama2-70b-fsdp-64xh100.yaml", "--set simulation.fidelity=full"),
    ("scenarios/validation/mpt-70b-seq2k-a100.yaml", "--set simulation.fidelity=full"),
    ("scenarios/validation/held-out/megatron-zero3-175b-a100.yaml", "--set simulation.fidelity=full"),
    ("scenarios/benchmarks/llama2-70b-zero3-1024xh100.yaml", "--set simulation.fidelity=full"),
]
HEADER = "# scenario\targuments\texit code\tsha256 of stdout\tseconds when recorded\n"


def cases(root):
    found = sorted(p.relative_to(root).as_posix() for p in (root / "scenarios").rglob("*.yaml") if "presets" not in p.parts)
    return [(s, "") for s in found] + EXTRA


def run(memtwin, root, scenario, args, every_flow=False):
    start = time.monotonic()
    proc = subprocess.run([memtwin, "run", scenario, "--backend", "sim", "--json", *args.split(),
                           *(["--every-flow"] if every_flow else [])], cwd=root,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    return proc.returncode, hashlib.sha256(proc.stdout).hexdigest(), time.monotonic() - start, proc.stderr.decode(errors="replace")


def read_table(root):
    rows = []
    for line in (root / TABLE).read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        scenario, args, code, digest, seconds = line.split("\t")
        rows.append((scenario, args, int(code), digest, float(seconds)))
    return rows


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    memtwin, root = sys.argv[1], pathlib.Path(sys.argv[2]).resolve()
    flags = set(sys.argv[3:])
    if not flags <= {"--all", "--update", "--every-flow"} or ("--update" in flags and len(flags) > 1):
        sys.exit(__doc__)
    every_flow = "--every-flow" in flags
    if "--update" in flags:
        lines = [HEADER]
        for scenario, args in cases(root):
            code, digest, seconds, err = run(memtwin, root, scenario, args)
            if code not in (0, 3):
                sys.exit(f"{scenario} {args}: exit {code}\n{err}")
            lines.append(f"{scenario}\t{args}\t{code}\t{digest}\t{seconds:.2f}\n")
            print(f"{scenario} {args}: exit {code}, {seconds:.2f} s")
        (root / TABLE).write_text("".join(lines))
        return
    rows = read_table(root)
    recorded = {(r[0], r[1]) for r in rows}
    missing = [c for c in cases(root) if c not in recorded]
    failures = [f"{s} {a}: not recorded (run {sys.argv[0]} MEMTWIN ROOT --update)" for s, a in missing]
    checked = 0
    for scenario, args, code, digest, seconds in rows:
        if "--all" not in flags and seconds >= QUICK_S:
            continue
        got_code, got_digest, _, err = run(memtwin, root, scenario, args, every_flow)
        checked += 1
        if (got_code, got_digest) != (code, digest):
            failures.append(f"{scenario} {args}: exit {got_code} (recorded {code}), sha256 {got_digest} (recorded {digest})"
                            + (f"\n{err.strip()}" if got_code not in (0, 3) else ""))
    for f in failures:
        print("CHANGED:", f)
    print(f"{checked} golden cases checked{' with every flow running' if every_flow else ''}, {len(failures)} changed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
