#!/usr/bin/env python3
"""A KV method is named in one place: its descriptor (models/kv/) and its kernels.

    tests/kv_method_names.py SOURCE_DIR

The rest of memtwin asks the registry (models/kv/kv_method.h) what a method stores, selects and
which kernel formats it runs, instead of naming methods. This check reads the method names from
the registry's name table (models/kv/kv_method_id.h) and searches every C++ and CUDA source of the
layers that must not name them: the simulator, the scenario and cost models outside models/kv/,
the command line, the Python module and the hardware engine. Comments count too, except for the
method's own kernels.

Where a method may be named:
  * models/kv/ (the descriptors and the registry) and tests/;
  * its kernels: kernels/ (the CPU and CUDA kernels), hw/kv/ (the engine's storage for a method's
    cache, which calls those kernels), and the devices' bindings of the KV kernels -- the kernel
    interface the engine calls (hw/serving_kernels.h and its timing wrapper), the host and CUDA
    implementations of it and their calibration of those kernels (the files listed in
    KERNEL_BINDINGS) -- and tools/ (the kernels' benchmark).

What counts as naming a method:
  * a distinctive method name as a word, in any case, in code or comments (kivi, h2o, ...);
  * `KvCompression::<method>` for any method;
  * a method name alone in a string literal ("int4", "streaming", ...), which is how a layer would
    switch on the scenario's spelling of it.
Names that are also ordinary words or other formats (int8 as a weight dtype, "streaming"
multiprocessors) count only in the last two forms.

Exit 0 when nothing outside those places names a method; otherwise each finding and exit 1.
"""
import pathlib
import re
import sys

LAYERS = ["apps", "models", "sim", "hw", "python"]
ALLOWED_DIRS = ["models/kv/", "hw/kv/"]
KERNEL_BINDINGS = {
    "hw/serving_kernels.h",
    "hw/timed_serving_kernels.h",
    "hw/host/host_serving_kernels.h",
    "hw/host/host_serving_kernels.cpp",
    "hw/host/host_calibration.cpp",
    "hw/cuda/cuda_serving.cu",
    "hw/cuda/cuda_eviction.h",
    "hw/cuda/cuda_kv_calibration.h",
    "hw/cuda/cuda_kv_calibration.cu",
    "hw/cuda/cuda_calibration.cu",
}
SOURCE_SUFFIXES = {".h", ".hpp", ".cpp", ".cu", ".cuh"}
# Method names that are also ordinary words or other things' names.
GENERIC = {"int8", "int4", "int2", "streaming", "entropy", "none"}
# Another enum's name table (a weight dtype "int8"): its strings are that enum's names.
OTHER_NAME_TABLE = re.compile(r"EnumNames<(?!KvCompression)")


def method_names(source):
    """The registry's method names but `none`: no compression is every cache's default, not a
    method a layer could switch on instead of asking."""
    text = (source / "models" / "kv" / "kv_method_id.h").read_text(encoding="utf-8")
    table = re.search(r"kKvCompressionNames\{\s*\{([^}]*)\}", text)
    if not table:
        sys.exit("kv_method_names: the registry's name table was not found in models/kv/kv_method_id.h")
    names = re.findall(r'"([^"]+)"', table.group(1))
    names = [n for n in names if n != "none"]
    if len(names) < 5:
        sys.exit(f"kv_method_names: only {names} read from the registry's name table")
    return names


def strip_comments(text):
    """The code of a C++ source with its comments blanked (line numbers kept)."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


class Finder:
    def __init__(self, names):
        distinctive = [n for n in names if n not in GENERIC]
        # StreamingLLM is the streaming method's paper name.
        self.word = re.compile(r"(?i)(?<![A-Za-z0-9])(" + "|".join(distinctive + ["streamingllm"]) + r")(?![A-Za-z0-9])")
        self.enum = re.compile(r"KvCompression::(" + "|".join(names) + r")\b")
        self.literal = re.compile(r'"(' + "|".join(names) + r')"')

    def lines(self, rel, text):
        """The lines of one source that name a method."""
        code = strip_comments(text)
        return [f"{rel}:{number}: {line.strip()[:140]}"
                for number, (line, code_line) in enumerate(zip(text.split("\n"), code.split("\n")), 1)
                if self.word.search(line) or self.enum.search(code_line) or
                (self.literal.search(code_line) and not OTHER_NAME_TABLE.search(code_line))]


def findings(source, finder):
    found = []
    for layer in LAYERS:
        for path in sorted((source / layer).rglob("*")):
            rel = path.relative_to(source).as_posix()
            if path.suffix not in SOURCE_SUFFIXES or rel in KERNEL_BINDINGS:
                continue
            if any(rel.startswith(d) for d in ALLOWED_DIRS):
                continue
            found += finder.lines(rel, path.read_text(encoding="utf-8", errors="replace"))
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    source = pathlib.Path(sys.argv[1])
    names = method_names(source)
    finder = Finder(names)
    # The check itself must be able to fail: each form of naming a method is found, and the
    # ordinary uses of the generic names are not.
    for sample, named in (("auto m = KvCompression::int4;", True), ("// H2O keeps heavy hitters", True),
                          ('if (name == "streaming") {}', True), ("kivi_cache_->append();", True),
                          ("WeightDtype::int8; // streaming multiprocessors", False),
                          ('auto e = "int4_blocks";', False),
                          ('EnumNames<WeightDtype, 2> names{{"int8", "fp8"}};', False),
                          ('EnumNames<KvCompression, 2> names{{"none", "int8"}};', True),
                          ("KvCompression method = KvCompression::none;", False)):
        if bool(finder.lines("probe.cpp", sample)) != named:
            print(f"kv_method_names: the check {'misses' if named else 'wrongly finds'} {sample!r}")
            return 1
    found = findings(source, finder)
    for f in found:
        print(f)
    if found:
        print(f"{len(found)} lines outside models/kv/ and the methods' kernels name a KV method "
              f"({', '.join(names)}); ask the registry (models/kv/kv_method.h) instead")
        return 1
    print(f"no KV method ({', '.join(names)}) is named outside models/kv/ and the methods' kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
