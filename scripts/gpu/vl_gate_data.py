#!/usr/bin/env python3
"""vl_gate_data.py IMAGE_DIR TEXT N OUT.jsonl [CHARS]: a LLaVA-style JSONL for the FP8 numerics gate
of Qwen3-VL (a long run whose loss FP8 must follow bf16's): N samples, each one of the real photographs
in IMAGE_DIR (the scikit-image files that scripts/setup.sh unpacks, its small test patterns skipped)
in turn, a fixed question, and as the answer the next CHARS (default 1600) characters of TEXT (real
prose, e.g. the King James Bible in the cache), cut at a space. The loss is then mostly the text's, on
data a model cannot memorize in one pass; the images keep the vision tower and DeepStack in it."""
import json
import os
import sys

PHOTOS = ["astronaut.png", "brick.png", "camera.png", "cell.png", "chelsea.png", "clock_motion.png", "coffee.png",
          "coins.png", "color.png", "grass.png", "gravel.png", "horse.png", "hubble_deep_field.jpg", "logo.png",
          "moon.png", "motorcycle_left.png", "page.png", "retina.jpg", "rocket.jpg", "text.png"]


def main():
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    root, text_path, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    chars = int(sys.argv[5]) if len(sys.argv) == 6 else 1600
    photos = [p for p in PHOTOS if os.path.exists(os.path.join(root, p))]
    if not photos:
        sys.exit("vl_gate_data: none of the photographs is in %s" % root)
    text = " ".join(open(text_path, encoding="utf-8", errors="replace").read().split())
    pos = 0
    with open(out + ".tmp", "w") as f:
        for i in range(n):
            if pos + chars >= len(text):
                pos = 0
            end = text.rfind(" ", pos, pos + chars)
            end = end if end > pos else pos + chars
            answer = text[pos:end]
            pos = end + 1
            f.write(json.dumps({"id": "gate%05d" % i, "image": photos[i % len(photos)],
                                "conversations": [{"from": "human", "value": "<image>\nRead me a passage."},
                                                  {"from": "gpt", "value": answer}]}) + "\n")
    os.replace(out + ".tmp", out)
    print("vl_gate_data: %d samples, %d photographs, %d characters of %s each" % (n, len(photos), chars, text_path))


if __name__ == "__main__":
    main()
