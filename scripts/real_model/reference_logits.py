#!/usr/bin/env python3
"""Records llama.cpp's next-token logits for a few prompts, the reference memtwin's engine is held to,
and its tokenization of a corpus and of a few non-ASCII texts, which memtwin's tokenizer is held to.

    reference_logits.py MODEL.gguf OUT.json CORPUS.txt

llama.cpp (through llama-cpp-python, built from its source by pip) runs the GGUF file on the CPU
with an fp16 KV cache, one batch per prompt, and returns every position's logits. The file keeps,
per prompt, its token ids (llama.cpp's tokenizer of the GGUF's vocabulary) and, per position, the
16 most likely next tokens with their logits and the logsumexp of the whole row, so that a test
can compare logits and log-probabilities without storing 49,152 floats per position.
"""
import hashlib
import json
import sys

import numpy as np
from llama_cpp import Llama, __version__ as llama_cpp_version

PROMPTS = [
    "The capital of France is Paris. The capital of Germany is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
]
TOP = 16
# Texts that exercise the pre-tokenizer beyond ASCII prose: accents, CJK, emoji, digits, spacing.
UNICODE_TEXTS = [
    "Café naïve résumé — déjà vu; Straße über Ärger.",
    "東京は日本の首都です。2024年に12345人が来た。",
    "Emoji 👍🏽 and symbols ∑ ≤ ≥ → ©, tabs\tand  double  spaces,\n\n  indented lines.",
    "I'll say it's 3.14159 and they'd've known   it's 42!",
]


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.split("\n\n")[1])
    model_path, out_path, corpus_path = sys.argv[1], sys.argv[2], sys.argv[3]
    llm = Llama(model_path=model_path, n_ctx=256, n_batch=256, n_threads=2, logits_all=True, seed=0, verbose=False)
    prompts = []
    for text in PROMPTS:
        tokens = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        llm.reset()
        llm.eval(tokens)
        scores = np.array(llm.scores[: len(tokens)], dtype=np.float64)
        positions = []
        for row in scores:
            top = np.argsort(-row, kind="stable")[:TOP]
            peak = row.max()
            positions.append({"top_ids": [int(i) for i in top], "top_logits": [round(float(row[i]), 5) for i in top],
                              "logsumexp": round(float(peak + np.log(np.exp(row - peak).sum())), 5)})
        prompts.append({"text": text, "tokens": [int(t) for t in tokens], "positions": positions})
    with open(out_path, "w") as f:
        with open(model_path, "rb") as model:
            digest = hashlib.sha256(model.read()).hexdigest()
        with open(corpus_path, encoding="utf-8") as corpus:
            corpus_text = corpus.read()
        tokenized = [{"text": text, "tokens": llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)}
                     for text in UNICODE_TEXTS]
        tokenized.append({"file": "data/corpus/" + corpus_path.rsplit("/", 1)[-1],
                          "tokens": llm.tokenize(corpus_text.encode("utf-8"), add_bos=False, special=False)})
        json.dump({"reference": f"llama.cpp via llama-cpp-python {llama_cpp_version}, fp16 KV cache, CPU",
                   "model_sha256": digest, "prompts": prompts, "tokenized": tokenized}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
