#!/usr/bin/env python3
"""vl_pytorch_ref.py: the PyTorch + transformers side of `ljperf benchmark --model qwen3-vl-*`.

It trains transformers' Qwen3VLForConditionalGeneration built from the same configuration as
ljperf's preset (config/vl.c; written here, nothing is downloaded), random weights, on the same
synthetic batches as `ljperf benchmark` (bench/benchmark_vl.h): a micro-batch of B samples, each
<|vision_start|>, the pads of one image of --img-h x --img-w pixels (its grid from smart_resize
with factor 32 and Qwen3-VL's min/max pixels), <|vision_end|>, then --text-tokens random text
tokens; pixel_values random in [-1, 1], made once; labels the text tokens (-100 elsewhere; the
model shifts them), so the loss covers the same positions as ljperf's targets.

Precision: fp32 parameters with bf16 autocast (--dtype autocast, the default: ljperf's recipe of
f32 master weights and bf16 compute), or bf16 parameters (--dtype bf16). SDPA attention, fused
AdamW (lr 1e-4, weight decay 0.1, betas 0.9/0.95, clipping at 1.0 as ljperf's benchmark).

Modes:
  eager    the model as is
  compile  torch.compile(model)
--gradient-checkpointing: transformers' gradient_checkpointing_enable (non-reentrant), every
decoder and vision block recomputed in the backward (how an 8B model fits beside its fp32 AdamW).

Timing: each step (forward, backward, clipping, optimizer step, zero_grad) is bracketed by
torch.cuda.synchronize(); the first --warmup-iters steps are not counted.
  samples/s  = B * counted steps / their time;  tokens/s = samples/s * T (every decoder token)
  TFLOP/s    = samples/s * (ViT + decoder FLOPs per sample) / 1e12, MFU = TFLOP/s / 989, with
               ljperf's convention (docs/qwen3-vl.md, "The FLOP count"):
               ViT  6*(P*V + depth*(4V^2 + 2VI))*n + 6*(1 + deepstack)*(M^2 + M*O)*n/4 + 12*depth*V*n^2
               decoder  T*(6*N + 12*L*d*T), N the matmul parameters with lm_head
  peak_mem_gib = torch.cuda.max_memory_allocated() since the end of set-up; device_mem_used_gib =
               total - free (torch.cuda.mem_get_info) at the end, the whole process.

Usage:
  python3 scripts/gpu/vl_pytorch_ref.py --model qwen3-vl-2b --image-size 448 --text-tokens 512 --mode compile \\
      --json out.json
"""
import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

PEAK_TFLOPS = 989.0  # H100/H200 SXM bf16 dense
GIB = float(1 << 30)

# name: text (V, d, I, L, nh, nkv, hd, tied, max_pos, mrope_section), vision (depth, V, I, heads, out, npos,
# deepstack indexes). config/vl.c's presets (the published config.json values; docs/qwen3-vl-model.md).
PRESETS = {
    "qwen3-vl-2b": ((151936, 2048, 6144, 28, 16, 8, 128, True, 262144, [24, 20, 20]),
                    (24, 1024, 4096, 16, 2048, 2304, [5, 11, 17])),
    "qwen3-vl-4b": ((151936, 2560, 9728, 36, 32, 8, 128, True, 262144, [24, 20, 20]),
                    (24, 1024, 4096, 16, 2560, 2304, [5, 11, 17])),
    "qwen3-vl-8b": ((151936, 4096, 12288, 36, 32, 8, 128, False, 262144, [24, 20, 20]),
                    (27, 1152, 4304, 16, 4096, 2304, [8, 16, 24])),
    "qwen3-vl-tiny": ((151936, 64, 128, 4, 4, 2, 32, True, 1024, [6, 5, 5]),
                      (4, 32, 64, 2, 64, 64, [0, 2, 3])),
}
IMAGE_PAD, VIDEO_PAD, VISION_START, VISION_END = 151655, 151656, 151652, 151653


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def die(msg, code=1):
    print("vl_pytorch_ref: error: " + msg, file=sys.stderr, flush=True)
    sys.exit(code)


def config_dict(name):
    """config.json of the preset, as ljperf's HF export writes it (io/hf_vl_export.c)."""
    (V, d, I, L, nh, nkv, hd, tied, max_pos, mrope), (depth, vh, vi, vheads, out, npos, ds) = PRESETS[name]
    return {
        "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
        "image_token_id": IMAGE_PAD, "video_token_id": VIDEO_PAD, "vision_start_token_id": VISION_START,
        "vision_end_token_id": VISION_END, "tie_word_embeddings": tied,
        "text_config": {
            "model_type": "qwen3_vl_text", "vocab_size": V, "hidden_size": d, "intermediate_size": I,
            "num_hidden_layers": L, "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": hd,
            "hidden_act": "silu", "max_position_embeddings": max_pos, "rms_norm_eps": 1e-6, "attention_bias": False,
            "attention_dropout": 0.0, "initializer_range": 0.02, "bos_token_id": 151643, "eos_token_id": 151645,
            "tie_word_embeddings": tied, "use_cache": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": mrope,
                                "mrope_interleaved": True},
        },
        "vision_config": {
            "model_type": "qwen3_vl_vision", "depth": depth, "hidden_size": vh, "intermediate_size": vi,
            "num_heads": vheads, "in_channels": 3, "patch_size": 16, "temporal_patch_size": 2, "spatial_merge_size": 2,
            "out_hidden_size": out, "num_position_embeddings": npos, "deepstack_visual_indexes": ds,
            "hidden_act": "gelu_pytorch_tanh", "initializer_range": 0.02,
        },
    }


def load_config(model):
    from transformers import AutoConfig
    if os.path.isdir(model):
        model = os.path.join(model, "config.json")
    if os.path.isfile(model):
        with open(model) as f:
            fields = json.load(f)
    elif model in PRESETS:
        fields = config_dict(model)
    else:
        die(f"unknown model '{model}' (presets: {', '.join(PRESETS)}; or a config.json path)", 2)
    fields = dict(fields)
    return AutoConfig.for_model(fields.pop("model_type"), **fields)


def smart_resize(h, w, factor=32, min_pixels=256 * 256, max_pixels=4096 * 4096):
    """transformers' smart_resize (models/qwen2_vl/image_processing_qwen2_vl.py), as data/image.h."""
    if max(h, w) / min(h, w) > 200:
        die(f"--img-h {h} --img-w {w}: an aspect ratio above 200")
    hb, wb = round(h / factor) * factor, round(w / factor) * factor
    if hb * wb > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        hb, wb = max(factor, math.floor(h / beta / factor) * factor), max(factor, math.floor(w / beta / factor) * factor)
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb, wb = math.ceil(h * beta / factor) * factor, math.ceil(w * beta / factor) * factor
    return hb, wb


def vit_flops(vc, n):
    V, I, depth = vc.hidden_size, vc.intermediate_size, vc.depth
    P = vc.in_channels * vc.temporal_patch_size * vc.patch_size ** 2
    m2 = vc.spatial_merge_size ** 2
    M, O = m2 * V, vc.out_hidden_size
    nds = len(vc.deepstack_visual_indexes)
    return (6.0 * (P * V + depth * (4.0 * V * V + 2.0 * V * I)) * n + 6.0 * (1 + nds) * (M * M + M * O) * n / m2
            + 12.0 * depth * V * n * n)


def llm_flops(tc, T):
    d, I, L, V = tc.hidden_size, tc.intermediate_size, tc.num_hidden_layers, tc.vocab_size
    q, kv = tc.num_attention_heads * tc.head_dim, tc.num_key_value_heads * tc.head_dim
    n = L * (d * (q + 2 * kv) + q * d + 3 * d * I) + V * d
    return T * (6.0 * n + 12.0 * L * d * T)


def percentile(xs, q):
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q / 100.0
    lo = int(math.floor(k))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a preset (%s) or a config.json" % ", ".join(PRESETS))
    ap.add_argument("--img-h", type=int, default=448)
    ap.add_argument("--img-w", type=int, default=448)
    ap.add_argument("--image-size", type=int, help="--img-h S --img-w S")
    ap.add_argument("--text-tokens", type=int, default=512)
    ap.add_argument("--micro-batch-size", type=int, default=1)
    ap.add_argument("--train-iters", type=int, default=20, help="counted steps")
    ap.add_argument("--warmup-iters", type=int, default=5)
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--dtype", choices=["autocast", "bf16"], default="autocast")
    ap.add_argument("--gradient-checkpointing", action="store_true", help="recompute every block in the backward")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json", help="write the result here")
    a = ap.parse_args()
    if a.image_size:
        a.img_h = a.img_w = a.image_size
    if not torch.cuda.is_available():
        die("no CUDA device")
    torch.manual_seed(a.seed)
    torch.set_float32_matmul_precision("high")
    dev = torch.device("cuda")
    config = load_config(a.model)
    try:
        config.text_config._attn_implementation = "sdpa"
        config.vision_config._attn_implementation = "sdpa"
        config._attn_implementation = "sdpa"
    except Exception as e:  # noqa: BLE001
        log(f"vl_pytorch_ref: note: could not set sdpa attention: {e}")
    from transformers import Qwen3VLForConditionalGeneration
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    with torch.device(dev):
        model = Qwen3VLForConditionalGeneration(config)  # random init (HF's _init_weights), fp32
    model = model.to(dtype)
    model.train()
    if a.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    tc, vc = config.text_config, config.vision_config
    nparams = sum(p.numel() for p in model.parameters())

    # the batch: as bench/benchmark_vl.c builds it
    hb, wb = smart_resize(a.img_h, a.img_w)
    gh, gw = hb // vc.patch_size, wb // vc.patch_size
    patches = gh * gw
    ntok = patches // vc.spatial_merge_size ** 2
    T = ntok + 2 + a.text_tokens
    B = a.micro_batch_size
    P = vc.in_channels * vc.temporal_patch_size * vc.patch_size ** 2
    pixel_values = (torch.rand(B * patches, P, device=dev) * 2 - 1).to(dtype)
    grid = torch.tensor([[1, gh, gw]] * B, device=dev)
    special = min(VISION_START, tc.vocab_size)
    head = torch.tensor([VISION_START] + [IMAGE_PAD] * ntok + [VISION_END], device=dev)

    def batch():
        text = torch.randint(0, special, (B, a.text_tokens), device=dev)
        ids = torch.cat([head.expand(B, -1), text], dim=1)
        labels = ids.clone()
        labels[:, :ntok + 2] = -100
        return ids, labels

    fused = True
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=fused)
    step_model = torch.compile(model) if a.mode == "compile" else model
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if a.dtype == "autocast" else torch.autocast("cuda", enabled=False)

    def step():
        ids, labels = batch()
        with amp:
            # mm_token_type_ids as the processor returns it (0 text, 1 image): transformers 5 needs it
            # for the multimodal RoPE's position ids
            out = step_model(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=pixel_values,
                             image_grid_thw=grid, mm_token_type_ids=(ids == IMAGE_PAD).long(), labels=labels)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return out.loss

    log(f"vl_pytorch_ref: {a.model} ({nparams / 1e9:.3f} B parameters), {a.mode}, {a.dtype}; micro-batch {B} x "
        f"(one {a.img_h}x{a.img_w} image: {gh}x{gw} patches, {ntok} tokens; + {a.text_tokens} text) = {T} tokens")
    losses, times = [], []
    for i in range(a.warmup_iters + a.train_iters):
        if i == a.warmup_iters:
            torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        losses.append(float(loss))
        if i >= a.warmup_iters:
            times.append(dt)
        log(f"  step {i + 1}: {dt * 1e3:.1f} ms, loss {losses[-1]:.4f}")
    total = sum(times)
    sps = B * len(times) / total
    fl = vit_flops(vc, patches) + llm_flops(tc, T)
    free_b, total_b = torch.cuda.mem_get_info()
    r = {
        "engine": "pytorch", "model": a.model, "mode": a.mode, "dtype": a.dtype, "micro_batch_size": B,
        "gradient_checkpointing": a.gradient_checkpointing,
        "img_h": a.img_h, "img_w": a.img_w, "image_grid_thw": [1, gh, gw], "image_patches": patches,
        "image_tokens": ntok, "text_tokens": a.text_tokens, "seq_length": T, "world_size": 1,
        "samples_per_s": sps, "tokens_per_s": sps * T, "tokens_per_s_per_gpu": sps * T,
        "tflops": sps * fl / 1e12, "mfu": sps * fl / 1e12 / PEAK_TFLOPS,
        "vit_flops_per_sample": vit_flops(vc, patches), "llm_flops_per_sample": llm_flops(tc, T),
        "step_ms_median": 1e3 * percentile(times, 50), "step_ms_p90": 1e3 * percentile(times, 90),
        "peak_mem_gib": torch.cuda.max_memory_allocated() / GIB,
        "peak_mem_reserved_gib": torch.cuda.max_memory_reserved() / GIB,
        "device_mem_used_gib": (total_b - free_b) / GIB, "losses": losses,
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "transformers": transformers.__version__,
        "parameters": nparams,
    }
    print(f"vl_pytorch_ref benchmark: {a.model} {a.mode} {a.dtype}, micro-batch {B}, {a.img_h}x{a.img_w} + "
          f"{a.text_tokens} text = {T} tokens ({r['gpu']})")
    for k, v in [("tokens/s", f"{r['tokens_per_s']:,.0f}"), ("samples/s", f"{sps:.3f}"),
                 ("TFLOP/s", f"{r['tflops']:.1f}"), ("MFU", f"{100 * r['mfu']:.1f}%"),
                 ("step time median (ms)", f"{r['step_ms_median']:.1f}"),
                 ("peak memory allocated", f"{r['peak_mem_gib']:.2f} GiB"),
                 ("device memory in use", f"{r['device_mem_used_gib']:.2f} GiB"),
                 ("loss (first -> last)", f"{losses[0]:.4f} -> {losses[-1]:.4f}")]:
        print(f"{k:28s} {v}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
