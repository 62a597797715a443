#!/usr/bin/env python3
"""hf_tokenizer_check.py: transformers loads an ljperf export's tokenizer as it loads the
original files: the same class from AutoTokenizer, no warning (the "incorrect regex pattern"
one included), the same ids for a few texts, and config.json / generation_config.json read by
AutoConfig and GenerationConfig without a warning.

    python3 scripts/gpu/hf_tokenizer_check.py NAME=ORIG_DIR:EXPORT_DIR [NAME=ORIG_DIR:EXPORT_DIR ...]

ORIG_DIR holds the tokenizer files as published (tokenizer.json, tokenizer_config.json);
EXPORT_DIR an export's hf/ directory (the weights are not read). Runs offline
(HF_HUB_OFFLINE=1). Prints one line per check, PASS or FAIL, and the transformers version;
exits 1 on a FAIL."""
import logging
import os
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import transformers  # noqa: E402
from transformers import AutoConfig, AutoTokenizer, GenerationConfig  # noqa: E402

TEXTS = ["In the beginning God created the heaven and the earth.",
         "Numbers 12345 and 3.14159, code: def f(x): return x**2\n\n\ttabs",
         "Unicode: naïve café, 東京, Ελληνικά, emoji 🙂 and <|endoftext|> as text."]


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def load(what, fn, *args):
    """fn(*args) with transformers' warnings (its logger and Python's warnings) captured."""
    cap = Capture()
    log = logging.getLogger("transformers")
    log.addHandler(cap)
    transformers.logging.set_verbosity_warning()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            obj = fn(*args)
        finally:
            log.removeHandler(cap)
    msgs = cap.messages + [str(w.message) for w in caught]
    return obj, msgs


fails = 0


def report(ok, text):
    global fails
    print(("PASS " if ok else "FAIL ") + text)
    fails += 0 if ok else 1


print(f"transformers {transformers.__version__}")
for arg in sys.argv[1:]:
    name, dirs = arg.split("=", 1)
    orig, export = dirs.split(":", 1)
    t0, w0 = load("original", AutoTokenizer.from_pretrained, orig)
    t1, w1 = load("export", AutoTokenizer.from_pretrained, export)
    c0, c1 = type(t0).__name__, type(t1).__name__
    print(f"{name}: original {c0}, export {c1}")
    for m in w0:
        print(f"  original warns: {m}")
    for m in w1:
        print(f"  export warns: {m}")
    report(c0 == c1, f"{name}: AutoTokenizer class {c1} (the original's: {c0})")
    report(not w1, f"{name}: the export's tokenizer loads without warnings ({len(w1)})")
    report(not any("regex" in m for m in w1), f"{name}: no 'incorrect regex pattern' warning")
    for i, text in enumerate(TEXTS):
        a, b = t0(text)["input_ids"], t1(text)["input_ids"]
        # the export prepends BOS when the model was trained with it (Llama 3's tokenizer.json does too)
        same = a == b or (t1.bos_token_id is not None and b == [t1.bos_token_id] + a) or (
            t0.bos_token_id is not None and a == [t0.bos_token_id] + b)
        report(same, f"{name}: text {i}: the same ids ({len(b)} tokens)")
    cfg, wc = load("config", AutoConfig.from_pretrained, export)
    print(f"{name}: config {type(cfg).__name__}, transformers_version {getattr(cfg, 'transformers_version', None)}, "
          f"dtype {getattr(cfg, 'dtype', getattr(cfg, 'torch_dtype', None))}")
    for m in wc:
        print(f"  config warns: {m}")
    report(not wc, f"{name}: AutoConfig reads config.json without warnings ({len(wc)})")
    gc, wg = load("generation", GenerationConfig.from_pretrained, export)
    report(not wg and gc.eos_token_id is not None, f"{name}: GenerationConfig bos {gc.bos_token_id} eos {gc.eos_token_id}")
sys.exit(1 if fails else 0)
