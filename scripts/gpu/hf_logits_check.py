#!/usr/bin/env python3
"""hf_logits_check.py: loads an ljperf-exported HF checkpoint in transformers and checks its logits.

The check behind "a fixture model exported by ljperf loads in transformers and gives the same
logits". It loads CKPT_DIR (config.json + model.safetensors, or sharded with
model.safetensors.index.json) with AutoModelForCausalLM.from_pretrained (the class its
config.json names: Llama, Qwen2 or Qwen3), in fp32 with eager attention, runs the fixture's inputs (input_ids [B, T+1] I32 in INPUTS; the model sees
ids[:, :T]) and compares the logits (and the loss, mean cross-entropy of logits[:, t] against
ids[:, t+1]) with every reference file given by --ref and, unless --no-fixture-ref, with
reference.safetensors beside INPUTS. A reference file holds "logits" [B, T, V] and
optionally "loss" [1].

Metric: rel = ||logits - ref||_2 / ||ref||_2 over the whole tensor (|a - b| / |b| for the
loss); PASS when every rel <= --tol (default 1e-4). It also prints max abs error and
max abs error / max |ref|. If model.safetensors sits beside INPUTS (a fixture directory), it
reports whether the loaded weights are bit-identical to it (part of the verdict with
--require-identical-weights).

Usage:
  python3 scripts/gpu/hf_logits_check.py /tmp/export tests/fixtures/hf/untied/inputs.safetensors
  python3 scripts/gpu/hf_logits_check.py CKPT INPUTS --ref ljperf_logits.safetensors --json out.json
Exit status: 0 PASS, 1 FAIL or a bad file, 2 usage.
Self-test: a fixture directory is itself an HF checkpoint, so
  python3 scripts/gpu/hf_logits_check.py tests/fixtures/hf/untied tests/fixtures/hf/untied/inputs.safetensors
must PASS (fp32 against the fp64 reference, rel about 1e-7).
"""
import argparse
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F

import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM


def die(msg):
    print("hf_logits_check: error: " + msg, file=sys.stderr)
    sys.exit(1)


def load_tensors(path):
    try:
        return load_file(path)
    except Exception as e:  # noqa: BLE001 - any unreadable file gets one clear message
        die(f"{path}: cannot read as safetensors: {e}")


def safetensors_dtypes(path):
    """The set of dtype names in a safetensors file's header (read directly, no tensors loaded)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            die(f"{path}: truncated safetensors header")
        (n,) = struct.unpack("<Q", raw)
        if n > 100 * 1024 * 1024:
            die(f"{path}: header length {n} is implausible")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            die(f"{path}: safetensors header is not JSON: {e}")
    return sorted({v["dtype"] for k, v in header.items() if k != "__metadata__"})


def checkpoint_files(ckpt):
    index = os.path.join(ckpt, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            wm = json.load(f).get("weight_map", {})
        return sorted({os.path.join(ckpt, v) for v in wm.values()})
    single = os.path.join(ckpt, "model.safetensors")
    if os.path.exists(single):
        return [single]
    die(f"{ckpt}: neither model.safetensors nor model.safetensors.index.json")
    return []


def errors(a, b):
    a = a.double()
    b = b.double()
    diff = (a - b).abs()
    den = float(b.norm())
    return {
        "rel": float((a - b).norm()) / den if den > 0 else float((a - b).norm()),
        "max_abs": float(diff.max()) if diff.numel() else 0.0,
        "max_abs_over_max_ref": float(diff.max() / b.abs().max()) if diff.numel() and float(b.abs().max()) > 0 else 0.0,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ckpt_dir", help="HF checkpoint directory exported by ljperf")
    ap.add_argument("inputs", help="inputs.safetensors with input_ids [B, T+1]")
    ap.add_argument("--ref", action="append", default=[], help="reference safetensors with 'logits' (repeatable)")
    ap.add_argument("--no-fixture-ref", action="store_true", help="do not use reference.safetensors beside INPUTS")
    ap.add_argument("--tol", type=float, default=1e-4, help="PASS threshold on the relative error (default 1e-4)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda; fp32 either way, TF32 off")
    ap.add_argument("--require-identical-weights", action="store_true",
                    help="FAIL unless the loaded weights equal the fixture's model.safetensors bit for bit")
    ap.add_argument("--save-logits", help="write the HF logits (and loss) to this safetensors file")
    ap.add_argument("--json", help="write the results to this JSON file")
    args = ap.parse_args()

    if not os.path.isdir(args.ckpt_dir):
        die(f"{args.ckpt_dir}: not a directory")
    if not os.path.exists(os.path.join(args.ckpt_dir, "config.json")):
        die(f"{args.ckpt_dir}: no config.json")
    if not os.path.exists(args.inputs):
        die(f"{args.inputs}: no such file")
    torch.set_float32_matmul_precision("highest")
    device = torch.device(args.device)

    files = checkpoint_files(args.ckpt_dir)
    dtypes = sorted({d for f in files for d in safetensors_dtypes(f)})
    print(f"hf_logits_check: torch {torch.__version__}, transformers {transformers.__version__}")
    print(f"hf_logits_check: checkpoint {args.ckpt_dir}: {len(files)} file(s), dtypes {', '.join(dtypes)}")

    inputs = load_tensors(args.inputs)
    if "input_ids" not in inputs:
        die(f"{args.inputs}: no tensor 'input_ids'")
    ids = inputs["input_ids"].to(torch.int64)
    if ids.ndim != 2 or ids.shape[1] < 2:
        die(f"{args.inputs}: input_ids must be [B, T+1] with T >= 1, got {list(ids.shape)}")
    x, y = ids[:, :-1].to(device), ids[:, 1:].to(device)

    model = AutoModelForCausalLM.from_pretrained(args.ckpt_dir, attn_implementation="eager")
    model = model.float().to(device).eval()
    vocab = model.config.vocab_size
    if int(ids.max()) >= vocab or int(ids.min()) < 0:
        die(f"{args.inputs}: token ids outside [0, {vocab})")
    with torch.no_grad():
        logits = model(input_ids=x, use_cache=False).logits.float()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    logits, loss = logits.cpu(), loss.cpu()
    print(f"hf_logits_check: logits {list(logits.shape)}, loss {float(loss):.7f}")

    result = {"ckpt_dir": args.ckpt_dir, "inputs": args.inputs, "checkpoint_dtypes": dtypes,
              "torch": torch.__version__, "transformers": transformers.__version__,
              "tol": args.tol, "loss": float(loss), "comparisons": [], "verdict": None}
    ok = True

    refs = list(args.ref)
    fixture_dir = os.path.dirname(os.path.abspath(args.inputs))
    fixture_ref = os.path.join(fixture_dir, "reference.safetensors")
    if not args.no_fixture_ref and os.path.exists(fixture_ref) and fixture_ref not in refs:
        refs.append(fixture_ref)
    if not refs:
        die("no reference: pass --ref FILE or put reference.safetensors beside INPUTS")

    for path in refs:
        ref = load_tensors(path)
        if "logits" not in ref:
            die(f"{path}: no tensor 'logits'")
        if tuple(ref["logits"].shape) != tuple(logits.shape):
            die(f"{path}: logits shape {list(ref['logits'].shape)} != model's {list(logits.shape)}")
        e = errors(logits, ref["logits"])
        row = {"reference": path, "logits": e}
        passed = e["rel"] <= args.tol
        if "loss" in ref:
            le = abs(float(loss) - float(ref["loss"].reshape(-1)[0])) / max(abs(float(ref["loss"].reshape(-1)[0])), 1e-30)
            row["loss_rel"] = le
            passed = passed and le <= args.tol
        row["pass"] = passed
        ok = ok and passed
        result["comparisons"].append(row)
        loss_txt = f", loss rel {row['loss_rel']:.3e}" if "loss_rel" in row else ""
        print(f"  {'PASS' if passed else 'FAIL'}  vs {path}: logits rel {e['rel']:.3e}, max abs {e['max_abs']:.3e}, "
              f"max abs / max |ref| {e['max_abs_over_max_ref']:.3e}{loss_txt} (tol {args.tol:g})")

    fixture_weights = os.path.join(fixture_dir, "model.safetensors")
    if os.path.exists(fixture_weights):
        want = load_tensors(fixture_weights)
        have = {n: p.detach().float().cpu() for n, p in model.named_parameters()}
        missing = sorted(set(want) - set(have))
        extra = sorted(set(have) - set(want))
        differing = [n for n in sorted(set(want) & set(have)) if not torch.equal(have[n], want[n].float())]
        worst = max([float((have[n] - want[n].float()).abs().max()) for n in differing] or [0.0])
        identical = not missing and not extra and not differing
        result["weights_identical_to_fixture"] = identical
        result["weights_differing"] = differing
        print(f"  weights vs {fixture_weights}: " + ("bit-identical" if identical else
              f"{len(differing)} differ (max abs {worst:.3e}), missing {missing}, extra {extra}"))
        if args.require_identical_weights and not identical:
            ok = False
    elif args.require_identical_weights:
        die(f"--require-identical-weights: no model.safetensors beside {args.inputs}")

    if args.save_logits:
        save_file({"logits": logits.contiguous(), "loss": loss.reshape(1).contiguous()}, args.save_logits)
    result["verdict"] = "PASS" if ok else "FAIL"
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        os.replace(tmp, args.json)
    print(f"hf_logits_check: {result['verdict']}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
