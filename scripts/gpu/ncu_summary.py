#!/usr/bin/env python3
"""ncu_summary.py CSV [STEPS] [--groups]: per-kernel time of an `ncu --metrics gpu__time_duration.sum
--csv` log (or of `nsys stats --report cuda_gpu_kern_sum --format csv`: its "Total Time (ns)" and
"Instances" per name), summed by kernel name, divided by STEPS (the steps the profiled program ran, warm-up
included; default 2), largest first. Prints the share of each kernel and the total; with --groups,
the same summed by kind of work (GEMMs by input type, FP8 casts, attention, norms, ...)."""
import collections
import csv
import re
import signal
import sys

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`

args = [a for a in sys.argv[1:] if not a.startswith("--")]
groups = "--groups" in sys.argv[1:]
path = args[0]
steps = float(args[1]) if len(args) > 1 else 2.0
# kind of work by kernel name: cuBLASLt's nvjet kernels carry the input types ("qq"/"qr": FP8)
KINDS = [
    ("GEMM, FP8 inputs (cuBLASLt)", r"^nvjet_\w+_q[qr]"),
    ("GEMM, bf16 inputs (cuBLASLt)", r"^nvjet_"),
    ("FP8 casts, amaxes, scales", r"^fp8_"),
    ("bias add and its gradient (Qwen2, the ViT)", r"bias_"),
    ("LayerNorm, GELU, patch merge (the ViT)", r"layernorm|layer_norm|gelu|vision|patch|merge"),
    ("attention (cuDNN SDPA, own flash kernels)", r"cudnn|flash|attn|attention"),
    ("cross-entropy (after the lm_head GEMMs)", r"cross_entropy"),
    ("AdamW and gradient norm", r"adamw|norm_sq"),
    ("RMSNorm (with residual add)", r"rmsnorm"),
    ("SwiGLU", r"swiglu"),
    ("RoPE, QK-norm", r"rope|qk_norm|qkn"),
    ("embedding (with its sort)", r"embedding|cub::"),
]
with open(path) as f:
    lines = f.readlines()
head = next((i for i, l in enumerate(lines) if "Total Time (ns)" in l), None)
lines = lines[head:] if head is not None else [l for l in lines if l.startswith('"')]
tot = collections.defaultdict(float)
cnt = collections.Counter()
n = 0
for r in csv.DictReader(lines):
    if "Total Time (ns)" in r:  # nsys: one row per kernel name already
        short = re.sub(r"\(.*", "", r["Name"])[:90]
        tot[short] += float(r["Total Time (ns)"])
        cnt[short] += int(r["Instances"])
        n += int(r["Instances"])
        continue
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    short = re.sub(r"\(.*", "", r["Kernel Name"])[:90]
    tot[short] += float(r["Metric Value"].replace(",", ""))  # ncu writes 368,192
    cnt[short] += 1
    n += 1
all_ns = sum(tot.values())
print("%d kernels, %.1f ms in all (%g steps + set-up)" % (n, all_ns / 1e6, steps))
if groups:
    g = collections.defaultdict(float)
    for k, v in tot.items():
        bare = re.sub(r"^void ", "", k)  # ncu names templates "void name<...>"
        kind = next((name for name, rx in KINDS if re.search(rx, bare)), "other")
        g[kind] += v
    print("%-45s %10s %6s" % ("kind of work", "ms/step", "share"))
    for k in sorted(g, key=lambda k: -g[k]):
        print("%-45s %10.3f %5.1f%%" % (k, g[k] / steps / 1e6, 100 * g[k] / all_ns))
    sys.exit(0)
print("%-90s %6s %10s %6s" % ("kernel", "count", "ms/step", "share"))
for k in sorted(tot, key=lambda k: -tot[k])[:40]:
    print("%-90s %6d %10.3f %5.1f%%" % (k, cnt[k], tot[k] / steps / 1e6, 100 * tot[k] / all_ns))
