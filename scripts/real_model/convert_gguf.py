#!/usr/bin/env python3
"""Converts a Llama-architecture GGUF file into the model directory memtwin's host engine reads.

    convert_gguf.py MODEL.gguf OUT_DIR

OUT_DIR/model.json   the architecture (from the GGUF metadata), the source file and its SHA-256,
                     and an index of the tensors: name, shape [rows, cols] (row-major), offset in
                     floats into weights.f32
OUT_DIR/weights.f32  every tensor dequantised to little-endian float32, one after another
OUT_DIR/tokenizer.json  the vocabulary (byte-level BPE tokens and their types) and the merges

Weights are dequantised with the `gguf` package (llama.cpp's own reader). Two layout choices, so
that memtwin runs the model as its HuggingFace checkpoint is written:
  * a linear layer's matrix is [outputs, inputs] (y = W x), as GGUF and HuggingFace store it;
  * the query and key projections are un-permuted: llama.cpp's converter interleaves each head's
    rotary pairs (its "normal" RoPE rotates adjacent elements), memtwin's rotary embedding is the
    rotate-half form HuggingFace uses (element i pairs with i + head_dim / 2).
"""
import hashlib
import json
import os
import sys

import numpy as np
import gguf


def field_value(reader, key):
    field = reader.fields.get(key)
    if field is None:
        return None
    value = field.parts[field.data[0]]
    if field.types and field.types[0] == gguf.GGUFValueType.STRING:
        return bytes(value).decode("utf-8")
    return value.tolist()[0] if len(value) == 1 else value.tolist()


def require(reader, key, path):
    value = field_value(reader, key)
    if value is None:
        sys.exit(f"{path}: GGUF metadata key '{key}' is missing (a Llama-architecture model needs it)")
    return value


def unpermute(weights, heads):
    """The inverse of llama.cpp's convert_hf_to_gguf permute(): rows (head, pair, 2) -> (head, 2, pair)."""
    rows, cols = weights.shape
    return weights.reshape(heads, rows // heads // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    source, out_dir = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(source)
    architecture = require(reader, "general.architecture", source)
    if architecture != "llama":
        sys.exit(f"{source}: general.architecture is '{architecture}'; memtwin reads Llama-architecture models")
    a = "llama."
    hidden = require(reader, a + "embedding_length", source)
    heads = require(reader, a + "attention.head_count", source)
    kv_heads = require(reader, a + "attention.head_count_kv", source)
    config = {
        "architecture": "llama",
        "name": field_value(reader, "general.name") or os.path.basename(source),
        "layers": require(reader, a + "block_count", source),
        "hidden": hidden,
        "intermediate": require(reader, a + "feed_forward_length", source),
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": hidden // heads,
        "vocab": require(reader, a + "vocab_size", source),
        "context_length": require(reader, a + "context_length", source),
        "rope_theta": float(require(reader, a + "rope.freq_base", source)),
        "rms_norm_eps": float(require(reader, a + "attention.layer_norm_rms_epsilon", source)),
        "bos_token_id": field_value(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": field_value(reader, "tokenizer.ggml.eos_token_id"),
    }
    names = {t.name for t in reader.tensors}
    config["tied_embeddings"] = "output.weight" not in names
    os.makedirs(out_dir, exist_ok=True)
    index, offset = [], 0
    partial = os.path.join(out_dir, "weights.f32.partial")
    with open(partial, "wb") as out:
        for tensor in reader.tensors:
            values = np.asarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type), dtype="<f4")
            values = values.reshape(-1, values.shape[-1]) if values.ndim > 1 else values.reshape(1, -1)
            if tensor.name.endswith("attn_q.weight"):
                values = unpermute(values, heads)
            elif tensor.name.endswith("attn_k.weight"):
                values = unpermute(values, kv_heads)
            out.write(np.ascontiguousarray(values).tobytes())
            index.append({"name": tensor.name, "shape": list(values.shape), "offset": offset,
                          "source_type": tensor.tensor_type.name})
            offset += values.size
    os.replace(partial, os.path.join(out_dir, "weights.f32"))
    # The tokenizer: GPT-2-style byte-level BPE (tokens in its byte-to-character alphabet, merges
    # by rank) and the pre-tokenizer's name, for memtwin's tokenizer (hw/host/bpe_tokenizer.h).
    tokenizer = {"model": field_value(reader, "tokenizer.ggml.model"), "pre": field_value(reader, "tokenizer.ggml.pre")}
    for key, name in (("tokenizer.ggml.tokens", "tokens"), ("tokenizer.ggml.merges", "merges")):
        field = reader.fields.get(key)
        if field is None:
            sys.exit(f"{source}: GGUF metadata key '{key}' is missing")
        tokenizer[name] = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    types = reader.fields.get("tokenizer.ggml.token_type")
    tokenizer["token_types"] = [int(types.parts[i][0]) for i in types.data] if types is not None else []
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
        f.write("\n")
    config["source"] = {"file": os.path.abspath(source), "sha256": sha256(source)}
    config["tensors"] = index
    with open(os.path.join(out_dir, "model.json"), "w") as f:
        json.dump(config, f, indent=1)
        f.write("\n")
    print(f"{out_dir}: {config['name']}, {config['layers']} layers, hidden {hidden}, {heads} heads "
          f"({kv_heads} KV), {len(index)} tensors, {offset * 4 / 2**20:.0f} MiB of float32")


if __name__ == "__main__":
    main()
