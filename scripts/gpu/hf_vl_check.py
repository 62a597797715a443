#!/usr/bin/env python3
"""hf_vl_check.py: ljperf's Qwen3-VL export against transformers, on the GPU machine.

Loads the Hugging Face export that `ljperf train --save` writes (ITER/hf/) as
Qwen3VLForConditionalGeneration with AutoProcessor, offline, from that directory alone; renders
the same user turn (the image, then the prompt) with the export's chat template; runs the
processor on the image (on the CPU, as ljperf's preprocessing follows); greedy generation; and
compares with `ljperf generate --image ... --output-json ANSWER.json`:

  - the prompt's input_ids (chat template, image tokens) equal ljperf's prompt_ids;
  - image_grid_thw equals ljperf's;
  - the generated tokens equal ljperf's ids.

It also prints, for every generated position, the margin between the two best logits (a
margin near 0 means a near tie, where fp32 differences of the two implementations may pick
different tokens).

Make the inputs on the build machine (the ljperf binary there):
    ljperf prepare --input tests/data/vl_example.jsonl --image-root $LJPERF_CACHE/images/skimage \\
        --tokenizer qwen3 --min-pixels 4096 --max-pixels 16384 --output-prefix build/vl_check/ds
    ljperf train --model qwen3-vl-tiny --data-path build/vl_check/ds --seq-length 48 --train-iters 30 \\
        --lr 1e-3 --save build/vl_check/ckpt
    cp $LJPERF_CACHE/images/skimage/chelsea.png build/vl_check/
    ljperf generate --load build/vl_check/ckpt --image build/vl_check/chelsea.png \\
        --prompt "What animal is in this picture?" --max-new-tokens 16 \\
        --output-json build/vl_check/ljperf_answer.json
Then on the GPU machine (carry build/vl_check):
    python3 scripts/gpu/hf_vl_check.py build/vl_check/ckpt/iter_0000030/hf \\
        build/vl_check/ljperf_answer.json --image build/vl_check/chelsea.png
Exit status 0 when everything is equal, 1 otherwise.
"""
import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from PIL import Image  # noqa: E402
from transformers import AutoProcessor, Qwen3VLForConditionalGeneration  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("export", help="the HF export directory (ITER/hf)")
    ap.add_argument("answer", help="ljperf generate --output-json FILE")
    ap.add_argument("--image", help="the image (default: the path in the answer file)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()

    ref = json.load(open(args.answer))
    image_path = args.image or ref["image"]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    processor = AutoProcessor.from_pretrained(args.export, local_files_only=True)
    model = Qwen3VLForConditionalGeneration.from_pretrained(
        args.export, dtype=torch.float32, local_files_only=True, attn_implementation="eager"
    ).to(args.device).eval()

    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": ref["prompt"]}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    image = Image.open(image_path)
    inputs = processor(text=[text], images=[image], return_tensors="pt")  # the processor runs on the CPU
    ok = True
    ids = inputs["input_ids"][0].tolist()
    if ids != ref["prompt_ids"]:
        ok = False
        first = next((i for i, (a, b) in enumerate(zip(ids, ref["prompt_ids"])) if a != b), min(len(ids), len(ref["prompt_ids"])))
        print(f"prompt ids differ at {first}: transformers {ids[first:first + 8]} ({len(ids)} ids), "
              f"ljperf {ref['prompt_ids'][first:first + 8]} ({len(ref['prompt_ids'])} ids)")
    else:
        print(f"prompt ids equal ({len(ids)} ids)")
    grid = inputs["image_grid_thw"][0].tolist()
    if grid != ref["image_grid_thw"]:
        ok = False
        print(f"image_grid_thw differs: transformers {grid}, ljperf {ref['image_grid_thw']}")

    inputs = {k: v.to(args.device) for k, v in inputs.items()}
    with torch.no_grad():
        out = model.generate(
            **inputs,
            max_new_tokens=max(len(ref["ids"]), 1),
            do_sample=False,
            eos_token_id=[model.config.text_config.eos_token_id, 151643],
            pad_token_id=151643,
            output_scores=True,
            return_dict_in_generate=True,
        )
    new = out.sequences[0, inputs["input_ids"].shape[1]:].tolist()
    margins = []
    for s in out.scores:
        top = torch.topk(s[0].float(), 2).values
        margins.append(float(top[0] - top[1]))
    print("transformers:", new)
    print("ljperf:      ", ref["ids"])
    print("top-2 logit margins:", " ".join(f"{m:.3g}" for m in margins))
    print("transformers text:", repr(processor.tokenizer.decode(new, skip_special_tokens=True)))
    print("ljperf text:      ", repr(ref["text"]))
    if new != ref["ids"]:
        ok = False
        first = next((i for i, (a, b) in enumerate(zip(new, ref["ids"])) if a != b), min(len(new), len(ref["ids"])))
        print(f"generated tokens differ from position {first}")
    print("OK: tokens equal" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
