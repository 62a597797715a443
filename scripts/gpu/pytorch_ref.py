#!/usr/bin/env python3
"""pytorch_ref.py: the PyTorch + transformers side of `ljperf benchmark`'s side-by-side comparison.

It trains a random-init transformers LlamaForCausalLM (Qwen3ForCausalLM for the qwen3 presets and
configs with model_type "qwen3") of the same shape and settings as
`ljperf benchmark` and prints the same table: fp32 parameters with bf16 autocast, SDPA
attention (attn_implementation="sdpa"), fused AdamW (lr 1e-4, no clipping unless
--clip-grad), synthetic random tokens, loss = model(input_ids, labels=input_ids).loss.

Modes:
  eager    the model as is
  compile  torch.compile(model)
  fsdp2    under torchrun: torch.compile of each decoder layer, then fully_shard of each
           compiled layer and of the root (torchtitan's order) with
           MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) (no autocast: the policy
           casts); every rank builds the full fp32 model on its GPU before sharding
--checkpointing full turns on HF gradient checkpointing (non-reentrant) of every layer.

TF32 is allowed for fp32 matmuls (torch.set_float32_matmul_precision("high")); under bf16
autocast the model's matmuls run in bf16 anyway.

Timing: each step (forward, backward, optimizer step, zero_grad) is bracketed by
torch.cuda.synchronize(); the first --warmup-iters steps are not counted.
  tokens/s          = micro_batch * seq_length * world_size * counted steps / their total time
  tokens/s per GPU  = tokens/s / world_size
  TFLOP/s (per GPU) = tokens/s per GPU * FLOPs per token / 1e12
  MFU               = TFLOP/s / 989, FLOPs per token = 6*N + 12*L*d*s, N = parameters in
                      matmuls (every projection and lm_head, counted even when tied; not the
                      embedding lookup) -- the docs/reference.md convention
  step_ms_median / step_ms_p90 over the counted steps (fsdp2: the slowest rank per step)
  peak_mem_gib      = torch.cuda.max_memory_allocated() since the end of set-up (max over ranks);
                      also peak_mem_reserved_gib and device_mem_used_gib = (total - free) from
                      torch.cuda.mem_get_info() at the end (whole process and CUDA context)
The JSON (--json) has the keys model, seq_length, micro_batch_size, world_size, tokens_per_s,
tokens_per_s_per_gpu, tflops, mfu (a fraction, 0.428 = 42.8%), step_ms_median, step_ms_p90,
peak_mem_gib, mode, plus extras (engine, checkpointing, losses, versions, ...; see `r` in main()).

Usage:
  python3 scripts/gpu/pytorch_ref.py --model llama3.2-1b --seq-length 4096 --micro-batch-size 4 --mode compile
  torchrun --nproc-per-node 2 scripts/gpu/pytorch_ref.py --model llama3-8b --micro-batch-size 2 --mode fsdp2
"""
import argparse
import contextlib
import json
import math
import os
import sys
import time

import torch

import transformers
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig

PEAK_TFLOPS = 989.0  # H100/H200 SXM bf16 dense
GIB = float(1 << 30)

# name: V, d, I, L, nh, nkv, hd, max_pos, tied, llama3 rope factor (0: none). Shapes: docs/reference.md
# (and config/config.c for the small presets).
PRESETS = {
    "llama3.2-1b": (128256, 2048, 8192, 16, 32, 8, 64, 131072, True, 32.0),
    "llama3.2-3b": (128256, 3072, 8192, 28, 24, 8, 128, 131072, True, 32.0),
    "llama3-8b": (128256, 4096, 14336, 32, 32, 8, 128, 8192, False, 0.0),
    "llama3.1-8b": (128256, 4096, 14336, 32, 32, 8, 128, 131072, False, 8.0),
    "llama3-70b": (128256, 8192, 28672, 80, 64, 8, 128, 8192, False, 0.0),
    "llama3-tiny": (128256, 256, 768, 4, 4, 2, 64, 2048, True, 32.0),
    "llama3-nano": (128256, 64, 192, 2, 4, 2, 16, 1024, True, 32.0),
}
# Qwen3 dense (Qwen3ForCausalLM): V, d, I, L, nh, nkv, hd, tied; rope_theta 1e6, eps 1e-6, 40960
# positions, bos/eos 151643/151645 (docs/reference.md, "Qwen3 dense and Qwen2.5")
QWEN3 = {
    "qwen3-0.6b": (151936, 1024, 3072, 28, 16, 8, 128, True),
    "qwen3-1.7b": (151936, 2048, 6144, 28, 16, 8, 128, True),
    "qwen3-4b": (151936, 2560, 9728, 36, 32, 8, 128, True),
    "qwen3-8b": (151936, 4096, 12288, 36, 32, 8, 128, False),
    "qwen3-14b": (151936, 5120, 17408, 40, 40, 8, 128, False),
    "qwen3-32b": (151936, 5120, 25600, 64, 64, 8, 128, False),
}


def log(msg, rank=0):
    if rank == 0:
        print(msg, file=sys.stderr, flush=True)


def die(msg, code=1):
    print("pytorch_ref: error: " + msg, file=sys.stderr, flush=True)
    sys.exit(code)


# ---- model config -----------------------------------------------------------------------

def preset_config(name):
    V, d, I, L, nh, nkv, hd, max_pos, tied, factor = PRESETS[name]
    rope = {"rope_type": "default", "rope_theta": 500000.0}
    if factor > 0:
        rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": factor, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    kw = dict(vocab_size=V, hidden_size=d, intermediate_size=I, num_hidden_layers=L, num_attention_heads=nh,
              num_key_value_heads=nkv, head_dim=hd, max_position_embeddings=max_pos, tie_word_embeddings=tied,
              rms_norm_eps=1e-5, bos_token_id=128000, eos_token_id=128001, hidden_act="silu",
              attention_bias=False, mlp_bias=False, use_cache=False)
    if int(transformers.__version__.split(".")[0]) >= 5:
        kw["rope_parameters"] = rope
    else:
        rope = dict(rope)
        kw["rope_theta"] = rope.pop("rope_theta")
        kw["rope_scaling"] = rope if rope["rope_type"] != "default" else None
    return LlamaConfig(**kw)


def qwen3_config(name):
    from transformers import Qwen3Config
    V, d, I, L, nh, nkv, hd, tied = QWEN3[name]
    kw = dict(vocab_size=V, hidden_size=d, intermediate_size=I, num_hidden_layers=L, num_attention_heads=nh,
              num_key_value_heads=nkv, head_dim=hd, max_position_embeddings=40960, tie_word_embeddings=tied,
              rms_norm_eps=1e-6, bos_token_id=151643, eos_token_id=151645, hidden_act="silu",
              attention_bias=False, use_sliding_window=False, use_cache=False)
    if int(transformers.__version__.split(".")[0]) >= 5:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": 1000000.0}
    else:
        kw["rope_theta"] = 1000000.0
    return Qwen3Config(**kw)


def load_config(model):
    """--model: a preset name (an "org/" prefix is ignored), a config.json path or a directory."""
    if os.path.isdir(model):
        if not os.path.exists(os.path.join(model, "config.json")):
            die(f"{model}: no config.json in this directory")
        return AutoConfig.from_pretrained(model)
    if os.path.isfile(model):
        with open(model) as f:
            fields = json.load(f)
        return AutoConfig.for_model(fields.pop("model_type", "llama"), **fields)
    name = model.split("/")[-1]
    if name in PRESETS:
        return preset_config(name)
    if name in QWEN3:
        return qwen3_config(name)
    die(f"unknown model '{model}' (presets: {', '.join(list(PRESETS) + list(QWEN3))}; or a config.json path)", 2)
    return None


def matmul_params(c):
    """N of the MFU convention: q, k, v, o, gate, up, down in every layer, plus lm_head (V*d)."""
    d, I, L, V = c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.vocab_size
    nh, nkv = c.num_attention_heads, c.num_key_value_heads or c.num_attention_heads
    hd = getattr(c, "head_dim", None) or d // nh
    per_layer = d * nh * hd + 2 * d * nkv * hd + nh * hd * d + 3 * d * I
    return L * per_layer + V * d


def flops_per_token(c, seq):
    return 6.0 * matmul_params(c) + 12.0 * c.num_hidden_layers * c.hidden_size * seq


# ---- helpers ------------------------------------------------------------------------------

def percentile(xs, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q / 100.0
    lo = int(math.floor(k))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def set_sdpa(config_or_model):
    try:
        if hasattr(config_or_model, "set_attn_implementation"):
            config_or_model.set_attn_implementation("sdpa")
        else:
            config_or_model._attn_implementation = "sdpa"
    except Exception as e:  # noqa: BLE001 - reported below through attn_implementation
        log(f"pytorch_ref: note: could not set sdpa attention: {e}")


def make_optimizer(params, lr, fused):
    if fused:
        return torch.optim.AdamW(params, lr=lr, fused=True), "AdamW fused"
    return torch.optim.AdamW(params, lr=lr, foreach=True), "AdamW foreach"


def fmt_int(x):
    return f"{x:,.0f}"


def print_table(r):
    """The same layout as `ljperf benchmark`: a header line, then rows "metric  value"."""
    print(f"pytorch_ref benchmark: {r['model']}  seq {r['seq_length']}  micro-batch {r['micro_batch_size']}  "
          f"world {r['world_size']}  mode {r['mode']}  checkpointing {r['checkpointing']}  ({r['gpu']})")
    rows = [
        ("tokens/s", fmt_int(r["tokens_per_s"])),
        ("tokens/s per GPU", fmt_int(r["tokens_per_s_per_gpu"])),
        ("TFLOP/s per GPU", f"{r['tflops']:.1f}"),
        ("MFU", f"{100 * r['mfu']:.1f}%  ({r['mfu_convention']})"),
        ("step time median (ms)", f"{r['step_ms_median']:.1f}"),
        ("step time p90 (ms)", f"{r['step_ms_p90']:.1f}"),
        ("peak memory (GiB)", f"{r['peak_mem_gib']:.1f} allocated, {r['peak_mem_reserved_gib']:.1f} reserved, "
                              f"{r['device_mem_used_gib']:.1f} device used"),
        ("parameters", f"{fmt_int(r['num_params'])} ({fmt_int(r['num_matmul_params'])} in matmuls)"),
        ("loss first -> last", f"{r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}"),
    ]
    for k, v in rows:
        print(f"  {k:24s} {v}")
    sys.stdout.flush()


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


# ---- main -----------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="llama3.2-1b", help="preset (" + ", ".join(PRESETS) + ") or config.json")
    ap.add_argument("--seq-length", type=int, default=4096)
    ap.add_argument("--micro-batch-size", type=int, default=1)
    ap.add_argument("--train-iters", type=int, default=20, help="counted steps")
    ap.add_argument("--warmup-iters", type=int, default=5, help="uncounted steps before them")
    ap.add_argument("--mode", choices=["eager", "compile", "fsdp2"], default="eager")
    ap.add_argument("--checkpointing", choices=["none", "full"], default="none")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--clip-grad", type=float, default=0.0, help="global-norm clipping (0: off, the default)")
    ap.add_argument("--no-fused-adamw", action="store_true", help="foreach AdamW instead of fused")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--peak-tflops", type=float, default=PEAK_TFLOPS)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    if args.seq_length < 1 or args.micro_batch_size < 1 or args.train_iters < 1 or args.warmup_iters < 0:
        die("--seq-length, --micro-batch-size and --train-iters must be >= 1, --warmup-iters >= 0", 2)
    if not torch.cuda.is_available():
        die("no CUDA device: this reference runs on a GPU")

    # ---- distributed set-up (fsdp2 only) ----
    rank, world, dist = 0, 1, None
    if args.mode == "fsdp2":
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            die("--mode fsdp2 runs under torchrun (RANK and WORLD_SIZE are not set)", 2)
        import torch.distributed as dist
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        try:
            dist.init_process_group(backend="nccl", device_id=torch.device("cuda", local_rank))
        except TypeError:
            dist.init_process_group(backend="nccl")
        rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device())
    torch.set_float32_matmul_precision("high")

    config = load_config(args.model)
    config.use_cache = False
    if args.seq_length > config.max_position_embeddings:
        die(f"--seq-length {args.seq_length} is above max_position_embeddings {config.max_position_embeddings} "
            f"of {args.model}", 2)
    set_sdpa(config)
    V = config.vocab_size

    # ---- model ----
    torch.manual_seed(args.seed)
    t_setup = time.perf_counter()
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config)
    set_sdpa(model)
    model.train()
    attn = str(getattr(model.config, "_attn_implementation", "unknown"))
    num_params = sum(p.numel() for p in model.parameters())
    if args.checkpointing == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    autocast = lambda: torch.autocast("cuda", dtype=torch.bfloat16)  # noqa: E731
    if args.mode == "compile":
        model = torch.compile(model)
    elif args.mode == "fsdp2":
        try:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        except ImportError:
            from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        layers = model.model.layers
        for i, layer in enumerate(list(layers)):
            layer = torch.compile(layer)  # as torchtitan: compile each block, then shard it
            fully_shard(layer, mp_policy=mp)
            layers.register_module(str(i), layer)
        fully_shard(model, mp_policy=mp)
        autocast = contextlib.nullcontext

    fused = not args.no_fused_adamw
    opt, opt_name = make_optimizer(model.parameters(), args.lr, fused)
    gen = torch.Generator(device=device).manual_seed(args.seed + rank)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    log(f"pytorch_ref: {args.model}: {num_params:,} parameters, attention {attn}, mode {args.mode}, "
        f"set-up {time.perf_counter() - t_setup:.1f} s; torch {torch.__version__}, "
        f"transformers {transformers.__version__}", rank)

    # ---- steps ----
    times, losses = [], []
    total = args.warmup_iters + args.train_iters
    for it in range(total):
        x = torch.randint(0, V, (args.micro_batch_size, args.seq_length), device=device, generator=gen)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        try:
            with autocast():
                loss = model(input_ids=x, labels=x, use_cache=False).loss
            loss.backward()
            if args.clip_grad > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)
            try:
                opt.step()
            except RuntimeError as e:
                if not fused or it > 0:
                    raise
                log(f"pytorch_ref: fused AdamW failed ({e}); using foreach AdamW", rank)
                fused = False
                opt, opt_name = make_optimizer(model.parameters(), args.lr, False)
                opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
        except torch.cuda.OutOfMemoryError as e:
            free, tot = torch.cuda.mem_get_info()
            msg = (f"out of memory at step {it + 1} ({(tot - free) / GIB:.1f} of {tot / GIB:.1f} GiB in use; "
                   f"peak allocated {torch.cuda.max_memory_allocated() / GIB:.1f} GiB): {str(e).splitlines()[0]}")
            if args.json and rank == 0:
                write_json(args.json, {"model": args.model, "mode": args.mode, "seq_length": args.seq_length,
                                       "micro_batch_size": args.micro_batch_size, "world_size": world,
                                       "error": msg})
            die(msg)
        dt = time.perf_counter() - t0
        lv = float(loss.detach())
        losses.append(lv)
        if it >= args.warmup_iters:
            times.append(dt)
        tag = "warm-up" if it < args.warmup_iters else "step"
        log(f"pytorch_ref: {tag} {it + 1}/{total}  loss {lv:.4f}  {dt * 1e3:.1f} ms", rank)

    # ---- measurements (max over ranks) ----
    free, tot = torch.cuda.mem_get_info()
    mem = [torch.cuda.max_memory_allocated() / GIB, torch.cuda.max_memory_reserved() / GIB, (tot - free) / GIB]
    if dist is not None:
        t = torch.tensor(times, dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times = t.tolist()
        m = torch.tensor(mem, dtype=torch.float64, device=device)
        dist.all_reduce(m, op=dist.ReduceOp.MAX)
        mem = m.tolist()

    tokens_per_step = args.micro_batch_size * args.seq_length * world
    tokens_per_s = tokens_per_step * len(times) / sum(times)
    per_gpu = tokens_per_s / world
    fpt = flops_per_token(config, args.seq_length)
    tflops = per_gpu * fpt / 1e12
    r = {
        "model": args.model,
        "seq_length": args.seq_length,
        "micro_batch_size": args.micro_batch_size,
        "world_size": world,
        "tokens_per_s": tokens_per_s,
        "tokens_per_s_per_gpu": per_gpu,
        "tflops": tflops,
        "mfu": tflops / args.peak_tflops,
        "step_ms_median": 1e3 * percentile(times, 50),
        "step_ms_p90": 1e3 * percentile(times, 90),
        "peak_mem_gib": mem[0],
        "mode": args.mode,
        # extras
        "engine": "pytorch",
        "checkpointing": args.checkpointing,
        "peak_mem_reserved_gib": mem[1],
        "device_mem_used_gib": mem[2],
        "step_ms_mean": 1e3 * sum(times) / len(times),
        "train_iters": args.train_iters,
        "warmup_iters": args.warmup_iters,
        "flops_per_token": fpt,
        "num_params": num_params,
        "num_matmul_params": matmul_params(config),
        "peak_tflops": args.peak_tflops,
        "mfu_convention": f"6N+12Lds, N = matmul params incl. lm_head, excl. embedding; peak {args.peak_tflops:g} "
                          "TFLOP/s bf16 dense",
        "attn_implementation": attn,
        "optimizer": opt_name,
        "lr": args.lr,
        "clip_grad": args.clip_grad,
        "precision": "fp32 params, bf16 autocast" if args.mode != "fsdp2" else "FSDP2 bf16 params, fp32 reduce",
        "losses": losses,
        "gpu": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    if rank == 0:
        print_table(r)
        if args.json:
            write_json(args.json, r)
    if dist is not None:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
