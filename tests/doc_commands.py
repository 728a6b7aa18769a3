#!/usr/bin/env python3
"""Every command the docs show runs, and prints what the docs quote.

    tests/doc_commands.py MEMTWIN_BINARY SOURCE_DIR

Reads README.md and docs/*.md. In a fenced code block, a line starting with `$ ` is a command
(continued by a trailing backslash) and the lines after it, up to the next command or the block's
end, are its quoted output. `memtwin` and `build/memtwin` stand for the binary under test; the
command runs in SOURCE_DIR. Each quoted line must appear in the command's output (stdout and
stderr together), in the order quoted, with runs of spaces compared as one; a line `...` skips any
output and a line ending in `...` is compared up to there. A command must exit 0, 2 or 3 (3: does
not fit, still a result); any other exit, or a quoted line not printed, fails the check.
"""
import pathlib
import re
import shlex
import subprocess
import sys

ALLOWED_EXITS = {0, 2, 3}
TIMEOUT_S = 300


def commands_in(path):
    """(line number, command, quoted output lines) for each `$ ` command in path's code blocks."""
    found = []
    in_block = False
    current = None
    continuing = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            in_block = not in_block
            if current:
                found.append(current)
            current = None
            continue
        if not in_block:
            continue
        if continuing:
            current[1] += " " + line.strip().rstrip("\\").strip()
            continuing = line.rstrip().endswith("\\")
            continue
        if line.startswith("$ "):
            if current:
                found.append(current)
            current = [number, line[2:].rstrip().rstrip("\\").strip(), []]
            continuing = line.rstrip().endswith("\\")
        elif current is not None:
            current[2].append(line)
    return found


def normalised(text):
    return " ".join(text.split())


def check(binary, root, source, number, command, quoted):
    words = shlex.split(command)
    if words[0] not in ("memtwin", "build/memtwin"):
        return [f"{source}:{number}: only memtwin commands can be checked, got '{words[0]}'"]
    words[0] = binary
    try:
        run = subprocess.run(words, cwd=root, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return [f"{source}:{number}: '{command}' ran past {TIMEOUT_S} s"]
    output = [normalised(line) for line in (run.stdout + "\n" + run.stderr).splitlines()]
    problems = []
    if run.returncode not in ALLOWED_EXITS:
        problems.append(f"{source}:{number}: '{command}' exited {run.returncode}\n{run.stderr[-2000:]}")
    at = 0
    for expected in quoted:
        want = normalised(expected)
        if not want or want == "...":
            continue
        prefix = want.endswith("...")
        if prefix:
            want = want[:-3].rstrip()
        match = next((i for i in range(at, len(output))
                      if (output[i].startswith(want) if prefix else output[i] == want)), None)
        if match is None:
            problems.append(f"{source}:{number}: '{command}' did not print (in this order):\n  {expected.strip()}")
            break
        at = match + 1
    return problems


def main():
    binary, root = sys.argv[1], pathlib.Path(sys.argv[2])
    sources = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    checked, problems = 0, []
    for source in sources:
        for number, command, quoted in commands_in(source):
            problems += check(binary, root, source.relative_to(root), number, command, quoted)
            checked += 1
    print(f"{checked} documented commands checked")
    for p in problems:
        print(p)
    if checked == 0:
        print("no documented commands found")
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
