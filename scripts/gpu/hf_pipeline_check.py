#!/usr/bin/env python3
"""hf_pipeline_check.py: an ljperf Hugging Face export (a checkpoint's hf/ directory) loads in
`transformers` as a complete model: AutoTokenizer.from_pretrained (tokenizer.json,
tokenizer_config.json, special_tokens_map.json), GenerationConfig, and
pipeline("text-generation") generating greedily.

    python3 scripts/gpu/hf_pipeline_check.py HF_DIR [--prompt TEXT] [--expect-ids 128000,644,...]
        [--expect-text TEXT]

--expect-ids: the prompt's token ids as ljperf tokenizes them (BOS first); --expect-text: the
greedy continuation `ljperf generate --temperature 0` printed, compared (reported, not
required: bf16 ties may differ). Prints PASS/FAIL lines; exits 1 on a FAIL."""
import argparse
import sys

import torch
from transformers import AutoTokenizer, GenerationConfig, pipeline

ap = argparse.ArgumentParser()
ap.add_argument("hf_dir")
ap.add_argument("--prompt", default="In the beginning God created")
ap.add_argument("--max-new-tokens", type=int, default=24)
ap.add_argument("--expect-ids", default=None)
ap.add_argument("--expect-text", default=None)
args = ap.parse_args()
fails = 0

tok = AutoTokenizer.from_pretrained(args.hf_dir)
ids = tok(args.prompt)["input_ids"]
print(f"AutoTokenizer: {type(tok).__name__}, vocab {len(tok)}, bos {tok.bos_token!r} ({tok.bos_token_id}), "
      f"eos {tok.eos_token!r} ({tok.eos_token_id}); prompt ids {ids}")
if tok.decode(ids, skip_special_tokens=True) != args.prompt:
    print("FAIL the tokenizer does not round-trip the prompt")
    fails += 1
if args.expect_ids is not None:
    want = [int(x) for x in args.expect_ids.split(",") if x]
    if ids != want:
        print(f"FAIL prompt ids {ids} != ljperf's {want}")
        fails += 1
    else:
        print("PASS prompt ids equal ljperf's tokenizer")
gc = GenerationConfig.from_pretrained(args.hf_dir)
print(f"GenerationConfig: bos {gc.bos_token_id}, eos {gc.eos_token_id}")
if gc.eos_token_id is None or gc.bos_token_id is None:
    print("FAIL generation_config.json lacks bos/eos")
    fails += 1
device = 0 if torch.cuda.is_available() else -1
pipe = pipeline("text-generation", model=args.hf_dir, device=device)
out = pipe(args.prompt, max_new_tokens=args.max_new_tokens, do_sample=False)[0]["generated_text"]
print(f"pipeline('text-generation'): {out!r}")
if not out.startswith(args.prompt) or len(out) <= len(args.prompt):
    print("FAIL the pipeline generated nothing")
    fails += 1
else:
    print("PASS pipeline('text-generation') runs on the export")
if args.expect_text is not None:
    same = out.strip() == args.expect_text.strip()
    print(f"{'same' if same else 'differs'}: ljperf generate --temperature 0 printed {args.expect_text!r}")
sys.exit(1 if fails else 0)
