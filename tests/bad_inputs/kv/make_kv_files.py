#!/usr/bin/env python3
"""Writes the malformed .npy and .safetensors files of this corpus (run from this directory).
They are committed; this script says how each was made."""
import json
import struct


def npy(name, shape, data_bytes, descr="<f4", header_len=None):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    while (10 + len(header) + 1) % 64:
        header += " "
    header += "\n"
    length = len(header) if header_len is None else header_len
    with open(name, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", length) + header.encode() + bytes(data_bytes))


def npy_v2_huge_header(name):
    # version 2: a 4-byte header length, here 4 GB, in a 16-byte file
    with open(name, "wb") as f:
        f.write(b"\x93NUMPY\x02\x00" + struct.pack("<I", 0xFFFFFFF0) + b"{'descr'")


def safetensors(name, header, data_bytes):
    text = json.dumps(header).encode()
    with open(name, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(data_bytes))


npy("asks_32gb.npy", "(65536, 8, 16384)", 0)        # 128 bytes of header asking for 32 GiB
npy_v2_huge_header("header_4gb.npy")
npy("zero_kv_heads.npy", "(16, 0, 64)", 0)
npy("two_dims.npy", "(16, 64)", 16 * 64 * 4)
npy("float64.npy", "(4, 1, 8)", 4 * 8 * 8, descr="<f8")
npy("nan_values.npy", "(4, 1, 64)", 0)                # filled with NaN below
with open("nan_values.npy", "ab") as f:
    f.write(struct.pack("<f", float("nan")) * (4 * 64))
npy("eight_tokens.npy", "(8, 1, 64)", 8 * 64 * 4)      # fine alone; 8 tokens against 4
npy("four_tokens.npy", "(4, 1, 64)", 4 * 64 * 4)
safetensors("shape_wraps.safetensors",
            {"k": {"dtype": "F32", "shape": [2**32, 2**32, 1], "data_offsets": [0, 0]}}, 0)
safetensors("offsets_past_end.safetensors",
            {"k": {"dtype": "F32", "shape": [2, 1, 4], "data_offsets": [0, 4096]}}, 32)
safetensors("shape_not_numbers.safetensors",
            {"k": {"dtype": "F32", "shape": ["2", 1, 4], "data_offsets": [0, 32]}}, 32)
safetensors("two_tensors.safetensors",
            {"k": {"dtype": "F32", "shape": [2, 1, 4], "data_offsets": [0, 32]},
             "v": {"dtype": "F32", "shape": [2, 1, 4], "data_offsets": [32, 64]}}, 64)
safetensors("shape_float_huge.safetensors",   # a float past 2^64 where a dimension goes (fuzzer)
            {"k": {"dtype": "F32", "shape": [4.2941967272294965e19, 1, 4], "data_offsets": [0, 16]}}, 16)
with open("header_length_huge.safetensors", "wb") as f:
    f.write(struct.pack("<Q", 2**62) + b"{}")
