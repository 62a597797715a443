#!/usr/bin/env python3
"""hf_generate_bench.py: transformers' own generate on the GPU machine, the baseline of
`ljperf bench serve --offline` at the same shape: a Llama 3.1 8B-shaped LlamaForCausalLM with
random weights in bf16 (nothing to download), a batch of prompts of random token ids, greedy,
every sequence generating exactly --output-len tokens. Prints one JSON line with the output
tokens per second (the timed call excludes a short warm-up generate).

  python3 scripts/gpu/hf_generate_bench.py --batch 64 --input-len 128 --output-len 256
"""
import argparse
import json
import time

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                      rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    torch.manual_seed(a.seed)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    model.eval()
    ids = torch.randint(0, 128000, (a.batch, a.input_len), device="cuda")
    mask = torch.ones_like(ids)
    kw = dict(do_sample=False, pad_token_id=0, eos_token_id=None)
    with torch.inference_mode():
        model.generate(ids[:, :16], attention_mask=mask[:, :16], max_new_tokens=8, min_new_tokens=8, **kw)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(ids, attention_mask=mask, max_new_tokens=a.output_len, min_new_tokens=a.output_len, **kw)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    n_out = (out.shape[1] - a.input_len) * a.batch
    print(json.dumps({"transformers": transformers.__version__, "torch": torch.__version__, "batch": a.batch,
                      "input_len": a.input_len, "output_len": a.output_len, "seconds": round(dt, 3),
                      "output_tokens": n_out, "output_throughput": round(n_out / dt, 1),
                      "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}))


if __name__ == "__main__":
    main()
