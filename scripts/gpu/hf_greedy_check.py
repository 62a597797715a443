#!/usr/bin/env python3
"""hf_greedy_check.py: ljperf's greedy continuation of a Hugging Face model directory equals
transformers' (both in fp32 on the CPU, so that no bf16 tie decides).

    python3 scripts/gpu/hf_greedy_check.py HF_DIR --ljperf build/ljperf [--prompt TEXT]
        [--max-new-tokens 24] [--make qwen3|qwen2|llama --tokenizer tokenizer.json]

HF_DIR: a model directory (config.json, model.safetensors; a tokenizer.json beside it or
--tokenizer). --make FAMILY first writes a small random-init transformers model of FAMILY there
(Qwen3ForCausalLM, Qwen2ForCausalLM or LlamaForCausalLM: hidden 256, 4 layers, 4 / 2 heads of 64,
the tokenizer's vocabulary, initializer_range 0.1 so that the logits are not near ties, seed 0)
with save_pretrained, and copies --tokenizer beside it: "an HF checkpoint" that ljperf did not
write. transformers generates with do_sample=False; ljperf with `generate --temperature 0
--device cpu`. Prints both continuations and PASS or FAIL; exits 1 on FAIL."""
import argparse
import os
import shutil
import subprocess
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

ap = argparse.ArgumentParser()
ap.add_argument("hf_dir")
ap.add_argument("--ljperf", default="build/ljperf")
ap.add_argument("--prompt", default="In the beginning God created")
ap.add_argument("--max-new-tokens", type=int, default=24)
ap.add_argument("--make", choices=["qwen3", "qwen2", "llama"], default=None)
ap.add_argument("--tokenizer", default=None, help="tokenizer.json (required with --make)")
args = ap.parse_args()

tok_path = args.tokenizer or os.path.join(args.hf_dir, "tokenizer.json")
if not os.path.isfile(tok_path):
    sys.exit(f"hf_greedy_check: no tokenizer: {tok_path} (give --tokenizer)")
tok = PreTrainedTokenizerFast(tokenizer_file=tok_path)

if args.make:
    torch.manual_seed(0)
    v5 = int(transformers.__version__.split(".")[0]) >= 5
    common = dict(vocab_size=len(tok), hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=2048,
                  initializer_range=0.1, tie_word_embeddings=False, use_cache=True)
    theta = 1000000.0 if args.make != "llama" else 500000.0
    if v5:
        common["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
    else:
        common["rope_theta"] = theta
    if args.make == "qwen3":
        from transformers import Qwen3Config as Cfg
        common.update(rms_norm_eps=1e-6, use_sliding_window=False)
    elif args.make == "qwen2":
        from transformers import Qwen2Config as Cfg
        common.update(rms_norm_eps=1e-6, use_sliding_window=False)
    else:
        from transformers import LlamaConfig as Cfg
        common.update(rms_norm_eps=1e-5)
    model = AutoModelForCausalLM.from_config(Cfg(**common)).float()
    os.makedirs(args.hf_dir, exist_ok=True)
    model.save_pretrained(args.hf_dir, safe_serialization=True)
    shutil.copy(tok_path, os.path.join(args.hf_dir, "tokenizer.json"))
    print(f"made {type(model).__name__} ({sum(p.numel() for p in model.parameters())} parameters) in {args.hf_dir}")

model = AutoModelForCausalLM.from_pretrained(args.hf_dir, torch_dtype=torch.float32).eval()
ids = tok(args.prompt)["input_ids"]
# the BOS ljperf puts first when the tokenizer declares one (Llama 3); Qwen declares none
with torch.no_grad():
    out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=args.max_new_tokens,
                         pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else 0)
new_ids = out[0, len(ids):].tolist()


def byte_decoder():
    """GPT-2's byte-level alphabet inverted: the character each byte is written as -> the byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for c, b in zip(cs, bs)}


# a random model's greedy tokens may split a UTF-8 character, so the continuations are compared as
# bytes: each token's bytes from the byte-level alphabet (added tokens as their UTF-8 text)
dec = byte_decoder()
added = {t.content for t in tok.added_tokens_decoder.values()} if hasattr(tok, "added_tokens_decoder") else set()
hf_bytes = b"".join(t.encode() if t in added or any(c not in dec for c in t) else bytes(dec[c] for c in t)
                    for t in tok.convert_ids_to_tokens(new_ids))
hf_new = hf_bytes.decode("utf-8", "replace")

cmd = [args.ljperf, "generate", "--load", args.hf_dir, "--prompt", args.prompt, "--max-new-tokens",
       str(args.max_new_tokens), "--temperature", "0", "--device", "cpu", "--tokenizer", tok_path]
r = subprocess.run(cmd, capture_output=True)
if r.returncode != 0:
    print(r.stderr.decode("utf-8", "replace"))
    sys.exit(f"hf_greedy_check: FAIL: ljperf generate exited {r.returncode}")
lj_bytes = r.stdout.rstrip(b"\n")
prompt = args.prompt.encode()
lj_bytes = lj_bytes[len(prompt):] if lj_bytes.startswith(prompt) else lj_bytes
print(f"prompt ids      {ids}")
print(f"new ids         {new_ids}")
print(f"transformers    {hf_new!r}")
print(f"ljperf          {lj_bytes.decode('utf-8', 'replace')!r}")
if lj_bytes == hf_bytes:
    print(f"PASS: {type(model).__name__}: ljperf's greedy continuation equals transformers' "
          f"({args.max_new_tokens} tokens)")
    sys.exit(0)
print("FAIL: the continuations differ")
sys.exit(1)
