"""Measures the device memory of real PyTorch training steps, for checking memtwin's training model.

A Llama-architecture model (0.89B parameters, random weights, no download) is trained on
random tokens with torch.autocast(bf16), fp32 parameters and fused AdamW -- PyTorch's native mixed
precision -- for a few (micro-batch, sequence length, checkpointing) settings. For each it reports
the peak of allocated and reserved memory from the caching allocator and what the driver reports,
plus the step time. Output: one JSON document on stdout. Runs where PyTorch and transformers are.
"""
import json
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

CONFIG = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16, num_attention_heads=16,
              num_key_value_heads=8, vocab_size=32000, max_position_embeddings=4096,
              tie_word_embeddings=False)
SETTINGS = [(1, 2048, False), (4, 2048, False), (2, 4096, False), (8, 2048, True), (4, 4096, True)]


def main():
    torch.manual_seed(0)
    free0, total = torch.cuda.mem_get_info()
    cfg = LlamaConfig(**CONFIG)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg).cuda()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    runs = []
    for micro_batch, seq_len, checkpointing in SETTINGS:
        if checkpointing:
            model.gradient_checkpointing_enable()
        else:
            model.gradient_checkpointing_disable()
        model.config.use_cache = False
        tokens = torch.randint(0, CONFIG["vocab_size"], (micro_batch, seq_len), device="cuda")

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=tokens, labels=tokens).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        step()  # optimizer states exist from here on
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        repeats = 3
        for _ in range(repeats):
            loss = step()
        torch.cuda.synchronize()
        elapsed = (time.perf_counter() - start) / repeats
        free, _ = torch.cuda.mem_get_info()
        runs.append(dict(micro_batch=micro_batch, seq_len=seq_len, checkpointing=checkpointing,
                         peak_allocated_bytes=torch.cuda.max_memory_allocated(),
                         peak_reserved_bytes=torch.cuda.max_memory_reserved(),
                         driver_used_bytes=total - free, step_s=elapsed,
                         tokens_per_s=micro_batch * seq_len / elapsed, loss=float(loss.detach())))
        print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    print(json.dumps(dict(schema="memtwin.torch_training_probe/1", device=torch.cuda.get_device_name(),
                          torch=torch.__version__, model=CONFIG, parameters=params,
                          memory_total_bytes=total, used_before_model_bytes=total - free0, runs=runs), indent=2))


if __name__ == "__main__":
    main()
