#!/usr/bin/env python3
"""ncu_summary.py CSV [STEPS]: per-kernel time of an `ncu --metrics gpu__time_duration.sum --csv`
log, summed by kernel name, divided by STEPS (the steps the profiled program ran, warm-up
included; default 2), largest first. Prints the share of each kernel and the total."""
import collections
import csv
import re
import sys

path = sys.argv[1]
steps = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
with open(path) as f:
    lines = [l for l in f if l.startswith('"')]
tot = collections.defaultdict(float)
cnt = collections.Counter()
n = 0
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    short = re.sub(r"\(.*", "", r["Kernel Name"])[:90]
    tot[short] += float(r["Metric Value"])
    cnt[short] += 1
    n += 1
all_ns = sum(tot.values())
print("%d kernels, %.1f ms in all (%g steps + set-up)" % (n, all_ns / 1e6, steps))
print("%-90s %6s %10s %6s" % ("kernel", "count", "ms/step", "share"))
for k in sorted(tot, key=lambda k: -tot[k])[:40]:
    print("%-90s %6d %10.3f %5.1f%%" % (k, cnt[k], tot[k] / steps / 1e6, 100 * tot[k] / all_ns))
